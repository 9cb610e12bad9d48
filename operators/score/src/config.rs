//! The scoring stage's settings: what the job gives the stage ([`ScoreConfig`]) and what
//! each score instance's inference thread is started with ([`InferenceSetup`], derived from
//! it per instance).
//!
//! A leaf of the scoring stage: read by the operator (`crate::operator`), its batcher
//! (`crate::batcher`), the inference thread (`crate::inference_thread`) and hot reload
//! (`crate::reload`), and importing none of them.

use std::sync::Arc;
use std::time::Duration;

use weir_operators::backpressure::ScoreBacklog;
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::Placement;
use weir_operators::serving::ServingModels;

use crate::budget::InstanceCores;
use crate::counters::ScoreCounters;
use crate::registry::ModelSource;
use crate::secondary::SecondaryModel;
use crate::session::SessionOptions;

/// Which model a score instance serves and how its session runs: the one copy of these
/// settings, from the job's `[model]` (jobs' score plan) to every inference thread.
#[derive(Clone, Debug)]
pub struct ModelSettings {
    /// Where the primary model comes from (a fixed directory or a registry).
    pub source: ModelSource,
    /// The job file's shadow or canary version, if any (with a registry, a `canary` /
    /// `shadow` line of its `CONTROL` file overrides it while present; `crate::reload`).
    pub secondary: Option<SecondaryModel>,
    /// Session threads, warm-up and batch size (`max_batch_rows`).
    pub session: SessionOptions,
}

/// When a batch goes to the inference thread and how many may wait for it.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    /// A batch that is not full is sent at the latest this long after its first row.
    pub max_batch_delay: Duration,
    /// Batches queued or running per instance at most (backpressure bound).
    pub max_in_flight: usize,
}

/// Configuration of the scoring stage.
#[derive(Clone, Debug)]
pub struct ScoreConfig {
    /// The model and its session.
    pub model: ModelSettings,
    /// Batching and the in-flight bound.
    pub batching: BatchLimits,
    /// The job's feature names in the order rows carry them.
    pub job_features: Vec<String>,
    /// Cores per instance of one process when the inference threads are pinned
    /// (`budget::plan_cores`), in the order of `Placement::local_index`.
    pub cores: Option<Vec<InstanceCores>>,
    /// Number of score instances (= inference threads).
    pub parallelism: usize,
    /// Worker layout.
    pub placement: Placement,
    /// Key groups of the job (rows are routed by key group).
    pub key_groups: u32,
    /// Source name, for dead letters.
    pub source_name: String,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Scoring-stage counters (reloads, canary rows, ...).
    pub counters: Arc<ScoreCounters>,
    /// Where an instance at its in-flight bound pauses this process's sources.
    pub backlog: ScoreBacklog,
    /// Where the inference threads say which versions they serve (for checkpoint manifests).
    pub serving: Arc<ServingModels>,
}

impl ScoreConfig {
    /// What instance `instance`'s inference thread needs.
    pub fn inference_setup(&self, instance: usize) -> InferenceSetup {
        InferenceSetup {
            instance,
            model: self.model.clone(),
            job_features: self.job_features.clone(),
            // The plan lists one process's instances: this one is the k-th on its process.
            cores: self
                .cores
                .as_ref()
                .and_then(|plan| plan.get(self.placement.local_index(instance)).cloned()),
            metrics: self.metrics.clone(),
            counters: self.counters.clone(),
            serving: self.serving.clone(),
        }
    }
}

/// Everything an inference thread needs to load and serve its models.
#[derive(Clone, Debug)]
pub struct InferenceSetup {
    /// The score instance this thread serves (its entry in `serving`).
    pub instance: usize,
    /// The model and its session. A job file's second version is a fixed directory (its files
    /// are not watched); with a registry, a `canary` / `shadow` line of `CONTROL` replaces it
    /// while present.
    pub model: ModelSettings,
    /// The job's feature names, in row order.
    pub job_features: Vec<String>,
    /// Cores to pin to; `None` runs unpinned.
    pub cores: Option<InstanceCores>,
    /// Job counters.
    pub metrics: Arc<JobMetrics>,
    /// Scoring-stage counters.
    pub counters: Arc<ScoreCounters>,
    /// Where this thread says which versions it serves.
    pub serving: Arc<ServingModels>,
}
