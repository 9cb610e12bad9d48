//! The scoring stage's own counters ([`ScoreCounters`]): reloads, second-version changes,
//! canary rows, shadow errors, batches, split runs, in-flight high water and inference time.
//!
//! Written by the inference threads (`crate::model_set`, `crate::reload`,
//! `crate::inference_thread`) and the batcher, read by the job's summary; the job-wide
//! counters stay in `weir_operators::metrics::JobMetrics`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the scoring stage beyond [`JobMetrics`](weir_operators::metrics::JobMetrics):
/// reloads and the second version. Shared by the score instances of a process; each instance's
/// thread watches the registry and swaps on its own, so a reload, a failure or a second-version
/// change counts once per instance.
#[derive(Debug, Default)]
pub struct ScoreCounters {
    /// Successful hot reloads (the primary version was swapped).
    pub reloads: AtomicU64,
    /// Failed reload attempts of either version, and unreadable or invalid `CONTROL` files
    /// (what served kept serving); one per distinct failure and instance.
    pub reload_failures: AtomicU64,
    /// Changes of the second version that took effect: started, stopped, another version, or
    /// another role or share (`CONTROL`'s `canary` / `shadow` line).
    pub secondary_changes: AtomicU64,
    /// Rows scored by a canary version.
    pub canary_rows: AtomicU64,
    /// Rows whose shadow score failed (the primary score is unaffected).
    pub shadow_errors: AtomicU64,
    /// Batches scored.
    pub batches: AtomicU64,
    /// Session runs beyond the first of a version's rows, spent splitting runs that failed
    /// so that only rows failing alone get errors (`crate::bisect`).
    pub split_runs: AtomicU64,
    /// Most batches ever queued or running at once on one instance (high-water mark; never
    /// above `max_in_flight`).
    pub in_flight_high_water: AtomicU64,
    /// Time the inference threads spent on batches, from taking one to sending it back
    /// (nanoseconds, summed over instances): divided by wall time and parallelism, how busy
    /// the scoring stage is.
    pub inference_busy_ns: AtomicU64,
}

impl ScoreCounters {
    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Adds `n` to a counter.
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
