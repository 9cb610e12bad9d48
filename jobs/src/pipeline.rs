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
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{Context, Result};
use timely::dataflow::operators::{Concat, Probe};
use timely::dataflow::{Scope, Stream};

use weir_checkpoint::SourceOffset;
use weir_features::dead_letter::DeadLetter;
use weir_features::decode::JsonDecoder;
use weir_features::encode::{dead_letter_json, feature_row_json, score_json};
use weir_features::scored::ScoredBatch;
use weir_features::vocab::Tick;
use weir_kafka::{
    kafka_source, KafkaDeadLetterSink, KafkaScoreSink, KafkaSinkConfig, KafkaSourceConfig,
};
use weir_operators::committer::{CommitCheckpoints, CommitHook, CommitterConfig};
use weir_operators::epochs::{CheckpointStream, EpochClock, OperatorCheckpoints};
use weir_operators::file_sink::{FileSinkConfig, JsonlSink};
use weir_operators::file_source::{file_source, FileSourceConfig};
use weir_operators::metrics::JobMetrics;
use weir_operators::source::RecordDecoder;
use weir_operators::{Placement, WindowConfig, WindowFeatures};
use weir_score::budget::{cpu_set, pin_current_thread, worker_core};
use weir_score::counters::ScoreCounters;
use weir_score::operator::{Score, ScoreConfig};

use crate::checkpointing::{parallelism_by_operator, CheckpointPlan};
use crate::config::{CompiledJob, EdgeKind};

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
    /// Worker layout.
    pub placement: Placement,
    /// Shared counters of this process.
    pub metrics: Arc<JobMetrics>,
    /// Set to stop the sources.
    pub stop: Arc<AtomicBool>,
    /// Checkpointing of this run (`None`: no `[checkpoint]` section).
    pub checkpoints: Option<CheckpointPlan>,
    /// Model versions loaded at start, by model name: checkpoint manifests record them while
    /// no score instance of this process reports what it serves (`JobMetrics::serving`).
    pub model_versions: BTreeMap<String, String>,
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
    let source = match plan.job.file.source.kind {
        EdgeKind::Kafka => kafka_source(scope, plan.kafka_source_config())?,
        EdgeKind::File => file_source(scope, plan.file_source_config())?,
    };
    let windows = source
        .events
        .window_features(source.reports, plan.window_config())?;
    let progress = source.progress;
    let dead_letters = source.dead_letters.concat(windows.late);
    let checkpoint = source.checkpoint.concat(windows.checkpoint);
    if plan.mode == Mode::FeaturesOnly {
        let rows = windows.rows.probe_with(&progress).jsonl_sink(
            plan.file_sink_config()?.0,
            |row, line| line(feature_row_json(row)),
            |m| &m.rows_written,
        )?;
        let dead = plan.dead_letter_sink(dead_letters)?;
        plan.commit_checkpoints(checkpoint.concat(rows).concat(dead));
        return Ok(());
    }
    let scored = windows.rows.score(plan.score_config()?)?;
    // The sources hold back while the scores lag (`[runtime] max_lag`), in any process.
    let scored_rows = scored.scores.probe_with(&progress);
    let scores = match plan.job.file.sink.kind {
        EdgeKind::Kafka => scored_rows.kafka_score_sink(
            plan.kafka_sink_config(&plan.job.file.sink.topic),
            plan.feature_names(),
            plan.job.file.source_name(),
        )?,
        EdgeKind::File => {
            let (names, source) = (plan.feature_names(), plan.job.file.source_name());
            let encode = move |batch: &ScoredBatch, line: &mut dyn FnMut(Vec<u8>)| {
                batch
                    .views()
                    .for_each(|s| line(score_json(&s, &names, &source)));
            };
            scored_rows.jsonl_sink(plan.file_sink_config()?.0, encode, |m| &m.scores_delivered)?
        }
    };
    let dead = plan.dead_letter_sink(dead_letters.concat(scored.dead_letters))?;
    plan.commit_checkpoints(checkpoint.concat(scores).concat(dead));
    Ok(())
}

impl JobPlan {
    fn dead_letter_sink<'scope>(
        &self,
        dead_letters: DeadLetters<'scope>,
    ) -> Result<CheckpointStream<'scope>> {
        Ok(match self.job.file.sink.kind {
            EdgeKind::Kafka => dead_letters.kafka_dead_letter_sink(
                self.kafka_sink_config(&self.job.file.sink.dead_letter_topic),
            )?,
            EdgeKind::File => dead_letters.jsonl_sink(
                self.file_sink_config()?.1,
                |letter, line| line(dead_letter_json(letter)),
                |m| &m.dead_letters_delivered,
            )?,
        })
    }

    /// Ends the checkpoint streams in the committer (when checkpoints are on).
    fn commit_checkpoints(&self, parts: CheckpointStream<'_>) {
        let Some(checkpoints) = &self.checkpoints else {
            return;
        };
        let restored_offsets = checkpoints
            .restore
            .as_ref()
            .map(|m| m.sources.clone())
            .unwrap_or_default();
        parts.commit_checkpoints(CommitterConfig {
            store: checkpoints.store.clone(),
            epochs: checkpoints.clock,
            key_groups: self.job.file.runtime.key_groups,
            parallelism: parallelism_by_operator(&self.job),
            model_versions: self.model_versions.clone(),
            topology_hash: checkpoints.topology_hash,
            tick_ms: self.job.file.runtime.tick as u64,
            retain: checkpoints.retain,
            restored_offsets,
            worker: self.placement.worker_of(0),
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
    fn resume(&self) -> BTreeMap<i32, SourceOffset> {
        self.checkpoints
            .as_ref()
            .and_then(|c| c.restore.as_ref())
            .and_then(|m| m.sources.get(&self.job.file.source_name()).cloned())
            .unwrap_or_default()
    }

    fn file_sink_config(&self) -> Result<(FileSinkConfig, FileSinkConfig)> {
        let (scores, dead) = self
            .job
            .file
            .sink_paths()
            .context("[sink] kind = \"file\" needs path = \"...\" (or pass --output-file)")?;
        let append = self
            .checkpoints
            .as_ref()
            .is_some_and(|c| c.restore.is_some());
        let config = |path| FileSinkConfig {
            path,
            placement: self.placement,
            metrics: self.metrics.clone(),
            epochs: self.epochs(),
            append,
        };
        Ok((config(scores), config(dead)))
    }

    fn record_decoder(&self) -> RecordDecoder {
        RecordDecoder {
            decoder: JsonDecoder::new(self.job.schema.clone()),
            key_groups: self.job.file.runtime.key_groups,
            source_name: self.job.file.source_name(),
            metrics: self.metrics.clone(),
        }
    }

    fn file_source_config(&self) -> FileSourceConfig {
        let file = &self.job.file;
        FileSourceConfig {
            paths: file.source_paths(),
            parallelism: self.job.parallelism.source,
            placement: self.placement,
            tick_ms: file.runtime.tick as u64,
            decoder: self.record_decoder(),
            max_out_of_orderness_ms: file.watermark.max_out_of_orderness,
            max_batch: file.source.max_batch,
            stop: self.stop.clone(),
            epochs: self.epochs(),
            resume: self.resume(),
            max_lag_ms: file.runtime.max_lag_ms(),
        }
    }

    fn kafka_source_config(&self) -> KafkaSourceConfig {
        let file = &self.job.file;
        let mut properties = file.kafka.clone();
        properties
            .entry("group.id".to_owned())
            .or_insert_with(|| format!("weir-{}", file.name));
        properties.extend(file.source.kafka.clone());
        KafkaSourceConfig {
            topic: file.source.topic.clone(),
            properties,
            start: file.source.start,
            bounded: file.source.bounded,
            parallelism: self.job.parallelism.source,
            placement: self.placement,
            tick_ms: file.runtime.tick as u64,
            key_groups: file.runtime.key_groups,
            decoder: JsonDecoder::new(self.job.schema.clone()),
            max_out_of_orderness_ms: file.watermark.max_out_of_orderness,
            idle_timeout_ms: file.watermark.idle_timeout as u64,
            max_batch: file.source.max_batch,
            metrics: self.metrics.clone(),
            stop: self.stop.clone(),
            epochs: self.epochs(),
            resume: self.resume(),
            max_lag_ms: file.runtime.max_lag_ms(),
            partition_discovery_ms: file.source.partition_discovery_ms(),
        }
    }

    fn window_config(&self) -> WindowConfig {
        let file = &self.job.file;
        WindowConfig {
            features: self.job.features.clone(),
            schema: self.job.schema.clone(),
            allowed_lateness_ms: file.watermark.allowed_lateness,
            key_groups: file.runtime.key_groups,
            parallelism: self.job.parallelism.window,
            sources: self.job.parallelism.source,
            placement: self.placement,
            source_name: file.source_name(),
            state_ttl_ms: file.state.ttl_ms().ok().flatten(),
            metrics: self.metrics.clone(),
            checkpoints: self
                .checkpoints
                .as_ref()
                .map_or_else(OperatorCheckpoints::off, CheckpointPlan::operator),
        }
    }

    fn score_config(&self) -> Result<ScoreConfig> {
        let file = &self.job.file;
        let parallelism = self.job.parallelism.score;
        let model = file
            .model
            .score_settings(&file.base_dir, self.placement, parallelism)?;
        Ok(ScoreConfig {
            source: model.source,
            secondary: model.secondary,
            job_features: self.job.features.names().to_vec(),
            session: model.session,
            max_batch_delay: model.max_batch_delay,
            max_in_flight: model.max_in_flight,
            cores: model.cores,
            parallelism,
            placement: self.placement,
            key_groups: file.runtime.key_groups,
            source_name: file.source_name(),
            metrics: self.metrics.clone(),
            counters: self.score_counters.clone(),
        })
    }

    fn kafka_sink_config(&self, topic: &str) -> KafkaSinkConfig {
        let file = &self.job.file;
        let mut properties = file.kafka.clone();
        properties.extend(file.sink.kafka.clone());
        KafkaSinkConfig {
            topic: topic.to_owned(),
            properties,
            parallelism: self.job.parallelism.sink,
            placement: self.placement,
            key_groups: file.runtime.key_groups,
            metrics: self.metrics.clone(),
            epochs: self.epochs(),
        }
    }

    /// With `[model] cores`, pins this Timely worker thread to a core the inference threads
    /// do not use (DESIGN.md §4: inference cores separate from worker cores).
    fn pin_worker(&self, worker: usize) {
        let cores = &self.job.file.model.cores;
        let local = worker % self.job.file.runtime.workers.max(1);
        if let Some(core) = worker_core(cores, cpu_set(), local) {
            if !pin_current_thread(core) {
                tracing::warn!(worker, core, "could not pin the Timely worker");
            }
        }
    }

    /// The model directory.
    pub fn model_dir(&self) -> PathBuf {
        self.job.file.model_dir()
    }

    /// Feature names in output order.
    pub fn feature_names(&self) -> Arc<[String]> {
        self.job.features.names().to_vec().into()
    }
}
