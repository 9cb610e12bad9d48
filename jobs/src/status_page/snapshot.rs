//! What the status page shows, read from the run's live metric structs at one moment: the
//! stages with their parallelism, totals and rates, the source partitions, the last
//! checkpoints and the model versions with their score distribution against the baseline.
//! [`StatusSources::snapshot`] gathers it; `render.rs` turns it into HTML.

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_features::row::ModelTag;
use weir_operators::metrics::{CommitRecord, JobMetrics, Operator, PartitionView, ServingLabels};
use weir_operators::placement::StageParallelism;
use weir_operators::serving::ServingModels;
use weir_score::counters::ScoreCounters;
use weir_score::drift::VersionView;

use super::rates::RateMeter;

/// One stage of the dataflow.
#[derive(Clone, Debug, PartialEq)]
pub struct StageView {
    /// The stage's operator.
    pub operator: Operator,
    /// Instances in the job (all processes).
    pub parallelism: usize,
    /// Records into and out of this process's instances so far: for the source, window and
    /// score stages their `weir_records_in/out_total`; for the sinks, the records that reached
    /// them (score records, or feature rows without a model; dead letters) and those
    /// acknowledged.
    pub records: (u64, u64),
    /// Records per second in and out (`None`: no time has passed yet).
    pub per_second: Option<(f64, f64)>,
}

/// A model version: who serves it and how its scores are distributed.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelView {
    /// The model version.
    pub tag: ModelTag,
    /// (score instance, role) of each instance serving it.
    pub serving: Vec<(u32, String)>,
    /// Its scores against the baseline (`None` before its first scored batch).
    pub scores: Option<VersionView>,
}

/// Everything on the page.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusSnapshot {
    /// The job's name.
    pub job: String,
    /// This process's index (of `processes`).
    pub process: usize,
    /// Processes in the job.
    pub processes: usize,
    /// When it was read (Unix ms).
    pub now_ms: u64,
    /// The stages, in dataflow order.
    pub stages: Vec<StageView>,
    /// Dead letters so far.
    pub dead_letters: u64,
    /// This process's source partitions.
    pub partitions: Vec<PartitionView>,
    /// The partition holding this process's watermark back.
    pub holding_back: Option<i32>,
    /// Checkpoints committed by this process, and the last few (newest first).
    pub checkpoints: (u64, Vec<CommitRecord>),
    /// Checkpoints restored at start.
    pub restores: u64,
    /// `[model] drift_alert`.
    pub drift_alert: Option<f64>,
    /// Every model version served or scored.
    pub models: Vec<ModelView>,
}

/// The run's shared metric structs and what the page needs from the job.
#[derive(Debug)]
pub struct StatusSources {
    /// The job's name.
    pub job: String,
    /// (this process, processes).
    pub process: (usize, usize),
    /// Stages in dataflow order with their parallelism.
    pub stages: Vec<(Operator, usize)>,
    /// The job's counters and gauges.
    pub metrics: Arc<JobMetrics>,
    /// The scoring stage's (drift).
    pub scores: Arc<ScoreCounters>,
    /// Versions served.
    pub serving: Arc<ServingModels>,
    /// Rates of the stages.
    pub rates: RateMeter,
}

impl StatusSources {
    /// The stages a job runs, in dataflow order (without a model: no score stage).
    pub fn stages_of(parallelism: &StageParallelism, scores: bool) -> Vec<(Operator, usize)> {
        let mut stages = vec![
            (Operator::Source, parallelism.source),
            (Operator::Window, parallelism.window),
        ];
        if scores {
            stages.push((Operator::Score, parallelism.score));
        }
        stages.push((Operator::ScoreSink, parallelism.sink));
        stages.push((Operator::DeadLetterSink, parallelism.sink));
        stages
    }

    /// Reads every value at `now_ms`.
    pub fn snapshot(&self, now_ms: u64) -> StatusSnapshot {
        let metrics = &self.metrics;
        metrics.refresh(&self.serving, now_ms);
        let totals: Vec<(u64, u64)> = self
            .stages
            .iter()
            .map(|(operator, _)| stage_records(metrics, *operator))
            .collect();
        let rates = self.rates.sample(now_ms, &totals);
        let stages = self
            .stages
            .iter()
            .zip(totals)
            .zip(rates)
            .map(
                |(((operator, parallelism), records), per_second)| StageView {
                    operator: *operator,
                    parallelism: *parallelism,
                    records,
                    per_second,
                },
            )
            .collect();
        StatusSnapshot {
            job: self.job.clone(),
            process: self.process.0,
            processes: self.process.1,
            now_ms,
            stages,
            dead_letters: metrics.dead_letters_total(),
            partitions: metrics.partitions.views(),
            holding_back: metrics.partitions.mark_holding_back(),
            checkpoints: (
                metrics.checkpoints.committed.get(),
                metrics.checkpoints.recent_commits(),
            ),
            restores: metrics.checkpoints.restores.get(),
            drift_alert: self.scores.drift.settings().drift_alert,
            models: self.models(),
        }
    }

    /// Every version served (by instance and role) or scored (with its distribution).
    fn models(&self) -> Vec<ModelView> {
        let mut models = BTreeMap::new();
        for (instance, versions) in self.serving.by_instance() {
            for (key, version) in &versions {
                let labels = ServingLabels::of_entry(instance, key, version);
                model_view(&mut models, &labels.model, &labels.version)
                    .serving
                    .push((labels.instance, labels.role));
            }
        }
        for scored in self.scores.drift.views() {
            let (name, version) = (scored.tag.name.clone(), scored.tag.version.clone());
            model_view(&mut models, &name, &version).scores = Some(scored);
        }
        models.into_values().collect()
    }
}

/// The records in and out of `operator`'s instances in this process ([`StageView::records`]).
fn stage_records(metrics: &JobMetrics, operator: Operator) -> (u64, u64) {
    (
        metrics.records_in.sum_where(|l| l.operator == operator),
        metrics.records_out.sum_where(|l| l.operator == operator),
    )
}

/// The view of `name` `version` in `models`, made empty when absent.
fn model_view<'a>(
    models: &'a mut BTreeMap<(String, String), ModelView>,
    name: &str,
    version: &str,
) -> &'a mut ModelView {
    models
        .entry((name.to_owned(), version.to_owned()))
        .or_insert_with(|| ModelView {
            tag: ModelTag {
                name: name.into(),
                version: version.into(),
            },
            serving: Vec::new(),
            scores: None,
        })
}
