//! Background snapshot writes of one window instance (DESIGN.md §5, "a writer holds its
//! capability for E until its files are durable"). At an epoch the window operator encodes its
//! state on the worker — the only pause the dataflow sees — and hands the bytes to this
//! instance's writer thread, which writes and fsyncs the file and wakes the operator. The
//! operator keeps the epoch's capability on its checkpoint stream until the write is done, then
//! sends the file's entry to the committer and lets the capability go.

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use timely::dataflow::operators::Capability;
use timely::scheduling::SyncActivator;

use weir_checkpoint::{KeyGroupRange, SnapshotEntry, SnapshotStore};
use weir_features::vocab::{Epoch, Tick};

use crate::epochs::CheckpointPart;
use crate::metrics::JobMetrics;
use crate::window_features::WINDOW_OPERATOR;

/// A snapshot to write: the epoch and the encoded state.
struct Job {
    tick: Tick,
    bytes: Vec<u8>,
    encode_us: u64,
}

/// One window instance's writer thread and the epochs it has not finished.
pub(crate) struct SnapshotWriter {
    jobs: Sender<Job>,
    done: Receiver<(Tick, Option<SnapshotEntry>)>,
    pending: BTreeMap<Tick, Capability<Tick>>,
}

impl SnapshotWriter {
    /// Starts the writer thread of the instance owning `range`.
    pub fn start(
        store: Arc<dyn SnapshotStore>,
        range: KeyGroupRange,
        metrics: Arc<JobMetrics>,
        activator: SyncActivator,
    ) -> std::io::Result<SnapshotWriter> {
        let (jobs, inbox) = channel::<Job>();
        let (outbox, done) = channel();
        std::thread::Builder::new()
            .name(format!("weir-snapshot-{}-{}", range.lo, range.hi))
            .spawn(move || {
                for job in inbox {
                    let started = Instant::now();
                    let written =
                        store.write_snapshot(Epoch(job.tick), WINDOW_OPERATOR, range, &job.bytes);
                    let entry = match written {
                        Ok(entry) => {
                            let took = started.elapsed() + std::time::Duration::from_micros(job.encode_us);
                            metrics.checkpoint_written(entry.size, took);
                            Some(entry)
                        }
                        Err(error) => {
                            tracing::error!(epoch = job.tick, %error, "window snapshot failed; the epoch will not be committed");
                            None
                        }
                    };
                    if outbox.send((job.tick, entry)).is_err() || activator.activate().is_err() {
                        return;
                    }
                }
            })?;
        Ok(SnapshotWriter {
            jobs,
            done,
            pending: BTreeMap::new(),
        })
    }

    /// Queues the snapshot of epoch `tick`; `capability` is held until it is written.
    pub fn submit(
        &mut self,
        tick: Tick,
        capability: Capability<Tick>,
        bytes: Vec<u8>,
        encode_us: u64,
    ) {
        if self
            .jobs
            .send(Job {
                tick,
                bytes,
                encode_us,
            })
            .is_ok()
        {
            self.pending.insert(tick, capability);
        } else {
            tracing::error!(
                epoch = tick,
                "the snapshot writer thread is gone; the epoch will not be committed"
            );
        }
    }

    /// Sends the entries of finished snapshots with their epochs' capabilities, then releases
    /// those capabilities.
    pub fn collect(&mut self, mut emit: impl FnMut(&Capability<Tick>, CheckpointPart)) {
        while let Ok((tick, entry)) = self.done.try_recv() {
            let Some(capability) = self.pending.remove(&tick) else {
                continue;
            };
            if let Some(entry) = entry {
                emit(&capability, CheckpointPart::Snapshot(entry));
            }
        }
    }
}
