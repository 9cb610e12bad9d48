//! The file sink: JSON Lines output for replays and training sets. One writer instance (on the
//! worker of instance 0) receives every record, writes the lines its encoder makes of it (one
//! per feature row or dead letter, one per row of a scored batch) and flushes when its
//! input ends and before every checkpoint epoch passes; write errors are counted as delivery
//! failures, which fail the run. Its lines are counted as the sink's instance 0 (records in:
//! lines encoded; out and bytes: lines written). A run restored from a checkpoint appends (at-least-once: rows
//! after the checkpoint may appear twice, with equal score ids); other runs truncate.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use serde::{de::DeserializeOwned, Serialize};
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::Stream;

use weir_features::vocab::Tick;

use crate::epoch_sink::{epoch_sink, SinkWriter};
use crate::epochs::{CheckpointStream, EpochClock};
use crate::error::{OperatorError, Result};
use crate::metrics::{JobMetrics, Operator, SinkFlow};
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

/// The lines records encode to, appended to the writer's buffer: each [`Lines::line`] is one.
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
        encode: impl Fn(&T, &mut Lines<'_>) + 'static,
        counter: fn(&JobMetrics) -> &Counter,
    ) -> Result<CheckpointStream<'scope>>;
}

/// The one writer instance's file.
struct JsonlWriter<E> {
    out: BufWriter<File>,
    encode: E,
    /// A batch's lines, encoded before one write (kept: no allocation per batch).
    lines: Vec<u8>,
    counter: fn(&JobMetrics) -> &Counter,
    metrics: Arc<JobMetrics>,
    flow: SinkFlow,
    path: PathBuf,
}

impl<T, E: Fn(&T, &mut Lines<'_>) + 'static> SinkWriter<T> for JsonlWriter<E> {
    fn write(&mut self, batch: &mut Vec<T>) {
        self.lines.clear();
        let mut lines = Lines {
            buf: &mut self.lines,
            count: 0,
        };
        for record in batch.drain(..) {
            (self.encode)(&record, &mut lines);
        }
        let count = lines.count;
        self.flow.written(count);
        match self.out.write_all(&self.lines) {
            Ok(()) => {
                JobMetrics::add((self.counter)(&self.metrics), count);
                self.flow.acknowledged(count, self.lines.len());
            }
            Err(error) => {
                // Every line of the batch counts as lost; any loss fails the run.
                JobMetrics::add(&self.metrics.delivery_failures, count);
                tracing::error!(%error, path = %self.path.display(), "write failed");
            }
        }
    }

    fn flush(&mut self, _end_of_input: bool) -> bool {
        match self
            .out
            .flush()
            .and_then(|()| self.out.get_ref().sync_data())
        {
            Ok(()) => true,
            Err(error) => {
                JobMetrics::add(&self.metrics.delivery_failures, 1);
                tracing::error!(%error, path = %self.path.display(), "flush failed");
                false
            }
        }
    }
}

impl<'scope, T> JsonlSink<'scope, T> for Stream<'scope, Tick, Vec<T>>
where
    T: Serialize + DeserializeOwned + Send + Clone + 'static,
{
    fn jsonl_sink(
        self,
        config: FileSinkConfig,
        encode: impl Fn(&T, &mut Lines<'_>) + 'static,
        counter: fn(&JobMetrics) -> &Counter,
    ) -> Result<CheckpointStream<'scope>> {
        let writer_worker = config.placement.worker_of(0);
        let writer = if self.scope().index() == writer_worker {
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
            Some(JsonlWriter {
                out: BufWriter::new(file),
                encode,
                lines: Vec::new(),
                counter,
                metrics: config.metrics.clone(),
                flow: config.metrics.sink_flow(config.operator, 0),
                path: config.path.clone(),
            })
        } else {
            None
        };
        Ok(epoch_sink(
            self,
            Exchange::new(move |_: &T| writer_worker as u64),
            "JsonlSink",
            config.epochs,
            writer,
        ))
    }
}
