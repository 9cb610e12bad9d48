//! The whole Weir pipeline as one top-down chain (DESIGN.md §1):
//!
//! ```text
//! kafka_source ─▶ window_features ─▶ score ─▶ kafka_score_sink
//!      │ bad records     │ late records   │ failed inferences
//!      └─────────────────┴────────────────┴─▶ kafka_dead_letter_sink
//! ```
//!
//! [`JobPlan`] holds everything every worker needs to build its part of the dataflow.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;
use timely::dataflow::operators::Concat;
use timely::dataflow::Scope;

use weir_features::decode::JsonDecoder;
use weir_features::vocab::Tick;
use weir_kafka::{
    kafka_source, KafkaDeadLetterSink, KafkaScoreSink, KafkaSinkConfig, KafkaSourceConfig,
};
use weir_operators::metrics::JobMetrics;
use weir_operators::{Placement, WindowConfig, WindowFeatures};
use weir_score::operator::{Score, ScoreConfig};
use weir_score::SessionOptions;

use crate::config::CompiledJob;

/// A compiled job plus run-time facts: ready to be built on every worker.
#[derive(Clone, Debug)]
pub struct JobPlan {
    /// The compiled job.
    pub job: CompiledJob,
    /// Worker layout.
    pub placement: Placement,
    /// Shared counters of this process.
    pub metrics: Arc<JobMetrics>,
    /// Set to stop the sources.
    pub stop: Arc<AtomicBool>,
}

/// Builds the job's dataflow on one worker.
pub fn build(scope: Scope<'_, Tick>, plan: &JobPlan) -> Result<()> {
    let source = kafka_source(scope, plan.source_config())?;
    let windows = source
        .events
        .window_features(source.reports, plan.window_config());
    let scored = windows.rows.score(plan.score_config())?;
    scored.scores.kafka_score_sink(
        plan.sink_config(&plan.job.file.sink.topic),
        plan.feature_names(),
        plan.job.file.source.topic.clone(),
    )?;
    source
        .dead_letters
        .concat(windows.late)
        .concat(scored.dead_letters)
        .kafka_dead_letter_sink(plan.sink_config(&plan.job.file.sink.dead_letter_topic))?;
    Ok(())
}

impl JobPlan {
    fn source_config(&self) -> KafkaSourceConfig {
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
        }
    }

    fn window_config(&self) -> WindowConfig {
        let file = &self.job.file;
        WindowConfig {
            spec: file.window.clone(),
            features: self.job.features.clone(),
            schema: self.job.schema.clone(),
            allowed_lateness_ms: file.watermark.allowed_lateness,
            key_groups: file.runtime.key_groups,
            parallelism: self.job.parallelism.window,
            sources: self.job.parallelism.source,
            placement: self.placement,
            source_name: file.source.topic.clone(),
            metrics: self.metrics.clone(),
        }
    }

    fn score_config(&self) -> ScoreConfig {
        let file = &self.job.file;
        ScoreConfig {
            model_dir: self.model_dir(),
            job_features: self.job.features.names(),
            session: SessionOptions {
                intra_threads: file.model.intra_threads,
                warmup_batches: file.model.warmup_batches,
                max_batch_rows: file.model.max_batch_rows,
            },
            parallelism: self.job.parallelism.score,
            placement: self.placement,
            key_groups: file.runtime.key_groups,
            source_name: file.source.topic.clone(),
            metrics: self.metrics.clone(),
        }
    }

    fn sink_config(&self, topic: &str) -> KafkaSinkConfig {
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
        }
    }

    /// The model directory.
    pub fn model_dir(&self) -> PathBuf {
        self.job.file.model_dir()
    }

    /// Feature names in output order.
    pub fn feature_names(&self) -> Arc<[String]> {
        self.job.features.names().into()
    }
}
