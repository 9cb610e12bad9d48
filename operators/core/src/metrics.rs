//! Job-wide counters and the window-close → score-delivered latency histogram, shared by all
//! workers of a process. The run summary and the cluster totals read them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;

use weir_features::dead_letter::DeadLetterReason;

/// Counters of one job run in this process.
#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Records read from the source (good and bad).
    pub records_in: AtomicU64,
    /// Records decoded into events.
    pub events_in: AtomicU64,
    /// Windows fired (feature rows emitted, revisions included).
    pub windows_fired: AtomicU64,
    /// Scores produced (successful inferences).
    pub scores: AtomicU64,
    /// Inferences that failed (score records with an error field).
    pub inference_errors: AtomicU64,
    /// Missing feature values replaced by the manifest's defaults.
    pub defaults_used: AtomicU64,
    /// Score records acknowledged by the sink.
    pub scores_delivered: AtomicU64,
    /// Feature rows written (features-only runs).
    pub rows_written: AtomicU64,
    /// Dead letters acknowledged by the dead-letter sink.
    pub dead_letters_delivered: AtomicU64,
    /// Records the sinks failed to deliver (a non-zero value fails the run).
    pub delivery_failures: AtomicU64,
    /// Input reads that failed (an I/O error in an input file): the sources stop without
    /// declaring the end of input, and a non-zero value fails the run.
    pub source_read_failures: AtomicU64,
    /// Source instances that stopped on the stop flag (a stop signal) before the end of their
    /// input: a bounded run with any is incomplete.
    pub sources_stopped: AtomicU64,
    /// Snapshot files written by window instances (one per changed state shard per epoch).
    pub snapshots_written: AtomicU64,
    /// Bytes of those files.
    pub snapshot_bytes: AtomicU64,
    /// Time spent encoding and writing them, in microseconds.
    pub snapshot_us: AtomicU64,
    /// Part of that time the window workers spent encoding (the dataflow's pause), in
    /// microseconds.
    pub snapshot_pause_us: AtomicU64,
    /// Times a score instance reached its in-flight bound (and paused the sources).
    pub backpressure_episodes: AtomicU64,
    /// Source activations that skipped reading because of the score backlog
    /// ([`crate::backpressure::ScoreBacklog`]).
    pub source_pauses: AtomicU64,
    /// Times a source instance started holding back because the job's progress (the scores,
    /// in any process) lagged more than `[runtime] max_lag` behind its tick.
    pub lag_episodes: AtomicU64,
    /// Checkpoint epochs committed (manifests written).
    pub checkpoints_committed: AtomicU64,
    dead_letters: [AtomicU64; DeadLetterReason::ALL.len()],
    /// Late records by source partition (DESIGN.md §2: "counted per partition").
    late_by_partition: Mutex<BTreeMap<i32, u64>>,
    latency_us: Mutex<Option<Histogram<u64>>>,
}

impl JobMetrics {
    /// Counts one instance's snapshot of an epoch: `files` files of `bytes` in all, encoded on
    /// the worker in `pause`, encoded and written in `took`.
    pub fn checkpoint_written(
        &self,
        files: u64,
        bytes: u64,
        pause: std::time::Duration,
        took: std::time::Duration,
    ) {
        Self::add(&self.snapshots_written, files);
        Self::add(&self.snapshot_bytes, bytes);
        Self::add(&self.snapshot_pause_us, pause.as_micros() as u64);
        Self::add(&self.snapshot_us, took.as_micros() as u64);
    }

    /// Adds `n` to a counter.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Counts a dead letter by reason.
    pub fn dead_letter(&self, reason: DeadLetterReason) {
        self.dead_letters[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Dead letters produced so far, by reason (non-zero only).
    pub fn dead_letters_by_reason(&self) -> Vec<(DeadLetterReason, u64)> {
        DeadLetterReason::ALL
            .iter()
            .map(|r| (*r, self.dead_letters[*r as usize].load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Total dead letters produced.
    pub fn dead_letters_total(&self) -> u64 {
        self.dead_letters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Counts one late record read from `partition`. The window operator calls it next to
    /// [`JobMetrics::dead_letter`] with [`DeadLetterReason::Late`], which keeps the total.
    pub fn late(&self, partition: i32) {
        if let Ok(mut counts) = self.late_by_partition.lock() {
            *counts.entry(partition).or_insert(0) += 1;
        }
    }

    /// Late records so far by partition, in partition order (partitions with none are absent).
    pub fn late_by_partition(&self) -> Vec<(i32, u64)> {
        self.late_by_partition
            .lock()
            .map(|counts| counts.iter().map(|(p, n)| (*p, *n)).collect())
            .unwrap_or_default()
    }

    /// Records one window-close → delivered latency, in microseconds.
    pub fn record_latency_us(&self, micros: u64) {
        if let Ok(mut histogram) = self.latency_us.lock() {
            // 1 µs .. 1 h at 3 significant figures; longer waits saturate at 1 h.
            if histogram.is_none() {
                *histogram = Histogram::new_with_bounds(1, 3_600_000_000, 3).ok();
            }
            if let Some(histogram) = histogram.as_mut() {
                histogram.saturating_record(micros.max(1));
            }
        }
    }

    /// The `q`-quantile (0..=1) of recorded latencies in microseconds, if any were recorded.
    pub fn latency_quantile_us(&self, q: f64) -> Option<u64> {
        let histogram = self.latency_us.lock().ok()?;
        let histogram = histogram.as_ref().filter(|h| !h.is_empty())?;
        Some(histogram.value_at_quantile(q.clamp(0.0, 1.0)))
    }
}
