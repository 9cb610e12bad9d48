//! Background snapshot writes of one instance of a key-grouped stateful operator (DESIGN.md §5,
//! "a writer holds its capability for E until its files are durable"); the window operator is
//! one, under its operator name. At an epoch the operator encodes the state shards that changed
//! since their last snapshot (e.g. [`StateShards::changed_snapshots`]) on the worker — the only
//! pause the dataflow sees, proportional to the changed state — and hands the bytes to this
//! instance's writer thread. The thread writes and fsyncs the changed shards as one bundle file
//! `<operator>/kg-<lo>-<hi>` (the instance's range), lists the older bundles' sections for the
//! unchanged shards, and wakes the operator, which keeps the epoch's capability on its
//! checkpoint stream until then, sends the entries to the committer and lets the capability go.
//!
//! A failed write fails its epoch (the manifest is not committed) and forgets the shards' files;
//! the operator then marks every shard changed so the next epoch is complete again. The same
//! happens when the files the instance still lists hold more than twice its live state (old
//! bundles whose other sections were superseded): the next complete snapshot lets retention
//! delete them.
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
use crate::error::{OperatorError, Result};
use crate::metrics::JobMetrics;

/// A snapshot to write: the epoch and the encoded changed shards.
struct Job {
    tick: Tick,
    changed: Vec<ShardSnapshot>,
    encode: Duration,
}

/// What the thread reports for an epoch.
struct Done {
    tick: Tick,
    /// Every shard's entry, or `None` when the epoch failed.
    entries: Option<Vec<SnapshotEntry>>,
    /// The listed files hold much more than the live state: write every shard next time.
    compact: bool,
}

/// Listed files may hold this many times the live state before a complete snapshot.
const MAX_SPACE_AMPLIFICATION: u64 = 2;

/// One operator instance's writer thread and the epochs it has not finished.
pub struct SnapshotWriter {
    jobs: Sender<Job>,
    done: Receiver<Done>,
    pending: BTreeMap<Tick, Capability<Tick>>,
}

impl SnapshotWriter {
    /// Starts the writer thread of the instance of `operator` owning `range`, with `shards`
    /// state shards.
    pub fn start(
        store: Arc<dyn SnapshotStore>,
        operator: &str,
        range: KeyGroupRange,
        shards: usize,
        metrics: Arc<JobMetrics>,
        activator: SyncActivator,
    ) -> Result<SnapshotWriter> {
        let (jobs, inbox) = channel::<Job>();
        let (outbox, done) = channel();
        let operator = operator.to_owned();
        std::thread::Builder::new()
            .name(format!("weir-snapshot-{}-{}", range.lo, range.hi))
            .spawn(move || {
                let mut latest: Vec<Option<SnapshotEntry>> = vec![None; shards];
                for job in inbox {
                    let target = (operator.as_str(), range);
                    let entries =
                        write_changed(store.as_ref(), target, &mut latest, &job, &metrics);
                    let compact = entries.as_deref().is_some_and(amplified);
                    let done = Done {
                        tick: job.tick,
                        entries,
                        compact,
                    };
                    if outbox.send(done).is_err() || activator.activate().is_err() {
                        return;
                    }
                }
            })
            .map_err(OperatorError::WriterThread)?;
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
    /// those capabilities. Returns false when the next snapshot must be complete (an epoch
    /// failed, or old files should be freed).
    pub fn collect(&mut self, mut emit: impl FnMut(&Capability<Tick>, CheckpointPart)) -> bool {
        let mut incremental = true;
        while let Ok(done) = self.done.try_recv() {
            incremental &= !done.compact;
            let Some(capability) = self.pending.remove(&done.tick) else {
                continue;
            };
            match done.entries {
                Some(entries) => entries
                    .into_iter()
                    .for_each(|e| emit(&capability, CheckpointPart::Snapshot(e))),
                None => incremental = false,
            }
        }
        incremental
    }
}

/// Writes the changed shards of `job` as one bundle of `operator`'s `range` and returns the
/// entries of every shard (the new sections and `latest`'s for the others), or `None` when the
/// write failed or a shard has no file yet.
fn write_changed(
    store: &dyn SnapshotStore,
    (operator, range): (&str, KeyGroupRange),
    latest: &mut [Option<SnapshotEntry>],
    job: &Job,
    metrics: &JobMetrics,
) -> Option<Vec<SnapshotEntry>> {
    let started = Instant::now();
    let sections: Vec<(KeyGroupRange, &[u8])> = job
        .changed
        .iter()
        .map(|s| (KeyGroupRange { lo: s.lo, hi: s.hi }, s.bytes.as_slice()))
        .collect();
    let mut bytes = 0;
    if !sections.is_empty() {
        match store.write_bundle(Epoch(job.tick), operator, range, &sections) {
            Ok(entries) => {
                bytes = entries.first().map_or(0, SnapshotEntry::file_size);
                for (shard, entry) in job.changed.iter().zip(entries) {
                    *latest.get_mut(shard.index)? = Some(entry);
                }
            }
            Err(error) => {
                tracing::error!(epoch = job.tick, operator, %range, %error, "snapshot failed; the epoch will not be committed");
                for shard in &job.changed {
                    *latest.get_mut(shard.index)? = None;
                }
                return None;
            }
        }
    }
    metrics.checkpoint_written(
        u64::from(!sections.is_empty()),
        bytes,
        job.encode,
        job.encode + started.elapsed(),
    );
    latest.iter().cloned().collect()
}

/// Whether the distinct files `entries` point into hold more than
/// [`MAX_SPACE_AMPLIFICATION`] times the bytes the entries use.
fn amplified(entries: &[SnapshotEntry]) -> bool {
    let live: u64 = entries.iter().map(|e| e.size).sum();
    let files: BTreeMap<(Option<u64>, String), u64> = entries
        .iter()
        .map(|e| ((e.stored_in.map(|s| s.0), e.file_name()), e.file_size()))
        .collect();
    files.values().sum::<u64>() > MAX_SPACE_AMPLIFICATION * live.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_checkpoint::Section;

    fn entry(file_epoch: u64, lo: u32, size: u64, file_size: u64) -> SnapshotEntry {
        SnapshotEntry {
            operator: "window".to_owned(),
            range: KeyGroupRange { lo, hi: lo + 1 },
            size,
            xxh3: 0,
            stored_in: Some(Epoch(file_epoch)),
            section: Some(Section {
                file: KeyGroupRange { lo: 0, hi: 4 },
                offset: 0,
                file_size,
            }),
        }
    }

    #[test]
    fn old_bundles_holding_mostly_superseded_sections_ask_for_a_complete_snapshot() {
        // One full bundle of 4 x 100 bytes, still listed for every shard: no waste.
        let fresh: Vec<_> = (0..4).map(|kg| entry(1, kg, 100, 428)).collect();
        assert!(!amplified(&fresh));
        // Two shards rewritten in their own bundles: 684 bytes of files for 400 live.
        let mut moved = vec![entry(1, 0, 100, 428), entry(1, 3, 100, 428)];
        moved.extend((1..3).map(|kg| entry(u64::from(kg) + 1, kg, 100, 128)));
        assert!(!amplified(&moved));
        // Three: the old file serves 100 of its 428 bytes, 812 bytes for 400 live.
        let mut moved = vec![entry(1, 0, 100, 428)];
        moved.extend((1..4).map(|kg| entry(u64::from(kg) + 1, kg, 100, 128)));
        assert!(amplified(&moved));
        // A huge old bundle for one small live shard.
        let wasteful = vec![entry(1, 0, 10, 4_000), entry(2, 1, 10, 38)];
        assert!(amplified(&wasteful));
    }
}
