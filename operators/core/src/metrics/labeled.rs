//! Labelled counters the run summary can also read back: a Prometheus [`Family`] (what
//! `/metrics` encodes) beside the handles it has handed out (what the summary and the cluster
//! totals add up). prometheus-client's families cannot be iterated, so [`LabeledCounter`]
//! remembers each label set once, when its handle is first resolved; hot paths resolve their
//! handle once ([`LabeledCounter::handle`]) and then only add to an atomic.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// A counter family whose label sets can be listed and summed.
#[derive(Debug)]
pub struct LabeledCounter<L: Clone + Hash + Eq> {
    family: Family<L, Counter>,
    seen: Mutex<HashMap<L, Counter>>,
}

impl<L: Clone + Hash + Eq> Default for LabeledCounter<L> {
    fn default() -> Self {
        LabeledCounter {
            family: Family::default(),
            seen: Mutex::new(HashMap::new()),
        }
    }
}

impl<L> LabeledCounter<L>
where
    L: Clone + Hash + Eq + std::fmt::Debug + EncodeLabelSet + Send + Sync + 'static,
{
    /// The counter of `labels`, to keep and add to (a clone shares the count).
    pub fn handle(&self, labels: &L) -> Counter {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(counter) = seen.get(labels) {
            return counter.clone();
        }
        let counter = self.family.get_or_create(labels).clone();
        seen.insert(labels.clone(), counter.clone());
        counter
    }

    /// Adds `n` to the counter of `labels` (a lookup: for paths that are not per record).
    pub fn add(&self, labels: &L, n: u64) {
        self.handle(labels).inc_by(n);
    }

    /// Every label set counted so far with its count, in no particular order.
    pub fn entries(&self) -> Vec<(L, u64)> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.iter().map(|(l, c)| (l.clone(), c.get())).collect()
    }

    /// The sum over every label set whose labels pass `keep`.
    pub fn sum_where(&self, keep: impl Fn(&L) -> bool) -> u64 {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.iter()
            .filter(|(l, _)| keep(l))
            .map(|(_, c)| c.get())
            .sum()
    }

    /// The family, for the registry.
    pub fn family(&self) -> Family<L, Counter> {
        self.family.clone()
    }
}

/// A pipeline stage, the `operator` label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Operator {
    /// The source (Kafka or files): in = records read, out = events decoded.
    Source,
    /// The window operator: in = events, out = feature rows fired.
    Window,
    /// The score operator: in = feature rows, out = score records (errors included).
    Score,
    /// The output sink (score records; feature rows in a features-only run): in = records
    /// handed to the producer or the file, out = acknowledged or written.
    ScoreSink,
    /// The dead-letter sink: in = letters handed to the producer or the file, out =
    /// acknowledged or written.
    DeadLetterSink,
}

impl Operator {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Source => "source",
            Operator::Window => "window",
            Operator::Score => "score",
            Operator::ScoreSink => "score_sink",
            Operator::DeadLetterSink => "dead_letter_sink",
        }
    }
}

impl EncodeLabelValue for Operator {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

/// The labels of a per-instance count: `operator`, `instance`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceLabels {
    /// The stage.
    pub operator: Operator,
    /// The instance index within the stage.
    pub instance: u32,
}

#[cfg(test)]
mod tests {
    use super::{InstanceLabels, LabeledCounter, Operator};

    #[test]
    fn handles_share_their_label_sets_count_and_sums_filter_by_label() {
        let flow = LabeledCounter::<InstanceLabels>::default();
        let labels = |operator, instance| InstanceLabels { operator, instance };
        let source_0 = flow.handle(&labels(Operator::Source, 0));
        source_0.inc_by(3);
        flow.handle(&labels(Operator::Source, 0)).inc();
        flow.add(&labels(Operator::Source, 1), 10);
        flow.add(&labels(Operator::Score, 0), 100);
        assert_eq!(flow.sum_where(|l| l.operator == Operator::Source), 14);
        assert_eq!(flow.sum_where(|_| true), 114);
        assert_eq!(flow.entries().len(), 3, "one entry per label set");
    }
}
