//! The job's metrics registry: every counter, gauge and histogram of a run in this process,
//! shared by all its workers. Each is declared once here (or in the scoring stage's
//! `weir_score::counters::ScoreCounters`), registered with the Prometheus registry that
//! `weir run` serves on `/metrics` ([`JobMetrics::register`]), and read back by the end-of-run
//! summary and the cluster totals (`jobs/src/summary.rs`, `cluster_totals.rs`).
//!
//! Hot paths add to atomics they hold (a [`Counter`] or a handle resolved once from a
//! [`LabeledCounter`]); label lookups happen per batch, per dead letter or per scrape, never
//! per ordinary record. Names follow Prometheus conventions under the `weir_` prefix
//! (`docs/JOB_FILE.md`, `[metrics]`, lists them).

mod batch_histogram;
mod checkpoints;
mod labeled;
mod latency;
mod models;
mod partitions;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use weir_features::dead_letter::DeadLetterReason;
use weir_features::row::ModelTag;

use crate::serving::ServingModels;

pub use checkpoints::{CheckpointMetrics, CommitRecord};
pub use labeled::{InstanceLabels, LabeledCounter, Operator};
pub use latency::{Latencies, LatencySummary, SourceBehind};
pub use models::{ModelLabels, ServingLabels};
pub use partitions::{PartitionGauges, PartitionLabel, PartitionView, SourcePartitions};

/// The labels of a dead letter: its `reason` and the source `partition` of its record (empty
/// for letters that have none, e.g. a refused output record).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct DeadLetterLabels {
    /// Why the record is a dead letter.
    pub reason: DeadLetterReason,
    /// Its source partition, when known.
    pub partition: Option<i32>,
}

impl EncodeLabelSet for DeadLetterLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("reason", self.reason.as_str()).encode(encoder.encode_label())?;
        ("partition", self.partition).encode(encoder.encode_label())
    }
}

/// A sink instance's counters: records it handed to its producer or encoded for its file
/// (`records_in`), records the broker acknowledged or written to the file (`records_out`) and
/// their bytes (`sink_acknowledged_bytes`).
#[derive(Clone, Debug)]
pub struct SinkFlow {
    written: Counter,
    acknowledged: Counter,
    bytes: Counter,
}

impl SinkFlow {
    /// `records` handed to the producer (first sends only, not resends) or to the file.
    pub fn written(&self, records: u64) {
        self.written.inc_by(records);
    }

    /// `records` of `bytes` in all acknowledged by the broker or written to the file.
    pub fn acknowledged(&self, records: u64, bytes: usize) {
        self.acknowledged.inc_by(records);
        self.bytes.inc_by(bytes as u64);
    }
}

/// The metrics of one job run in this process (see the module header).
#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Records into each operator instance: source = records read (good and bad), window =
    /// events, score = feature rows, sinks = records handed to the producer or the file.
    pub records_in: LabeledCounter<InstanceLabels>,
    /// Records out of each operator instance: source = events decoded, window = feature rows
    /// fired (revisions included), score = score records (errors included), sinks = records
    /// the broker acknowledged or written to the file.
    pub records_out: LabeledCounter<InstanceLabels>,
    /// Bytes of the records read by the sources (payload and key).
    pub source_bytes: Counter,
    /// Bytes (key and payload; a file line with its newline) of the records each sink instance
    /// had acknowledged or written.
    pub sink_bytes: LabeledCounter<InstanceLabels>,
    /// Scores produced (successful inferences), by model version.
    pub scores: LabeledCounter<ModelLabels>,
    /// Inferences that failed (score records with an error field), by model version.
    pub inference_errors: LabeledCounter<ModelLabels>,
    /// Missing feature values replaced by the manifest's defaults.
    pub defaults_used: Counter,
    /// Score records acknowledged by the sink.
    pub scores_delivered: Counter,
    /// Feature rows written (features-only runs).
    pub rows_written: Counter,
    /// Dead letters acknowledged by the dead-letter sink.
    pub dead_letters_delivered: Counter,
    /// Records the sinks failed to deliver (a non-zero value fails the run).
    pub delivery_failures: Counter,
    /// Input reads that failed (an I/O error in an input file): the sources stop without
    /// declaring the end of input, and a non-zero value fails the run.
    pub source_read_failures: Counter,
    /// Source instances that stopped on the stop flag (a stop signal) before the end of their
    /// input: a bounded run with any is incomplete.
    pub sources_stopped: Counter,
    /// Times a score instance reached its in-flight bound (and paused the sources).
    pub backpressure_episodes: Counter,
    /// Source activations that skipped reading because of the score backlog
    /// ([`crate::backpressure::ScoreBacklog`]).
    pub source_pauses: Counter,
    /// Source activations that read nothing because another source instance of the process
    /// was more than the alignment's slack of ticks behind
    /// ([`crate::source_alignment::SourceAlignment`]).
    pub source_alignment_pauses: Counter,
    /// Times a source instance started holding back because the job's progress (the scores,
    /// in any process) lagged more than `[runtime] max_lag` behind its tick.
    pub lag_episodes: Counter,
    /// Snapshots, commits, restores.
    pub checkpoints: CheckpointMetrics,
    /// Per-partition lag and watermarks.
    pub partitions: SourcePartitions,
    /// Latency histograms.
    pub latency: Latencies,
    dead_letters: LabeledCounter<DeadLetterLabels>,
    serving: Family<ServingLabels, Gauge>,
}

/// A count the summary reads: a counter, or the sum of a labelled family.
pub trait Count {
    /// The count so far.
    fn count(&self) -> u64;
}

impl Count for Counter {
    fn count(&self) -> u64 {
        self.get()
    }
}

impl Count for Gauge {
    fn count(&self) -> u64 {
        self.get().max(0) as u64
    }
}

impl<L> Count for LabeledCounter<L>
where
    L: Clone + std::hash::Hash + Eq + std::fmt::Debug + EncodeLabelSet + Send + Sync + 'static,
{
    fn count(&self) -> u64 {
        self.sum_where(|_| true)
    }
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
        self.checkpoints.snapshot_written(files, bytes, pause, took);
    }

    /// Adds `n` to a counter.
    #[inline]
    pub fn add(counter: &Counter, n: u64) {
        counter.inc_by(n);
    }

    /// Reads a count.
    pub fn get(count: &impl Count) -> u64 {
        count.count()
    }

    /// Records read by the source instances of this process (good and bad).
    pub fn records_read(&self) -> u64 {
        self.records_in
            .sum_where(|l| l.operator == Operator::Source)
    }

    /// Events decoded by the source instances of this process.
    pub fn events_in(&self) -> u64 {
        self.records_out
            .sum_where(|l| l.operator == Operator::Source)
    }

    /// Windows fired (feature rows, revisions included) by the window instances of this
    /// process.
    pub fn windows_fired(&self) -> u64 {
        self.records_out
            .sum_where(|l| l.operator == Operator::Window)
    }

    /// The in and out counters of `operator`'s instance `instance`, to keep and add to.
    pub fn instance_flow(&self, operator: Operator, instance: u32) -> (Counter, Counter) {
        let labels = InstanceLabels { operator, instance };
        (
            self.records_in.handle(&labels),
            self.records_out.handle(&labels),
        )
    }

    /// The counters of the sink `operator`'s instance `instance`.
    pub fn sink_flow(&self, operator: Operator, instance: u32) -> SinkFlow {
        let labels = InstanceLabels { operator, instance };
        SinkFlow {
            written: self.records_in.handle(&labels),
            acknowledged: self.records_out.handle(&labels),
            bytes: self.sink_bytes.handle(&labels),
        }
    }

    /// Counts `n` scores of model version `tag`.
    pub fn scored(&self, tag: &ModelTag, n: u64) {
        self.scores.add(&ModelLabels(tag.clone()), n);
    }

    /// Counts `n` failed inferences of model version `tag`.
    pub fn inference_failed(&self, tag: &ModelTag, n: u64) {
        self.inference_errors.add(&ModelLabels(tag.clone()), n);
    }

    /// Counts a dead letter by reason, without a source partition (an output record).
    pub fn dead_letter(&self, reason: DeadLetterReason) {
        self.dead_letters.add(
            &DeadLetterLabels {
                reason,
                partition: None,
            },
            1,
        );
    }

    /// Counts a dead letter by reason and the source partition of its record.
    pub fn dead_letter_at(&self, reason: DeadLetterReason, partition: i32) {
        self.dead_letters.add(
            &DeadLetterLabels {
                reason,
                partition: Some(partition),
            },
            1,
        );
    }

    /// Dead letters produced so far, by reason (non-zero only, in [`DeadLetterReason::ALL`]
    /// order).
    pub fn dead_letters_by_reason(&self) -> Vec<(DeadLetterReason, u64)> {
        DeadLetterReason::ALL
            .iter()
            .map(|r| (*r, self.dead_letters.sum_where(|l| l.reason == *r)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Total dead letters produced.
    pub fn dead_letters_total(&self) -> u64 {
        self.dead_letters.count()
    }

    /// Late records so far by partition, in partition order (partitions with none are absent;
    /// DESIGN.md §2: "counted per partition").
    pub fn late_by_partition(&self) -> Vec<(i32, u64)> {
        let mut late: Vec<(i32, u64)> = self
            .dead_letters
            .entries()
            .into_iter()
            .filter(|(l, n)| l.reason == DeadLetterReason::Late && *n > 0)
            .filter_map(|(l, n)| Some((l.partition?, n)))
            .collect();
        late.sort_unstable();
        late
    }

    /// Records one window-close → delivered latency, in microseconds.
    pub fn record_latency_us(&self, micros: u64) {
        self.latency.acknowledged_us(micros);
    }

    /// Brings the gauges computed from other state up to date at `now_ms`, before a scrape:
    /// which partition holds the watermark back, the last checkpoint's age, the versions each
    /// score instance serves.
    pub fn refresh(&self, serving: &ServingModels, now_ms: u64) {
        self.partitions.mark_holding_back();
        self.checkpoints.refresh(now_ms);
        self.serving.clear();
        for (instance, versions) in serving.by_instance() {
            for (key, version) in &versions {
                self.serving
                    .get_or_create(&ServingLabels::of_entry(instance, key, version))
                    .set(1);
            }
        }
    }

    /// Registers every metric with `registry` (made with the `weir` prefix).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "records_in",
            "Records into an operator instance (source: records read, good and bad; window: \
             events; score: feature rows)",
            self.records_in.family(),
        );
        r.register(
            "records_out",
            "Records out of an operator instance (source: events decoded; window: feature rows \
             fired, revisions included; score: score records, errors included)",
            self.records_out.family(),
        );
        r.register_with_unit(
            "source_read",
            "Bytes of the records the sources read (key and payload)",
            Unit::Bytes,
            self.source_bytes.clone(),
        );
        r.register_with_unit(
            "sink_acknowledged",
            "Bytes of the records a sink instance had acknowledged (Kafka: key and payload) or \
             written (a file: the line and its newline)",
            Unit::Bytes,
            self.sink_bytes.family(),
        );
        r.register(
            "scores",
            "Successful inferences, by model version",
            self.scores.family(),
        );
        r.register(
            "inference_errors",
            "Failed inferences (score records with an error), by model version",
            self.inference_errors.family(),
        );
        r.register(
            "feature_defaults_used",
            "Missing feature values replaced by the model manifest's defaults",
            self.defaults_used.clone(),
        );
        r.register(
            "scores_delivered",
            "Score records acknowledged by the score sink",
            self.scores_delivered.clone(),
        );
        r.register(
            "feature_rows_written",
            "Feature rows written (weir features)",
            self.rows_written.clone(),
        );
        r.register(
            "dead_letters",
            "Dead letters, by reason and source partition (reason=\"late\": late records)",
            self.dead_letters.family(),
        );
        r.register(
            "dead_letters_delivered",
            "Dead letters acknowledged by the dead-letter sink",
            self.dead_letters_delivered.clone(),
        );
        r.register(
            "delivery_failures",
            "Records the sinks could not deliver (the run fails)",
            self.delivery_failures.clone(),
        );
        r.register(
            "source_read_failures",
            "Input reads that failed (the run fails)",
            self.source_read_failures.clone(),
        );
        r.register(
            "sources_stopped",
            "Source instances stopped by a signal before the end of their input",
            self.sources_stopped.clone(),
        );
        r.register(
            "backpressure_episodes",
            "Times a score instance reached its in-flight bound and paused the sources",
            self.backpressure_episodes.clone(),
        );
        r.register(
            "source_pauses",
            "Source activations that read nothing because of the score backlog",
            self.source_pauses.clone(),
        );
        r.register(
            "source_alignment_pauses",
            "Source activations that read nothing because another source of the process was \
             ticks behind",
            self.source_alignment_pauses.clone(),
        );
        r.register(
            "lag_episodes",
            "Times a source held back because the scores lagged more than [runtime] max_lag",
            self.lag_episodes.clone(),
        );
        r.register(
            "model_serving",
            "1 for each model version a score instance serves, by instance, model, version and \
             role",
            self.serving.clone(),
        );
        self.checkpoints.register(r);
        self.partitions.register(r);
        self.latency.register(r);
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use weir_features::dead_letter::DeadLetterReason;

    use super::{JobMetrics, Operator};
    use crate::serving::ServingModels;

    #[test]
    fn the_registry_serves_what_the_summary_reads() {
        let metrics = JobMetrics::default();
        let (read, decoded) = metrics.instance_flow(Operator::Source, 1);
        read.inc_by(5);
        decoded.inc_by(4);
        metrics.dead_letter_at(DeadLetterReason::Late, 2);
        metrics.dead_letter_at(DeadLetterReason::Late, 2);
        metrics.dead_letter(DeadLetterReason::Undeliverable);
        let serving = ServingModels::default();
        serving.set(0, [("fraud".to_owned(), "v3".to_owned())].into());
        metrics.refresh(&serving, 1_000);
        let mut registry = Registry::with_prefix("weir");
        metrics.register(&mut registry);
        let mut text = String::new();
        assert!(encode(&mut text, &registry).is_ok());
        for line in [
            "weir_records_in_total{operator=\"source\",instance=\"1\"} 5",
            "weir_records_out_total{operator=\"source\",instance=\"1\"} 4",
            "weir_dead_letters_total{reason=\"late\",partition=\"2\"} 2",
            "weir_dead_letters_total{reason=\"undeliverable\",partition=\"\"} 1",
            "weir_model_serving{instance=\"0\",model=\"fraud\",version=\"v3\",role=\"primary\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert_eq!((metrics.records_read(), metrics.events_in()), (5, 4));
        assert_eq!(metrics.late_by_partition(), vec![(2, 2)]);
        assert_eq!(metrics.dead_letters_total(), 3);
    }
}
