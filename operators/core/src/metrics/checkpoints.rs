//! Checkpoint metrics: window snapshots written (files, bytes, time, the workers' pause),
//! epochs committed with their duration and size, the last commit's time (its age at scrape
//! time) and restores; the last few commits are kept to list ([`CheckpointMetrics::recent_commits`],
//! the status page).

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// Commits [`CheckpointMetrics::recent_commits`] lists.
const RECENT_COMMITS: usize = 5;

/// One committed checkpoint, as the status page lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitRecord {
    /// Its epoch (the tick it was taken at).
    pub epoch: u64,
    /// When its manifest was committed (Unix ms).
    pub committed_ms: u64,
    /// From the epoch's start to the commit, ms.
    pub duration_ms: u64,
    /// Bytes of the files its manifest names.
    pub bytes: u64,
}

/// Checkpoint counters and gauges of this process.
#[derive(Debug)]
pub struct CheckpointMetrics {
    /// Snapshot files written by window instances (one per changed state shard per epoch).
    pub snapshots_written: Counter,
    /// Bytes of those files.
    pub snapshot_bytes: Counter,
    /// Time spent encoding and writing them.
    pub snapshot_seconds: Counter<f64, AtomicU64>,
    /// Part of that time the window workers spent encoding (the dataflow's pause).
    pub snapshot_pause_seconds: Counter<f64, AtomicU64>,
    /// Checkpoint epochs committed (manifests written) by this process.
    pub committed: Counter,
    /// Checkpoints this run restored from (0 or 1 per process).
    pub restores: Counter,
    duration: Histogram,
    size: Gauge,
    last_commit: Gauge<f64, AtomicU64>,
    age: Gauge<f64, AtomicU64>,
    recent: Mutex<VecDeque<CommitRecord>>,
}

impl Default for CheckpointMetrics {
    fn default() -> Self {
        CheckpointMetrics {
            snapshots_written: Counter::default(),
            snapshot_bytes: Counter::default(),
            snapshot_seconds: Counter::default(),
            snapshot_pause_seconds: Counter::default(),
            committed: Counter::default(),
            restores: Counter::default(),
            // 10 ms to about 3 min, doubling.
            duration: Histogram::new(exponential_buckets(0.01, 2.0, 15)),
            size: Gauge::default(),
            last_commit: Gauge::default(),
            age: Gauge::default(),
            recent: Mutex::new(VecDeque::with_capacity(RECENT_COMMITS)),
        }
    }
}

impl CheckpointMetrics {
    /// Counts one instance's snapshot of an epoch: `files` files of `bytes` in all, encoded on
    /// the worker in `pause`, encoded and written in `took`.
    pub fn snapshot_written(&self, files: u64, bytes: u64, pause: Duration, took: Duration) {
        self.snapshots_written.inc_by(files);
        self.snapshot_bytes.inc_by(bytes);
        self.snapshot_pause_seconds.inc_by(pause.as_secs_f64());
        self.snapshot_seconds.inc_by(took.as_secs_f64());
    }

    /// Counts the committed manifest of `epoch`, of `bytes` (files it names), committed at
    /// `now_ms` for an epoch whose tick began at `epoch_start_ms`.
    pub fn record_commit(&self, epoch: u64, bytes: u64, epoch_start_ms: u64, now_ms: u64) {
        let duration_ms = now_ms.saturating_sub(epoch_start_ms);
        self.committed.inc();
        self.duration.observe(duration_ms as f64 / 1e3);
        self.size.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        self.last_commit.set(now_ms as f64 / 1e3);
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() == RECENT_COMMITS {
            recent.pop_back();
        }
        recent.push_front(CommitRecord {
            epoch,
            committed_ms: now_ms,
            duration_ms,
            bytes,
        });
    }

    /// The last few commits of this process, newest first.
    pub fn recent_commits(&self) -> Vec<CommitRecord> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.iter().copied().collect()
    }

    /// Sets the last commit's age at `now_ms` (before a scrape).
    pub(crate) fn refresh(&self, now_ms: u64) {
        let last = self.last_commit.get();
        self.age.set(if last > 0.0 {
            (now_ms as f64 / 1e3 - last).max(0.0)
        } else {
            f64::NAN
        });
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "snapshot_files",
            "Window-state snapshot files written (one per changed shard range per epoch)",
            self.snapshots_written.clone(),
        );
        r.register_with_unit(
            "snapshot",
            "Bytes of window-state snapshot files written",
            Unit::Bytes,
            self.snapshot_bytes.clone(),
        );
        r.register_with_unit(
            "snapshot_write",
            "Time window instances spent encoding and writing snapshots",
            Unit::Seconds,
            self.snapshot_seconds.clone(),
        );
        r.register_with_unit(
            "snapshot_pause",
            "Part of the snapshot time the window workers spent encoding (the dataflow's pause)",
            Unit::Seconds,
            self.snapshot_pause_seconds.clone(),
        );
        r.register(
            "checkpoints_committed",
            "Checkpoint manifests committed by this process",
            self.committed.clone(),
        );
        r.register(
            "checkpoint_restores",
            "Checkpoints this process restored from at start",
            self.restores.clone(),
        );
        r.register_with_unit(
            "checkpoint_duration",
            "From a checkpoint epoch's start to its manifest committed",
            Unit::Seconds,
            self.duration.clone(),
        );
        r.register_with_unit(
            "checkpoint_size",
            "Bytes of the files the last committed manifest names",
            Unit::Bytes,
            self.size.clone(),
        );
        r.register_with_unit(
            "checkpoint_last_commit_timestamp",
            "When the last checkpoint was committed (Unix time)",
            Unit::Seconds,
            self.last_commit.clone(),
        );
        r.register_with_unit(
            "checkpoint_age",
            "Time since the last checkpoint was committed (NaN before the first)",
            Unit::Seconds,
            self.age.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{CheckpointMetrics, CommitRecord, RECENT_COMMITS};

    #[test]
    fn the_last_commits_are_kept_newest_first() {
        let checkpoints = CheckpointMetrics::default();
        for epoch in 1..=7u64 {
            checkpoints.record_commit(epoch * 10, epoch * 100, epoch * 1_000, epoch * 1_000 + 40);
        }
        let recent = checkpoints.recent_commits();
        assert_eq!(recent.len(), RECENT_COMMITS);
        assert_eq!(
            recent[0],
            CommitRecord {
                epoch: 70,
                committed_ms: 7_040,
                duration_ms: 40,
                bytes: 700,
            }
        );
        let epochs: Vec<u64> = recent.iter().map(|c| c.epoch).collect();
        assert_eq!(epochs, [70, 60, 50, 40, 30]);
        assert_eq!(checkpoints.committed.get(), 7);
    }
}
