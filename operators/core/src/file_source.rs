//! The file source: JSON Lines files read as a bounded input, one partition per file (offset =
//! line number), through the same decoding, per-partition watermarks and tick reports as the
//! Kafka source. Replays, backfills and training sets run the job's own feature code.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use timely::dataflow::Scope;

use weir_checkpoint::SourceOffset;
use weir_features::dead_letter::DeadLetter;
use weir_features::ownership::instance_for_partition;
use weir_features::record::Event;
use weir_features::vocab::{SourcePosition, Tick};
use weir_features::watermark::{PartitionWatermarks, SourceProgress};

use crate::clock::unix_ms;
use crate::error::{OperatorError, Result};
use crate::metrics::JobMetrics;
use crate::source::{resume_positions, RawRecord, RecordDecoder, SourceStreams};
use crate::source_operator::{build_placed_source, SourceReader, SourceStage};

/// Configuration of the file source stage.
#[derive(Clone, Debug)]
pub struct FileSourceConfig {
    /// Input files; file `i` is partition `i`.
    pub paths: Vec<PathBuf>,
    /// Instances (instance `i` reads files `f` with `f % parallelism == i`,
    /// [`instance_for_partition`]), tick, epochs and pacing (whose `stop` flag also stops
    /// every source on a read error).
    pub stage: SourceStage,
    /// Decoding of lines into events.
    pub decoder: RecordDecoder,
    /// Bounded out-of-orderness of event time.
    pub max_out_of_orderness_ms: i64,
    /// Lines read per activation at most.
    pub max_batch: usize,
    /// Where to resume, per file (partition), from a checkpoint: lines before `next_offset`
    /// are skipped.
    pub resume: BTreeMap<i32, SourceOffset>,
}

/// One open file of a source instance.
struct OpenFile {
    partition: i32,
    reader: BufReader<File>,
    next_line: i64,
    done: bool,
}

/// A file source instance.
struct FileReader {
    instance: u32,
    files: Vec<OpenFile>,
    watermarks: PartitionWatermarks,
    decoder: RecordDecoder,
    max_batch: usize,
    line: Vec<u8>,
    /// Set on a read error: every source stops without declaring the end of input.
    stop: Arc<AtomicBool>,
}

/// Builds the file source on every worker.
pub fn file_source<'scope>(
    scope: Scope<'scope, Tick>,
    config: FileSourceConfig,
) -> Result<SourceStreams<'scope>> {
    let name = format!("FileSource({} files)", config.paths.len());
    build_placed_source(scope, &name, config.stage.clone(), |instance| {
        FileReader::open(instance, &config)
    })
}

impl FileReader {
    fn open(instance: u32, config: &FileSourceConfig) -> Result<FileReader> {
        let now = unix_ms();
        // Idle detection is pointless for files: a file is never "caught up" until it is done.
        let mut watermarks = PartitionWatermarks::new(config.max_out_of_orderness_ms, u64::MAX);
        let mut files = Vec::new();
        for (partition, path) in config.paths.iter().enumerate() {
            if instance_for_partition(partition as i32, config.stage.parallelism)
                != instance as usize
            {
                continue;
            }
            let file = File::open(path).map_err(|source| OperatorError::InputFile {
                path: path.clone(),
                source,
            })?;
            watermarks.assign(partition as i32, now);
            let mut open = OpenFile {
                partition: partition as i32,
                reader: BufReader::new(file),
                next_line: 0,
                done: false,
            };
            if let Some(resume) = config.resume.get(&(partition as i32)) {
                watermarks.resume(open.partition, resume.watermark);
                open.skip_to(resume.next_offset, path)?;
            }
            files.push(open);
        }
        Ok(FileReader {
            instance,
            files,
            watermarks,
            decoder: config.decoder.clone(),
            max_batch: config.max_batch.max(1),
            line: Vec::new(),
            stop: config.stage.pacing.stop.clone(),
        })
    }
}

impl OpenFile {
    /// Skips the lines before `line` (resuming from a checkpoint).
    fn skip_to(&mut self, line: i64, path: &std::path::Path) -> Result<()> {
        let mut buffer = Vec::new();
        while self.next_line < line {
            buffer.clear();
            let read = self.reader.read_until(b'\n', &mut buffer);
            let read = read.map_err(|source| OperatorError::InputFile {
                path: path.to_owned(),
                source,
            })?;
            if read == 0 {
                return Err(OperatorError::ResumedPastEnd {
                    path: path.to_owned(),
                    lines: self.next_line,
                    resume_at: line,
                });
            }
            self.next_line += 1;
        }
        Ok(())
    }
}

impl SourceReader for FileReader {
    fn instance(&self) -> u32 {
        self.instance
    }

    /// Reads up to `max_batch` lines, round-robin over this instance's files in chunks, so
    /// every file's watermark moves forward together.
    fn poll(&mut self, now_ms: u64, events: &mut Vec<Event>, dead: &mut Vec<DeadLetter>) -> usize {
        let active = self.files.iter().filter(|f| !f.done).count().max(1);
        let per_file = (self.max_batch / active).max(1);
        let mut handled = 0;
        for file in self.files.iter_mut().filter(|f| !f.done) {
            for _ in 0..per_file {
                self.line.clear();
                match file.reader.read_until(b'\n', &mut self.line) {
                    Ok(0) => {
                        file.done = true;
                        self.watermarks.finish(file.partition);
                        break;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        // Ending the file here would skip its unread lines silently and flush
                        // every window as if the input were complete: the run stops and fails.
                        tracing::error!(%error, partition = file.partition, line = file.next_line, "cannot read the input file; stopping the job");
                        JobMetrics::add(&self.decoder.metrics.source_read_failures, 1);
                        self.stop.store(true, Ordering::SeqCst);
                        return handled;
                    }
                }
                let offset = file.next_line;
                file.next_line += 1;
                let payload = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                let payload = payload.strip_suffix(b"\r").unwrap_or(payload);
                if payload.is_empty() {
                    continue;
                }
                handled += 1;
                let position = SourcePosition {
                    partition: file.partition,
                    offset,
                };
                let record = RawRecord {
                    payload: Some(payload),
                    position,
                    timestamp: None,
                    key: None,
                };
                match self.decoder.push(record, now_ms, events, dead) {
                    Some(ts) => self.watermarks.observe(file.partition, ts, now_ms),
                    None => self.watermarks.touch(file.partition, now_ms),
                }
            }
        }
        // Finished files still count as progress: report them on the next poll.
        handled.max(usize::from(self.files.iter().any(|f| !f.done)))
    }

    fn progress(&self, now_ms: u64) -> SourceProgress {
        self.watermarks.progress(now_ms)
    }

    fn exclude_paused(&mut self, paused_ms: u64, now_ms: u64) {
        self.watermarks.exclude_paused(paused_ms, now_ms);
    }

    fn finished(&self) -> bool {
        self.files.iter().all(|f| f.done)
    }

    fn source_name(&self) -> &str {
        &self.decoder.source_name
    }

    fn positions(&self) -> BTreeMap<i32, SourceOffset> {
        let next = self.files.iter().map(|f| (f.partition, f.next_line));
        resume_positions(&self.watermarks, next)
    }
}
