//! The score stage's settings, planned once: the model's source and second version, session
//! options, batching bounds and the pinned cores of one process's inference threads. The
//! pipeline hands them to `weir_score::operator::ScoreConfig`; `weir run`'s preflight loads
//! the versions served at start with them (an S3 registry's first sync happens there, and its
//! mirror is shared by every clone of the plan: one per process).

use std::path::PathBuf;

use anyhow::{Context, Result};

use weir_score::budget::InstanceCores;
use weir_score::config::{BatchLimits, ModelSettings};
use weir_score::registry::{ModelSource, Registry, Target};
use weir_score::reload::start_primary;
use weir_score::secondary::SecondaryModel;
use weir_score::SessionOptions;

/// `[model]` as the score operator uses it.
#[derive(Clone, Debug)]
pub struct ScorePlan {
    /// The model sources and session options.
    pub model: ModelSettings,
    /// Micro-batch delay and in-flight bounds.
    pub batching: BatchLimits,
    /// Pinned cores per instance of one process (`None`: not pinned).
    pub cores: Option<Vec<InstanceCores>>,
    /// `[model] cores` as listed: a scoring run's Timely workers are pinned to other cores.
    pub inference_cores: Vec<usize>,
    /// Drift and error-rate alerts (`[model] drift_alert`, `error_rate_alert`, `drift_window`).
    pub alerts: weir_score::drift::AlertSettings,
}

impl ScorePlan {
    /// The model directory (path form) or the model's registry directory.
    pub fn model_dir(&self) -> PathBuf {
        model_dir(&self.model.source)
    }

    /// The model's name in its registry (`""` for a single directory).
    pub fn model_name(&self) -> &str {
        match &self.model.source {
            ModelSource::Registry { name, .. } => name,
            ModelSource::ObjectStore(remote) => remote.name(),
            ModelSource::Dir(_) => "",
        }
    }

    /// The session options preflight loads each version with: one thread, unpinned, and one
    /// warm-up batch when the job warms up at all (it is what rejects a model whose dynamic
    /// input width does not fit, so preflight and the inference threads agree on which
    /// registry version loads).
    pub fn preflight_session(&self) -> SessionOptions {
        SessionOptions {
            intra_threads: 1,
            warmup_batches: self.model.session.warmup_batches.min(1),
            max_batch_rows: self.model.session.max_batch_rows,
            intra_thread_affinities: None,
        }
    }

    /// The versions served at start (see [`initial_models`]).
    pub fn initial_models(
        &self,
        loads: impl Fn(&Target) -> weir_score::Result<()>,
    ) -> Result<(PathBuf, Option<SecondaryModel>)> {
        initial_models(&self.model.source, self.model.secondary.clone(), loads)
    }
}

/// The model directory of `source`: the directory itself, or the model's registry directory
/// (`s3://bucket/prefix/<name>` on an object store).
pub fn model_dir(source: &ModelSource) -> PathBuf {
    match source {
        ModelSource::Dir(dir) => dir.clone(),
        ModelSource::Registry { root, name, .. } => root.join(name),
        ModelSource::ObjectStore(remote) => PathBuf::from(remote.location()),
    }
}

/// The registry directory to read and the model name: a local registry's, or an object
/// store's local mirror, synced first if this process has not yet (the start fails, naming
/// the URL, when it cannot be). `None` for a single directory.
fn registry_of(source: &ModelSource) -> Result<Option<Registry>> {
    Ok(match source {
        ModelSource::Dir(_) => None,
        ModelSource::Registry { root, name, .. } => Some(Registry::new(root, name)),
        ModelSource::ObjectStore(remote) => {
            let root = remote.start().with_context(|| {
                format!("[model] registry = \"{}\": cannot mirror it", remote.url())
            })?;
            Some(Registry::new(&root, remote.name()))
        }
    })
}

/// The directory of the primary version served at start, and the second version served
/// beside it: the registry's plan (its `CONTROL` file), else `job_second` (the job file's).
/// Under `latest`, a newest version that `loads` refuses is passed over for the newest older
/// one it accepts, as the inference threads do (`weir_score::reload::start_primary`); a
/// `CONTROL` second version `loads` refuses is an error (the inference threads would refuse
/// it too, after the cluster had connected).
pub fn initial_models(
    source: &ModelSource,
    job_second: Option<SecondaryModel>,
    loads: impl Fn(&Target) -> weir_score::Result<()>,
) -> Result<(PathBuf, Option<SecondaryModel>)> {
    match registry_of(source)? {
        None => Ok((model_dir(source), job_second)),
        Some(registry) => {
            let plan = registry.plan().context("[model] registry")?;
            let start = start_primary(&plan, &registry, &loads)
                .context("[model] registry: no version loads")?;
            let serving = start.serving;
            for (target, error) in &start.skipped {
                tracing::warn!(%error, skipped = %target.version, serving = %serving.version, "a newer model version does not load; the job starts with an older one");
            }
            let second = match plan.second {
                Some((role, target)) => {
                    loads(&target).with_context(|| {
                        format!(
                            "[model] registry: CONTROL's {role} version `{}`",
                            target.version
                        )
                    })?;
                    Some(SecondaryModel {
                        role,
                        dir: target.dir,
                    })
                }
                None => job_second,
            };
            Ok((serving.dir, second))
        }
    }
}
