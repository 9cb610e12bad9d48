//! The file sink: JSON Lines output for replays and training sets. Every worker encodes its
//! own records into lines (one per feature row or dead letter, one per row of a scored batch),
//! so encoding runs in parallel; one writer instance (on the worker of instance 0) receives
//! the encoded batches and hands them to its file's thread (`file_writer.rs`), which
//! writes them and makes them durable when the input ends and before every checkpoint epoch
//! passes; write errors are counted as delivery failures, which fail the run.
//! Its lines are counted as the sink's instance 0 (records in: lines received; out and bytes:
//! lines written). A run restored from a checkpoint appends (at-least-once: rows after the
//! checkpoint may appear twice, with equal score ids), after cutting the unfinished last line
//! a killed run may have left; other runs truncate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use serde::{de::DeserializeOwned, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::Operator as _;
use timely::dataflow::Stream;

use weir_features::vocab::Tick;

use crate::epoch_sink::epoch_sink;
use crate::epochs::{CheckpointStream, EpochClock};
use crate::error::{OperatorError, Result};
use crate::file_writer::{EncodedLines, FileWriter, WriteCounters};
use crate::metrics::{JobMetrics, Operator};
use crate::placement::Placement;

/// Where and how a file sink writes.
#[derive(Clone, Debug)]
pub struct FileSinkConfig {
    /// Output file (created or truncated).
    pub path: PathBuf,
    /// Worker layout.
    pub placement: Placement,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Which sink it is, the `operator` label of its counters.
    pub operator: Operator,
    /// Checkpoint epochs (the file is flushed and synced before each one passes).
    pub epochs: EpochClock,
    /// Append to an existing file (a run restored from a checkpoint) instead of truncating it.
    pub append: bool,
}

/// The lines records encode to, appended to their batch's buffer: each [`Lines::line`] is one.
pub struct Lines<'a> {
    buf: &'a mut Vec<u8>,
    count: u64,
}

impl Lines<'_> {
    /// Appends the line `write` writes (without its newline; it is added).
    pub fn line(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(self.buf);
        self.buf.push(b'\n');
        self.count += 1;
    }
}

/// Extension trait: `stream.jsonl_sink(config, encode, counter)`.
pub trait JsonlSink<'scope, T> {
    /// Writes every record as the lines `encode(record, lines)` appends to `lines`;
    /// `counter` picks the metric counting written lines. Returns the sink's checkpoint
    /// stream (see [`crate::epoch_sink`]).
    fn jsonl_sink(
        self,
        config: FileSinkConfig,
        encode: impl FnMut(&T, &mut Lines<'_>) + 'static,
        counter: fn(&JobMetrics) -> &Counter,
    ) -> Result<CheckpointStream<'scope>>;
}

/// Cuts a regular file's last line when it has no newline: the line an earlier run was
/// writing when it was killed (its writer stages 1 MiB at a time, so a kill can end the file
/// anywhere in a line). A restored run appends after it; the rows of that line come again
/// from the checkpoint, like every row after it. Returns the bytes cut (logged).
fn cut_partial_last_line(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    // Only a regular file: a pipe or terminal (`/dev/stdout`) is neither read nor cut.
    match std::fs::metadata(path) {
        Ok(kind) if kind.is_file() => {}
        Ok(_) => return Ok(0),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    // Backwards in chunks, to the last newline.
    let mut chunk = vec![0; 64 << 10];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let bytes = &mut chunk[..(end - start) as usize];
        file.read_exact_at(bytes, start)?;
        if let Some(at) = memchr::memrchr(b'\n', bytes) {
            end = start + at as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end)?;
        file.sync_all()?;
        let (path, cut) = (path.display(), len - end);
        tracing::warn!(%path, bytes = cut, "cut the output's unfinished last line (the run before was stopped while writing it)");
    }
    Ok(len - end)
}

/// The buffer for `records` records encoding to about `record_bytes` each, an eighth over so
/// that a batch of slightly longer lines (longer keys, more digits) fits without growing.
fn buffer_for(records: usize, record_bytes: usize) -> usize {
    records.saturating_mul(record_bytes + record_bytes / 8)
}

impl<'scope, T> JsonlSink<'scope, T> for Stream<'scope, Tick, Vec<T>>
where
    T: Serialize + DeserializeOwned + Send + Clone + 'static,
{
    fn jsonl_sink(
        self,
        config: FileSinkConfig,
        mut encode: impl FnMut(&T, &mut Lines<'_>) + 'static,
        counter: fn(&JobMetrics) -> &Counter,
    ) -> Result<CheckpointStream<'scope>> {
        let writer_worker = config.placement.worker_of(0);
        let writer = if self.scope().index() == writer_worker {
            if config.append {
                cut_partial_last_line(&config.path).map_err(|source| {
                    OperatorError::OutputFile {
                        path: config.path.clone(),
                        source,
                    }
                })?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(config.append)
                .truncate(!config.append)
                .open(&config.path);
            let file = file.map_err(|source| OperatorError::OutputFile {
                path: config.path.clone(),
                source,
            })?;
            let counters = WriteCounters {
                lines: counter,
                metrics: config.metrics.clone(),
                flow: config.metrics.sink_flow(config.operator, 0),
            };
            let writer = FileWriter::start(file, config.path.clone(), counters);
            Some(writer.map_err(|source| OperatorError::OutputFile {
                path: config.path.clone(),
                source,
            })?)
        } else {
            None
        };
        // Bytes per record of the last batch, to size the next one's buffer at once: a buffer
        // that grows while it is written copies what it holds, into fresh pages, at every
        // doubling (most reallocations of a features run before this hint).
        let mut record_bytes = 0;
        let encoded = self.unary::<CapacityContainerBuilder<Vec<EncodedLines>>, _, _, _>(
            Pipeline,
            "JsonlEncode",
            move |_, _| {
                move |input, output| {
                    input.for_each(|time, batch| {
                        let mut bytes = Vec::with_capacity(buffer_for(batch.len(), record_bytes));
                        let mut lines = Lines {
                            buf: &mut bytes,
                            count: 0,
                        };
                        for record in batch.iter() {
                            encode(record, &mut lines);
                        }
                        let count = lines.count;
                        record_bytes = bytes.len().div_ceil(batch.len().max(1));
                        if count > 0 {
                            output.session(&time).give(EncodedLines { bytes, count });
                        }
                    });
                }
            },
        );
        Ok(epoch_sink(
            encoded,
            Exchange::new(move |_: &EncodedLines| writer_worker as u64),
            "JsonlSink",
            config.epochs,
            writer,
        ))
    }
}

#[cfg(test)]
mod tests {
    use weir_testkit::files::Scratch;

    use super::cut_partial_last_line;

    #[test]
    fn an_unfinished_last_line_is_cut_and_whole_lines_are_kept() {
        let dir = Scratch::new("partial-line");
        let path = dir.path().join("out.jsonl");
        let long = "x".repeat(100_000);
        let cases = [
            (String::new(), ""),
            ("a\nb\n".to_owned(), "a\nb\n"),
            ("a\nb\n{\"key\":".to_owned(), "a\nb\n"),
            ("no newline at all".to_owned(), ""),
            // The last newline more than one read chunk before the end.
            (format!("a\n{long}"), "a\n"),
        ];
        for (held, kept) in cases {
            std::fs::write(&path, &held).expect("the earlier output");
            let cut = cut_partial_last_line(&path).expect("cut");
            assert_eq!(std::fs::read_to_string(&path).expect("read"), kept);
            assert_eq!(cut as usize, held.len() - kept.len());
        }
        let missing = dir.path().join("missing.jsonl");
        assert_eq!(cut_partial_last_line(&missing).expect("nothing to cut"), 0);
        // A device (as `/dev/stdout` may be) is left alone, not opened to read.
        let device = std::path::Path::new("/dev/null");
        assert_eq!(cut_partial_last_line(device).expect("not a file"), 0);
    }
}
