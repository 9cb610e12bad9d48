//! The whole Weir pipeline as one top-down chain (DESIGN.md §1):
//!
//! ```text
//! kafka_source | file_source ─▶ window_features ─▶ score ─▶ kafka_score_sink | jsonl_sink
//!      │ bad records                │ late records   │ failed inferences
//!      └────────────────────────────┴────────────────┴─▶ dead-letter sink (Kafka or file)
//! ```
//!
//! In [`Mode::FeaturesOnly`] (`weir features`) the rows skip scoring and go to a file.
//!
//! Sources, the window stage and the sinks also emit checkpoint streams; their concatenation
//! ends in the committer (`weir_operators::committer`), which commits each checkpoint epoch
//! once all of them have passed it.
//!
//! [`JobPlan`] holds everything every worker needs to build its part of the dataflow.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};
use timely::dataflow::operators::{Concat, Probe};
use timely::dataflow::{Scope, Stream};

use weir_checkpoint::SourcePositions;
use weir_features::dead_letter::DeadLetter;
use weir_features::decode::JsonDecoder;
use weir_features::encode::{dead_letter_json, FeatureRowsJson};
use weir_features::score_json::ScoreJson;
use weir_features::scored::ScoredBatch;
use weir_features::vocab::Tick;
use weir_kafka::{
    kafka_source, DeliveryGuarantee, KafkaDeadLetterSink, KafkaScoreSink, KafkaSinkConfig,
    KafkaSourceConfig,
};
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::committer::{CommitCheckpoints, CommitHook, CommitterConfig};
use weir_operators::epochs::{CheckpointStream, EpochClock, OperatorCheckpoints};
use weir_operators::file_claims::RangeClaims;
use weir_operators::file_ranges::RangeSplit;
use weir_operators::file_sink::{FileSinkConfig, JsonlSink, Lines};
use weir_operators::file_source::{file_source, FileSourceConfig};
use weir_operators::metrics::{JobMetrics, Operator};
use weir_operators::serving::ServingModels;
use weir_operators::source::RecordDecoder;
use weir_operators::source_alignment::SourceAlignment;
use weir_operators::source_operator::{Pacing, SourceStage};
use weir_operators::window_features::WINDOW_OPERATOR;
use weir_operators::window_instance::WindowLogic;
use weir_operators::{WindowConfig, WindowFeatures};
use weir_score::budget::{cpu_set, pin_current_thread, worker_core};
use weir_score::counters::ScoreCounters;
use weir_score::operator::{Score, ScoreConfig};

use crate::checkpointing::{parallelism_by_operator, CheckpointPlan};
use crate::config::CompiledJob;
use crate::plan::millis::{millis, millis_i64};
use crate::plan::{KafkaInput, SinkPlan, SourceInput};

/// What a run produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Score every feature row and write scores.
    Score,
    /// Write feature rows without scoring (`weir features`: training sets, replays).
    FeaturesOnly,
}

/// A compiled job plus run-time facts: ready to be built on every worker.
#[derive(Clone)]
pub struct JobPlan {
    /// The compiled job.
    pub job: CompiledJob,
    /// What the run produces.
    pub mode: Mode,
    /// Shared counters of this process.
    pub metrics: Arc<JobMetrics>,
    /// Set to stop the sources.
    pub stop: Arc<AtomicBool>,
    /// Checkpointing of this run (`None`: no `[checkpoint]` section).
    pub checkpoints: Option<CheckpointPlan>,
    /// Model versions loaded at start, by model name: checkpoint manifests record them while
    /// no score instance of this process reports what it serves (`serving`).
    pub model_versions: BTreeMap<String, String>,
    /// The score instances of this process at their in-flight bound: the sources of this
    /// process pause while there is any (backpressure).
    pub backlog: ScoreBacklog,
    /// The ticks of this process's source instances: a source ahead of another waits.
    pub alignment: SourceAlignment,
    /// The file ranges this process's file source instances take in turn.
    pub range_claims: RangeClaims,
    /// The model versions this process's score instances serve now: the committer records
    /// them in every manifest.
    pub serving: Arc<ServingModels>,
    /// Run after each committed checkpoint (consumer-group offsets).
    pub on_commit: Option<CommitHook>,
    /// Scoring-stage counters of this process (reloads, canary rows, ...).
    pub score_counters: Arc<ScoreCounters>,
}

type DeadLetters<'scope> = Stream<'scope, Tick, Vec<DeadLetter>>;

/// Builds the job's dataflow on one worker.
pub fn build(scope: Scope<'_, Tick>, plan: &JobPlan) -> Result<()> {
    if plan.mode == Mode::Score {
        plan.pin_worker(scope.index());
    }
    // Two handles shared across stages: the score backlog pauses the sources, and the
    // versions the score instances serve go into the committer's manifests.
    let (backlog, serving) = (&plan.backlog, &plan.serving);
    let stage = plan.source_stage(backlog);
    let source = match &plan.job.source.input {
        SourceInput::Kafka(kafka) => kafka_source(scope, plan.kafka_source_config(kafka, stage))?,
        SourceInput::Files { paths, split } => {
            file_source(scope, plan.file_source_config(paths, *split, stage))?
        }
    };
    let windows = source
        .events
        .window_features(source.reports, plan.window_config())?;
    let progress = source.progress;
    let dead_letters = source.dead_letters.concat(windows.late);
    let checkpoint = source.checkpoint.concat(windows.checkpoint);
    if plan.mode == Mode::FeaturesOnly {
        let mut rows_json = FeatureRowsJson::default();
        let rows = windows.rows.probe_with(&progress).jsonl_sink(
            plan.file_sink_config(plan.scores_file()?, Operator::ScoreSink),
            move |row, lines| lines.line(|out| rows_json.write(row, out)),
            |m| &m.rows_written,
        )?;
        let dead = plan.dead_letter_sink(dead_letters)?;
        plan.commit_checkpoints(checkpoint.concat(rows).concat(dead), serving);
        return Ok(());
    }
    let scored = windows.rows.score(plan.score_config(backlog, serving)?)?;
    // The sources hold back while the scores lag (`[runtime] max_lag`), in any process.
    let scored_rows = scored.scores.probe_with(&progress);
    let scores = match &plan.job.sinks {
        SinkPlan::Kafka {
            scores_topic,
            properties,
            ..
        } => scored_rows.kafka_score_sink(
            plan.kafka_sink_config(scores_topic, properties),
            plan.feature_names(),
            plan.job.source.name.clone(),
        )?,
        SinkPlan::File { scores, .. } => {
            let json = ScoreJson::new(&plan.feature_names(), &plan.job.source.name);
            let encode = move |batch: &ScoredBatch, lines: &mut Lines<'_>| {
                for score in batch.views() {
                    // The score id it returns is in the record already: a file has no headers.
                    lines.line(|out| {
                        json.write(&score, out);
                    });
                }
            };
            scored_rows.jsonl_sink(
                plan.file_sink_config(scores, Operator::ScoreSink),
                encode,
                |m| &m.scores_delivered,
            )?
        }
    };
    let dead = plan.dead_letter_sink(dead_letters.concat(scored.dead_letters))?;
    plan.commit_checkpoints(checkpoint.concat(scores).concat(dead), serving);
    Ok(())
}

impl JobPlan {
    fn dead_letter_sink<'scope>(
        &self,
        dead_letters: DeadLetters<'scope>,
    ) -> Result<CheckpointStream<'scope>> {
        Ok(match &self.job.sinks {
            SinkPlan::Kafka {
                dead_letter_topic,
                properties,
                ..
            } => dead_letters
                .kafka_dead_letter_sink(self.kafka_sink_config(dead_letter_topic, properties))?,
            SinkPlan::File {
                dead_letters: path, ..
            } => dead_letters.jsonl_sink(
                self.file_sink_config(path, Operator::DeadLetterSink),
                |letter, lines| lines.line(|out| out.extend(dead_letter_json(letter))),
                |m| &m.dead_letters_delivered,
            )?,
        })
    }

    /// Ends the checkpoint streams in the committer (when checkpoints are on).
    fn commit_checkpoints(&self, parts: CheckpointStream<'_>, serving: &Arc<ServingModels>) {
        let Some(checkpoints) = &self.checkpoints else {
            return;
        };
        let restored_positions = checkpoints
            .restore
            .as_ref()
            .map(|m| m.positions())
            .unwrap_or_default();
        parts.commit_checkpoints(CommitterConfig {
            store: checkpoints.store.clone(),
            epochs: checkpoints.clock,
            key_groups: self.job.runtime.key_groups,
            parallelism: parallelism_by_operator(&self.job),
            stateful_operators: vec![WINDOW_OPERATOR.to_owned()],
            model_versions: self.model_versions.clone(),
            serving: serving.clone(),
            topology_hash: checkpoints.topology_hash,
            tick_ms: millis(self.job.runtime.tick),
            retain: checkpoints.retain,
            restored_positions,
            inputs: checkpoints.inputs.clone(),
            worker: self.job.runtime.placement.worker_of(0),
            metrics: self.metrics.clone(),
            on_commit: self.on_commit.clone(),
        });
    }

    fn epochs(&self) -> EpochClock {
        self.checkpoints
            .as_ref()
            .map_or(EpochClock::OFF, |c| c.clock)
    }

    /// Resume positions of the source from the restored checkpoint.
    fn resume(&self) -> SourcePositions {
        self.checkpoints
            .as_ref()
            .and_then(|c| c.restore.as_ref())
            .map(|m| m.positions_of(&self.job.source.name))
            .unwrap_or_default()
    }

    /// The file a features-only run writes its rows to.
    fn scores_file(&self) -> Result<&PathBuf> {
        match &self.job.sinks {
            SinkPlan::File { scores, .. } => Ok(scores),
            SinkPlan::Kafka { .. } => {
                bail!("[sink] kind = \"file\" needs path = \"...\" (or pass --output-file)")
            }
        }
    }

    fn file_sink_config(&self, path: &Path, operator: Operator) -> FileSinkConfig {
        FileSinkConfig {
            path: path.to_path_buf(),
            operator,
            placement: self.job.runtime.placement,
            metrics: self.metrics.clone(),
            epochs: self.epochs(),
            append: self
                .checkpoints
                .as_ref()
                .is_some_and(|c| c.restore.is_some()),
        }
    }

    fn record_decoder(&self) -> RecordDecoder {
        RecordDecoder {
            decoder: JsonDecoder::new(self.job.schema.clone()),
            key_groups: self.job.runtime.key_groups,
            source_name: self.job.source.name.clone(),
            metrics: self.metrics.clone(),
            max_future_ms: self.job.source.max_future,
            limits: self.job.source.limits,
        }
    }

    /// Where the source instances run, their tick and epochs, and what stops and pauses them:
    /// the stop flag, the score backlog and `max_lag`.
    fn source_stage(&self, backlog: &ScoreBacklog) -> SourceStage {
        let runtime = &self.job.runtime;
        SourceStage {
            parallelism: self.job.parallelism.source,
            placement: self.job.runtime.placement,
            tick_ms: millis(runtime.tick),
            epochs: self.epochs(),
            pacing: Pacing {
                stop: self.stop.clone(),
                metrics: self.metrics.clone(),
                backlog: backlog.clone(),
                max_lag_ms: runtime.max_lag.map(millis),
                alignment: self.alignment.clone(),
            },
        }
    }

    fn file_source_config(
        &self,
        paths: &[PathBuf],
        split: RangeSplit,
        stage: SourceStage,
    ) -> FileSourceConfig {
        let source = &self.job.source;
        FileSourceConfig {
            paths: paths.to_vec(),
            split,
            stage,
            decoder: self.record_decoder(),
            max_out_of_orderness_ms: source.max_out_of_orderness,
            max_batch: source.max_batch,
            resume: self.resume(),
            claims: self.range_claims.clone(),
        }
    }

    fn kafka_source_config(&self, kafka: &KafkaInput, stage: SourceStage) -> KafkaSourceConfig {
        let source = &self.job.source;
        KafkaSourceConfig {
            topic: kafka.topic.clone(),
            properties: kafka.properties.clone(),
            start: kafka.start.clone(),
            bounded: source.bounded,
            stop: kafka.stop.clone(),
            stage,
            decoder: self.record_decoder(),
            max_out_of_orderness_ms: source.max_out_of_orderness,
            idle_timeout_ms: millis(source.idle_timeout),
            max_batch: source.max_batch,
            // A Kafka partition never finishes: its positions are all open.
            resume: self.resume().open,
            partition_discovery_ms: kafka.partition_discovery.map(millis),
        }
    }

    fn window_config(&self) -> WindowConfig {
        let job = &self.job;
        WindowConfig {
            logic: WindowLogic {
                features: job.features.clone(),
                schema: job.schema.clone(),
                allowed_lateness_ms: job.windows.allowed_lateness,
                source_name: job.source.name.clone(),
                state_ttl_ms: job.windows.state_ttl.map(millis_i64),
            },
            key_groups: job.runtime.key_groups,
            parallelism: job.parallelism.window,
            sources: job.parallelism.source,
            placement: self.job.runtime.placement,
            metrics: self.metrics.clone(),
            checkpoints: self
                .checkpoints
                .as_ref()
                .map_or_else(OperatorCheckpoints::off, CheckpointPlan::operator),
        }
    }

    fn score_config(
        &self,
        backlog: &ScoreBacklog,
        serving: &Arc<ServingModels>,
    ) -> Result<ScoreConfig> {
        let job = &self.job;
        let score = job.score()?.clone();
        Ok(ScoreConfig {
            model: score.model,
            batching: score.batching,
            job_features: job.features.names().to_vec(),
            cores: score.cores,
            parallelism: job.parallelism.score,
            placement: self.job.runtime.placement,
            key_groups: job.runtime.key_groups,
            source_name: job.source.name.clone(),
            metrics: self.metrics.clone(),
            counters: self.score_counters.clone(),
            backlog: backlog.clone(),
            serving: serving.clone(),
        })
    }

    fn kafka_sink_config(
        &self,
        topic: &str,
        properties: &BTreeMap<String, String>,
    ) -> KafkaSinkConfig {
        let (dead_letter_topic, delivery) = match &self.job.sinks {
            SinkPlan::Kafka {
                dead_letter_topic,
                delivery,
                ..
            } => (dead_letter_topic.clone(), *delivery),
            SinkPlan::File { .. } => (topic.to_owned(), DeliveryGuarantee::AtLeastOnce),
        };
        KafkaSinkConfig {
            topic: topic.to_owned(),
            dead_letter_topic,
            properties: properties.clone(),
            parallelism: self.job.parallelism.sink,
            placement: self.job.runtime.placement,
            key_groups: self.job.runtime.key_groups,
            metrics: self.metrics.clone(),
            epochs: self.epochs(),
            delivery,
            job: self.job.name.clone(),
        }
    }

    /// With `[model] cores`, pins this Timely worker thread to a core the inference threads
    /// do not use (DESIGN.md §4: inference cores separate from worker cores).
    fn pin_worker(&self, worker: usize) {
        let Some(score) = &self.job.score else {
            return;
        };
        let cores = &score.inference_cores;
        let local = worker % self.job.runtime.workers.max(1);
        if let Some(core) = worker_core(cores, cpu_set(), local) {
            if !pin_current_thread(core) {
                tracing::warn!(worker, core, "could not pin the Timely worker");
            }
        }
    }

    /// Feature names in output order.
    pub fn feature_names(&self) -> Arc<[String]> {
        self.job.features.names().to_vec().into()
    }
}
