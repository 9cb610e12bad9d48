//! Latency histograms of the job: window close → score produced, event time (window end) →
//! score produced, ingest (the source's read of the window's latest record) → score produced,
//! and window close → score acknowledged by the sink. Prometheus histograms for `/metrics`;
//! HDR histograms for the exact p50/p99/p99.9 of the end-of-run summary: close → acknowledged
//! of live scores, the same of scores acknowledged while the job was catching up, and ingest
//! → score produced of live scores. Catching up is a bounded replay (every window closes
//! within seconds and waits behind the ones before it) or a source instance behind its
//! partitions' ends (a partition lags more than one activation's read;
//! `weir_source_instances_behind`): a catch-up latency is time queued behind a backlog, not
//! the pipeline's live latency.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use hdrhistogram::Histogram as Hdr;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::{Registry, Unit};
use weir_features::row::FeatureRow;

use super::batch_histogram::BatchHistogram;

/// Buckets from 1 ms to about 9 min, doubling.
fn latency_buckets() -> BatchHistogram {
    BatchHistogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// Scores recorded in one HDR histogram and their p50, p99 and p99.9, µs (`None`: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// Scores recorded.
    pub count: u64,
    /// Median, µs.
    pub p50_us: Option<u64>,
    /// 99th percentile, µs.
    pub p99_us: Option<u64>,
    /// 99.9th percentile, µs.
    pub p999_us: Option<u64>,
}

impl LatencySummary {
    fn of(hdr: &Mutex<Option<Hdr<u64>>>) -> Self {
        let hdr = hdr.lock().unwrap_or_else(PoisonError::into_inner);
        hdr.as_ref()
            .map_or_else(LatencySummary::default, LatencySummary::of_hdr)
    }

    /// The count and percentiles of `hdr` (none of an empty one).
    pub fn of_hdr(hdr: &Hdr<u64>) -> Self {
        if hdr.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: hdr.len(),
            p50_us: Some(hdr.value_at_quantile(0.5)),
            p99_us: Some(hdr.value_at_quantile(0.99)),
            p999_us: Some(hdr.value_at_quantile(0.999)),
        }
    }
}

/// Records `micros` into `hdr`, creating it on first use: 1 µs .. 1 h at 3 significant
/// figures; longer waits saturate at 1 h.
fn record(hdr: &mut Option<Hdr<u64>>, micros: u64) {
    if hdr.is_none() {
        *hdr = Hdr::new_with_bounds(1, 3_600_000_000, 3).ok();
    }
    if let Some(hdr) = hdr.as_mut() {
        hdr.saturating_record(micros.max(1));
    }
}

/// Whether one source instance is behind its partitions' ends ([`Latencies::source_behind`]).
#[derive(Debug)]
pub struct SourceBehind {
    gauge: Gauge,
    behind: AtomicBool,
}

impl SourceBehind {
    /// Records whether the instance is behind now.
    pub fn set(&self, behind: bool) {
        if self.behind.swap(behind, Ordering::Relaxed) != behind {
            if behind {
                self.gauge.inc();
            } else {
                self.gauge.dec();
            }
        }
    }
}

impl Drop for SourceBehind {
    fn drop(&mut self) {
        // An instance that ends is no longer behind.
        self.set(false);
    }
}

/// The job's latency histograms.
#[derive(Debug)]
pub struct Latencies {
    close_to_score: BatchHistogram,
    event_to_score: BatchHistogram,
    ingest_to_score: BatchHistogram,
    close_to_acked: BatchHistogram,
    /// Close → acknowledged of live scores, and of scores acknowledged while catching up.
    live_hdr: Mutex<Option<Hdr<u64>>>,
    catch_up_hdr: Mutex<Option<Hdr<u64>>>,
    /// Ingest → score produced of live scores (ms resolution: sources stamp records in ms).
    ingest_live_hdr: Mutex<Option<Hdr<u64>>>,
    /// Source instances of this process behind their partitions' ends.
    sources_behind: Gauge,
    /// The run is a bounded replay: every score is acknowledged while catching up.
    bounded_replay: AtomicBool,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            close_to_score: latency_buckets(),
            event_to_score: latency_buckets(),
            ingest_to_score: latency_buckets(),
            close_to_acked: latency_buckets(),
            live_hdr: Mutex::new(None),
            catch_up_hdr: Mutex::new(None),
            ingest_live_hdr: Mutex::new(None),
            sources_behind: Gauge::default(),
            bounded_replay: AtomicBool::new(false),
        }
    }
}

impl Latencies {
    /// Scores produced at `now_ms` (wall clock) for `rows`: each row's window closed at
    /// `fired_at_ns`, ends at event time `window_end` and its latest record was read at
    /// `ingested_at_ms` (either 0: unknown, not observed). Each histogram takes all of
    /// `rows` under one lock, as does the summary's HDR histogram of live ingest → score
    /// times.
    pub fn scores_produced<'a, R>(&self, rows: R, now_ms: u64)
    where
        R: IntoIterator<Item = &'a FeatureRow> + Clone,
    {
        let seconds = |ms: u64| ms as f64 / 1e3;
        let rows = || rows.clone().into_iter();
        self.close_to_score.observe_all(
            rows()
                .filter(|row| row.fired_at_ns > 0)
                .map(|row| seconds(now_ms.saturating_sub(row.fired_at_ns / 1_000_000))),
        );
        let ingest_ms = || {
            rows()
                .filter(|row| row.ingested_at_ms > 0)
                .map(|row| now_ms.saturating_sub(row.ingested_at_ms))
        };
        self.ingest_to_score.observe_all(ingest_ms().map(seconds));
        if !self.catching_up() {
            let mut hdr = None;
            for waited_ms in ingest_ms() {
                let hdr = hdr.get_or_insert_with(|| {
                    self.ingest_live_hdr
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                });
                record(hdr, waited_ms * 1_000);
            }
        }
        self.event_to_score.observe_all(rows().map(|row| {
            let behind_ms = (now_ms as i64).saturating_sub(row.window_end).max(0);
            seconds(behind_ms as u64)
        }));
    }

    /// Marks the run as a bounded replay (every latency is catch-up time).
    pub fn set_bounded_replay(&self) {
        self.bounded_replay.store(true, Ordering::Relaxed);
    }

    /// A source instance's share of `weir_source_instances_behind`: it counts from now (an
    /// instance starts behind) until [`SourceBehind::set`] says it caught up, or it is dropped.
    pub fn source_behind(&self) -> SourceBehind {
        self.sources_behind.inc();
        SourceBehind {
            gauge: self.sources_behind.clone(),
            behind: AtomicBool::new(true),
        }
    }

    /// Whether a score acknowledged now is acknowledged while the job catches up.
    fn catching_up(&self) -> bool {
        self.bounded_replay.load(Ordering::Relaxed) || self.sources_behind.get() > 0
    }

    /// One score acknowledged by the sink `micros` after its window closed.
    pub fn acknowledged_us(&self, micros: u64) {
        self.close_to_acked.observe(micros as f64 / 1e6);
        let hdr = if self.catching_up() {
            &self.catch_up_hdr
        } else {
            &self.live_hdr
        };
        record(
            &mut hdr.lock().unwrap_or_else(PoisonError::into_inner),
            micros,
        );
    }

    /// Close → acknowledged latencies of live scores: their count and percentiles in µs.
    pub fn live(&self) -> LatencySummary {
        LatencySummary::of(&self.live_hdr)
    }

    /// Ingest → score produced latencies of live scores (whole milliseconds, in µs).
    pub fn ingest_live(&self) -> LatencySummary {
        LatencySummary::of(&self.ingest_live_hdr)
    }

    /// The same for scores acknowledged while the job was catching up.
    pub fn catch_up(&self) -> LatencySummary {
        LatencySummary::of(&self.catch_up_hdr)
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "source_instances_behind",
            "Source instances of this process that have not read their partitions to the end \
             since their last record (scores acknowledged meanwhile are catch-up latency)",
            self.sources_behind.clone(),
        );
        registry.register_with_unit(
            "window_close_to_score",
            "From a window's close (its row fired) to its score produced by the model",
            Unit::Seconds,
            self.close_to_score.clone(),
        );
        registry.register_with_unit(
            "event_time_to_score",
            "From a window's end in event time to its score produced, on the wall clock (in a \
             replay of old data this is the data's age, not the pipeline's latency)",
            Unit::Seconds,
            self.event_to_score.clone(),
        );
        registry.register_with_unit(
            "ingest_to_score",
            "From the source's read of a window's latest record to the window's score produced \
             (windows whose every record came before a restore are not counted)",
            Unit::Seconds,
            self.ingest_to_score.clone(),
        );
        registry.register_with_unit(
            "window_close_to_score_acked",
            "From a window's close to its score acknowledged by the score sink",
            Unit::Seconds,
            self.close_to_acked.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use weir_features::row::FeatureRow;
    use weir_testkit::row::feature_row;

    use super::Latencies;

    #[test]
    fn scores_acknowledged_while_a_source_is_behind_or_in_a_replay_are_catch_up() {
        let latencies = Latencies::default();
        let source = latencies.source_behind();
        latencies.acknowledged_us(2_000_000);
        source.set(false);
        latencies.acknowledged_us(3_000);
        latencies.acknowledged_us(5_000);
        source.set(true);
        latencies.acknowledged_us(4_000_000);
        drop(source);
        latencies.acknowledged_us(7_000);
        assert_eq!((latencies.live().count, latencies.catch_up().count), (3, 2));
        assert!(latencies.live().p99_us.unwrap_or(u64::MAX) < 10_000);
        assert!(latencies.catch_up().p50_us.unwrap_or(0) >= 2_000_000);

        let replay = Latencies::default();
        replay.set_bounded_replay();
        replay.acknowledged_us(1_000);
        assert_eq!((replay.live().count, replay.catch_up().count), (0, 1));
    }

    #[test]
    fn live_ingest_to_score_times_are_kept_with_their_p99_9() {
        let row = |ingested_at_ms| FeatureRow {
            ingested_at_ms,
            ..feature_row("u1", 16, 60_000, &[1.0])
        };
        let latencies = Latencies::default();
        let source = latencies.source_behind();
        latencies.scores_produced(&[row(1_000)], 9_000);
        source.set(false);
        let rows: Vec<FeatureRow> = (0..1_000)
            .map(|i| row(if i < 997 { 10_000 } else { 9_960 }))
            .collect();
        latencies.scores_produced(rows.iter().chain([&row(0)]), 10_002);
        let ingest = latencies.ingest_live();
        // The catch-up score and the row without an ingest time are not counted.
        assert_eq!(ingest.count, 1_000);
        assert_eq!(ingest.p99_us, Some(2_000));
        assert_eq!(ingest.p999_us.map(|us| us / 1_000), Some(42));
    }
}
