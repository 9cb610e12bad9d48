//! A Prometheus histogram that takes a batch's observations under one lock. The scoring stage
//! records three latencies of every score it produces ([`super::Latencies::scores_produced`]);
//! `prometheus_client`'s `Histogram` takes its write lock once per observation, and both
//! workers' score instances take the same lock, so that was ~3 % of a scoring run's CPU
//! (BENCHMARKS.md, S). Encoded by `prometheus_client`'s own histogram encoder: `/metrics`
//! shows it exactly as it showed that histogram (a test compares the two).

use std::iter::once;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Counts per bucket, their sum and count; clones share them.
#[derive(Clone, Debug)]
pub struct BatchHistogram {
    counts: Arc<Mutex<Counts>>,
}

#[derive(Debug)]
struct Counts {
    sum: f64,
    count: u64,
    /// Each bucket's upper bound and the observations in it alone (not cumulative), the
    /// last bound `f64::MAX`: what the encoder takes.
    buckets: Vec<(f64, u64)>,
}

impl BatchHistogram {
    /// A histogram with these buckets' upper bounds (and one above them all).
    pub fn new(upper_bounds: impl IntoIterator<Item = f64>) -> Self {
        let buckets = upper_bounds
            .into_iter()
            .chain(once(f64::MAX))
            .map(|bound| (bound, 0))
            .collect();
        BatchHistogram {
            counts: Arc::new(Mutex::new(Counts {
                sum: 0.0,
                count: 0,
                buckets,
            })),
        }
    }

    /// Observes every value, under one lock. A value goes to the first bucket whose bound
    /// is at least it (NaN to none, but counted), as `prometheus_client`'s histogram does.
    pub fn observe_all(&self, values: impl IntoIterator<Item = f64>) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        for value in values {
            counts.sum += value;
            counts.count += 1;
            if let Some((_, n)) = counts.buckets.iter_mut().find(|(bound, _)| *bound >= value) {
                *n += 1;
            }
        }
    }

    /// Observes one value.
    pub fn observe(&self, value: f64) {
        self.observe_all(once(value));
    }
}

impl TypedMetric for BatchHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for BatchHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        encoder.encode_histogram::<NoLabelSet>(counts.sum, counts.count, &counts.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
    use prometheus_client::registry::{Metric, Registry, Unit};

    use super::BatchHistogram;

    /// `/metrics`' text of `metric` registered as `latency` (seconds).
    fn exposition(metric: impl Metric) -> String {
        let mut registry = Registry::default();
        registry.register_with_unit("latency", "a latency", Unit::Seconds, metric);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap_or_else(|e| panic!("encode: {e}"));
        text
    }

    #[test]
    fn a_batch_histogram_is_exposed_as_prometheus_clients_histogram_of_the_same_values() {
        let values = [
            0.0004,
            0.001,
            0.0015,
            0.03,
            2.5,
            900.0,
            f64::NAN,
            0.25,
            0.001,
        ];
        let theirs = Histogram::new(exponential_buckets(0.001, 2.0, 20));
        values.iter().for_each(|v| theirs.observe(*v));
        let ours = BatchHistogram::new(exponential_buckets(0.001, 2.0, 20));
        ours.observe_all(values[..4].iter().copied());
        ours.observe(values[4]);
        ours.observe_all(values[5..].iter().copied());
        ours.observe_all([]);
        let (theirs, ours) = (exposition(theirs), exposition(ours));
        assert!(ours.contains("latency_seconds_count 9"), "{ours}");
        assert_eq!(ours, theirs);
    }
}
