//! Latency histograms of the job: window close → score produced, event time (window end) →
//! score produced, and window close → score acknowledged by the sink. Prometheus histograms
//! for `/metrics`; the acknowledged one also keeps an HDR histogram, for the exact p50/p99 of
//! the end-of-run summary.

use std::sync::{Mutex, PoisonError};

use hdrhistogram::Histogram as Hdr;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// Buckets from 1 ms to about 9 min, doubling.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// The job's latency histograms.
#[derive(Debug)]
pub struct Latencies {
    close_to_score: Histogram,
    event_to_score: Histogram,
    close_to_acked: Histogram,
    close_to_acked_hdr: Mutex<Option<Hdr<u64>>>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            close_to_score: latency_buckets(),
            event_to_score: latency_buckets(),
            close_to_acked: latency_buckets(),
            close_to_acked_hdr: Mutex::new(None),
        }
    }
}

impl Latencies {
    /// One score produced at `now_ms` (wall clock) for a window that closed at `fired_at_ns`
    /// (0: unknown) and ends at event time `window_end_ms`.
    #[inline]
    pub fn score_produced(&self, fired_at_ns: u64, window_end_ms: i64, now_ms: u64) {
        if fired_at_ns > 0 {
            let waited_ms = now_ms.saturating_sub(fired_at_ns / 1_000_000);
            self.close_to_score.observe(waited_ms as f64 / 1e3);
        }
        let behind_ms = (now_ms as i64).saturating_sub(window_end_ms).max(0);
        self.event_to_score.observe(behind_ms as f64 / 1e3);
    }

    /// One score acknowledged by the sink `micros` after its window closed.
    pub fn acknowledged_us(&self, micros: u64) {
        self.close_to_acked.observe(micros as f64 / 1e6);
        let mut hdr = self
            .close_to_acked_hdr
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // 1 µs .. 1 h at 3 significant figures; longer waits saturate at 1 h.
        if hdr.is_none() {
            *hdr = Hdr::new_with_bounds(1, 3_600_000_000, 3).ok();
        }
        if let Some(hdr) = hdr.as_mut() {
            hdr.saturating_record(micros.max(1));
        }
    }

    /// The `q`-quantile (0..=1) of close → acknowledged latencies in µs, if any were recorded.
    pub fn acknowledged_quantile_us(&self, q: f64) -> Option<u64> {
        let hdr = self
            .close_to_acked_hdr
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let hdr = hdr.as_ref().filter(|h| !h.is_empty())?;
        Some(hdr.value_at_quantile(q.clamp(0.0, 1.0)))
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
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
            "window_close_to_score_acked",
            "From a window's close to its score acknowledged by the score sink",
            Unit::Seconds,
            self.close_to_acked.clone(),
        );
    }
}
