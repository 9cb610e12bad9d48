//! Background snapshot writes of one window instance (DESIGN.md §5, "a writer holds its
//! capability for E until its files are durable"). At an epoch the window operator encodes the
//! state shards that changed since their last snapshot ([`StateShards::changed_snapshots`]) on
//! the worker — the only pause the dataflow sees, proportional to the changed state — and hands
//! the bytes to this instance's writer thread. The thread writes and fsyncs one file per
//! changed shard, lists the older files of the unchanged shards, and wakes the operator, which
//! keeps the epoch's capability on its checkpoint stream until then, sends the entries to the
//! committer and lets the capability go.
//!
//! A failed write fails its epoch (the manifest is not committed) and forgets the shard's
//! file; the operator then marks every shard changed so the next epoch is complete again.
//!
//! [`StateShards::changed_snapshots`]: weir_features::state_shards::StateShards::changed_snapshots

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::dataflow::operators::Capability;
use timely::scheduling::SyncActivator;

use weir_checkpoint::{KeyGroupRange, SnapshotEntry, SnapshotStore};
use weir_features::state_shards::ShardSnapshot;
use weir_features::vocab::{Epoch, Tick};

use crate::epochs::CheckpointPart;
use crate::metrics::JobMetrics;
use crate::window_features::WINDOW_OPERATOR;

/// A snapshot to write: the epoch and the encoded changed shards.
struct Job {
    tick: Tick,
    changed: Vec<ShardSnapshot>,
    encode: Duration,
}

/// What the thread reports for an epoch: every shard's entry, or `None` when the epoch failed.
type Done = (Tick, Option<Vec<SnapshotEntry>>);

/// One window instance's writer thread and the epochs it has not finished.
pub(crate) struct SnapshotWriter {
    jobs: Sender<Job>,
    done: Receiver<Done>,
    pending: BTreeMap<Tick, Capability<Tick>>,
}

impl SnapshotWriter {
    /// Starts the writer thread of an instance with `shards` state shards.
    pub fn start(
        store: Arc<dyn SnapshotStore>,
        shards: usize,
        metrics: Arc<JobMetrics>,
        activator: SyncActivator,
    ) -> std::io::Result<SnapshotWriter> {
        let (jobs, inbox) = channel::<Job>();
        let (outbox, done) = channel();
        std::thread::Builder::new()
            .name("weir-snapshot".to_owned())
            .spawn(move || {
                let mut latest: Vec<Option<SnapshotEntry>> = vec![None; shards];
                for job in inbox {
                    let entries = write_changed(store.as_ref(), &mut latest, &job, &metrics);
                    if outbox.send((job.tick, entries)).is_err() || activator.activate().is_err() {
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
        changed: Vec<ShardSnapshot>,
        encode: Duration,
    ) {
        if self
            .jobs
            .send(Job {
                tick,
                changed,
                encode,
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
    /// those capabilities. Returns false when an epoch failed (the caller must make the next
    /// snapshot complete).
    pub fn collect(&mut self, mut emit: impl FnMut(&Capability<Tick>, CheckpointPart)) -> bool {
        let mut all_written = true;
        while let Ok((tick, entries)) = self.done.try_recv() {
            let Some(capability) = self.pending.remove(&tick) else {
                continue;
            };
            match entries {
                Some(entries) => entries
                    .into_iter()
                    .for_each(|e| emit(&capability, CheckpointPart::Snapshot(e))),
                None => all_written = false,
            }
        }
        all_written
    }
}

/// Writes the changed shards of `job` and returns the entries of every shard (the new files
/// and `latest`'s for the others), or `None` when a write failed or a shard has no file yet.
fn write_changed(
    store: &dyn SnapshotStore,
    latest: &mut [Option<SnapshotEntry>],
    job: &Job,
    metrics: &JobMetrics,
) -> Option<Vec<SnapshotEntry>> {
    let started = Instant::now();
    let (mut bytes, mut failed) = (0u64, false);
    for shard in &job.changed {
        let range = KeyGroupRange {
            lo: shard.lo,
            hi: shard.hi,
        };
        let written = store.write_snapshot(Epoch(job.tick), WINDOW_OPERATOR, range, &shard.bytes);
        let slot = latest.get_mut(shard.index)?;
        match written {
            Ok(entry) => {
                bytes += entry.size;
                *slot = Some(entry);
            }
            Err(error) => {
                tracing::error!(epoch = job.tick, %range, %error, "window snapshot failed; the epoch will not be committed");
                *slot = None;
                failed = true;
            }
        }
    }
    metrics.checkpoint_written(
        job.changed.len() as u64,
        bytes,
        job.encode,
        job.encode + started.elapsed(),
    );
    if failed {
        return None;
    }
    latest.iter().cloned().collect()
}
