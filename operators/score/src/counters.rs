//! The scoring stage's own metrics ([`ScoreCounters`]): reloads, registry syncs that failed,
//! second-version changes,
//! canary rows, shadow errors, batches and their sizes, split runs, in-flight high water,
//! inference time, and drift ([`crate::drift`]).
//!
//! Written by the inference threads (`crate::model_set`, `crate::reload`,
//! `crate::inference_thread`) and the batcher; registered with the job's Prometheus registry
//! beside `weir_operators::metrics::JobMetrics` ([`ScoreCounters::register`]) and read by the
//! job's summary.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use weir_operators::metrics::Count;

use crate::drift::{AlertSettings, DriftMonitor};

/// Metrics of the scoring stage beyond [`JobMetrics`](weir_operators::metrics::JobMetrics).
/// Shared by the score instances of a process; each instance's thread watches the registry and
/// swaps on its own, so a reload, a failure or a second-version change counts once per
/// instance.
#[derive(Debug)]
pub struct ScoreCounters {
    /// Successful hot reloads (the primary version was swapped).
    pub reloads: Counter,
    /// Failed reload attempts of either version, and unreadable or invalid `CONTROL` files
    /// (what served kept serving); one per distinct failure and instance.
    pub reload_failures: Counter,
    /// Failed syncs of a registry on S3 into its local cache (`crate::registry_mirror`; one
    /// per process and poll; the job served what the cache held).
    pub registry_sync_failures: Counter,
    /// Changes of the second version that took effect: started, stopped, another version, or
    /// another role or share (`CONTROL`'s `canary` / `shadow` line).
    pub secondary_changes: Counter,
    /// Rows scored by a canary version.
    pub canary_rows: Counter,
    /// Rows whose shadow score failed (the primary score is unaffected).
    pub shadow_errors: Counter,
    /// Batches scored.
    pub batches: Counter,
    /// Session runs beyond the first of a version's rows, spent splitting runs that failed
    /// so that only rows failing alone get errors (`crate::bisect`).
    pub split_runs: Counter,
    /// Most batches ever queued or running at once on one instance (high-water mark; never
    /// above `max_in_flight`).
    pub in_flight_high_water: Gauge,
    /// Time the inference threads spent on each batch, from taking it to sending it back; its
    /// sum divided by wall time and parallelism is how busy the scoring stage is.
    pub inference_seconds: Histogram,
    /// The sum of `inference_seconds` in nanoseconds, for the benchmarks (prometheus-client
    /// does not read a histogram back); not exported, the histogram's `_sum` is.
    pub inference_busy_ns: Counter,
    /// Rows per batch.
    pub batch_rows: Histogram,
    /// Score distribution, drift and error rate per model version.
    pub drift: DriftMonitor,
}

impl Default for ScoreCounters {
    fn default() -> Self {
        ScoreCounters::new(AlertSettings::default())
    }
}

impl ScoreCounters {
    /// Counters whose drift and error-rate alerts use `alerts`.
    pub fn new(alerts: AlertSettings) -> Self {
        ScoreCounters {
            reloads: Counter::default(),
            reload_failures: Counter::default(),
            registry_sync_failures: Counter::default(),
            secondary_changes: Counter::default(),
            canary_rows: Counter::default(),
            shadow_errors: Counter::default(),
            batches: Counter::default(),
            split_runs: Counter::default(),
            in_flight_high_water: Gauge::default(),
            // 100 µs to about 100 s, doubling.
            inference_seconds: Histogram::new(exponential_buckets(1e-4, 2.0, 20)),
            // 1 to 65 536 rows, doubling.
            inference_busy_ns: Counter::default(),
            batch_rows: Histogram::new(exponential_buckets(1.0, 2.0, 17)),
            drift: DriftMonitor::new(alerts),
        }
    }

    /// Reads a counter or gauge.
    pub fn get(counter: &impl Count) -> u64 {
        counter.count()
    }

    /// Adds `n` to a counter.
    pub(crate) fn add(counter: &Counter, n: u64) {
        counter.inc_by(n);
    }

    /// Registers every metric with `registry` (made with the `weir` prefix).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "model_reloads",
            "Hot reloads that swapped the primary model version (per score instance)",
            self.reloads.clone(),
        );
        r.register(
            "model_reload_failures",
            "Failed reloads of either version or of CONTROL (what served kept serving)",
            self.reload_failures.clone(),
        );
        r.register(
            "model_registry_sync_failures",
            "Failed syncs of an S3 model registry into its local cache (what it held kept serving)",
            self.registry_sync_failures.clone(),
        );
        r.register(
            "model_secondary_changes",
            "Changes of the shadow or canary version that took effect (per score instance)",
            self.secondary_changes.clone(),
        );
        r.register(
            "canary_rows",
            "Rows scored by a canary version",
            self.canary_rows.clone(),
        );
        r.register(
            "shadow_errors",
            "Rows whose shadow inference failed",
            self.shadow_errors.clone(),
        );
        r.register(
            "inference_batches",
            "Micro-batches scored",
            self.batches.clone(),
        );
        r.register(
            "inference_split_runs",
            "Session runs spent splitting failed runs down to the rows that fail alone",
            self.split_runs.clone(),
        );
        r.register(
            "inference_in_flight_high_water",
            "Most batches queued or running at once on one score instance",
            self.in_flight_high_water.clone(),
        );
        r.register_with_unit(
            "inference",
            "Time an inference thread spent on a batch (every version's runs)",
            Unit::Seconds,
            self.inference_seconds.clone(),
        );
        r.register(
            "inference_batch_rows",
            "Rows per micro-batch",
            self.batch_rows.clone(),
        );
        self.drift.register(r);
    }
}
