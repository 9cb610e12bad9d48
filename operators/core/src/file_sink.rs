//! The file sink: JSON Lines output for replays and training sets. One writer instance (on the
//! worker of instance 0) receives every record, writes one line per record and flushes when its
//! input ends; write errors are counted as delivery failures, which fail the run.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::Stream;

use weir_features::vocab::Tick;

use crate::metrics::JobMetrics;
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
}

/// Extension trait: `stream.jsonl_sink(config, encode, counter)`.
pub trait JsonlSink<T> {
    /// Writes every record as one line `encode(record)`; `counter` picks the metric counting
    /// written lines.
    fn jsonl_sink(
        self,
        config: FileSinkConfig,
        encode: impl Fn(&T) -> Vec<u8> + 'static,
        counter: fn(&JobMetrics) -> &AtomicU64,
    ) -> std::io::Result<()>;
}

impl<T> JsonlSink<T> for Stream<'_, Tick, Vec<T>>
where
    T: Serialize + DeserializeOwned + Send + Clone + 'static,
{
    fn jsonl_sink(
        self,
        config: FileSinkConfig,
        encode: impl Fn(&T) -> Vec<u8> + 'static,
        counter: fn(&JobMetrics) -> &AtomicU64,
    ) -> std::io::Result<()> {
        let writer_worker = config.placement.worker_of(0);
        let mut writer = if self.scope().index() == writer_worker {
            let file = File::create(&config.path).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot create {}: {e}", config.path.display()),
                )
            })?;
            Some(BufWriter::new(file))
        } else {
            None
        };
        let metrics = config.metrics.clone();
        let path = config.path.clone();
        self.sink(
            Exchange::new(move |_: &T| writer_worker as u64),
            "JsonlSink",
            move |(input, frontier)| {
                input.for_each(|_time, batch| {
                    let Some(out) = writer.as_mut() else { return };
                    for record in batch.drain(..) {
                        let mut line = encode(&record);
                        line.push(b'\n');
                        match out.write_all(&line) {
                            Ok(()) => JobMetrics::add(counter(&metrics), 1),
                            Err(error) => {
                                JobMetrics::add(&metrics.delivery_failures, 1);
                                tracing::error!(%error, path = %path.display(), "write failed");
                            }
                        }
                    }
                });
                if frontier.is_empty() {
                    if let Some(mut out) = writer.take() {
                        if let Err(error) = out.flush() {
                            JobMetrics::add(&metrics.delivery_failures, 1);
                            tracing::error!(%error, path = %path.display(), "flush failed");
                        }
                    }
                }
            },
        );
        Ok(())
    }
}
