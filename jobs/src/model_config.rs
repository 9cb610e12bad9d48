//! The job file's `[model]` section: which model the scoring stage serves (one directory, or
//! a registry watched for new versions), its second version (shadow or canary; with a
//! registry, a `CONTROL` line can override it at run time), micro-batching, in-flight bound,
//! threads and pinned cores. A registry is a directory or `s3://bucket/prefix`. Kept apart from `config.rs` so the scoring options grow here;
//! [`ModelSection::plan`] checks it and turns it into the score stage's plan
//! ([`crate::plan::ScorePlan`]). See docs/JOB_FILE.md, `[model]`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use serde::Deserialize;

use weir_checkpoint::is_object_store_url;
use weir_checkpoint::object::parse_s3_url;
use weir_features::duration_ms;
use weir_operators::Placement;
use weir_score::budget::{cpu_set, plan_cores, InstanceCores};
use weir_score::config::{BatchLimits, ModelSettings};
use weir_score::drift::AlertSettings;
use weir_score::registry::{ModelSource, RemoteRegistry, Target};
use weir_score::secondary::{SecondaryModel, SecondaryRole};
use weir_score::SessionOptions;

use crate::plan::score::{initial_models, model_dir, ScorePlan};

/// `[model]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// One model directory (`model.onnx` + `manifest.json`), relative to the job file.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A registry root holding `<name>/<version>/` directories, relative to the job file, or
    /// `s3://bucket/prefix` (mirrored into a local cache: `weir_score::registry_mirror`).
    #[serde(default)]
    pub registry: Option<PathBuf>,
    /// The model's name in the registry.
    #[serde(default)]
    pub name: Option<String>,
    /// How often the registry is polled for a new version or a `CONTROL` command.
    #[serde(with = "duration_ms", default = "default_poll")]
    pub poll: i64,
    /// A shadow version's directory (scores every row too; relative to the job file).
    #[serde(default)]
    pub shadow: Option<PathBuf>,
    /// A canary version's directory (scores `canary_share` of the keys instead).
    #[serde(default)]
    pub canary: Option<PathBuf>,
    /// Share of keys the canary scores, in (0, 1].
    #[serde(default)]
    pub canary_share: Option<f64>,
    /// Rows per inference call at most.
    #[serde(default = "default_batch_rows")]
    pub max_batch_rows: usize,
    /// A batch that is not full is sent at the latest this long after its first row.
    #[serde(with = "duration_ms", default = "default_batch_delay")]
    pub max_batch_delay: i64,
    /// Batches queued or running per score instance at most.
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    /// ONNX Runtime intra-op threads per score instance.
    #[serde(default = "one")]
    pub intra_threads: usize,
    /// Synthetic batches run before the first record.
    #[serde(default = "default_warmup")]
    pub warmup_batches: usize,
    /// Cores to pin one process's inference threads to: (score instances per process) ×
    /// intra_threads ids.
    #[serde(default)]
    pub cores: Vec<usize>,
    /// PSI of the recent scores against the manifest's baseline above which
    /// `weir_model_drift_alert` is 1 (absent: no drift alert; the PSI is still exported).
    #[serde(default)]
    pub drift_alert: Option<f64>,
    /// Share of failed inferences above which `weir_inference_error_rate_alert` is 1.
    #[serde(default)]
    pub error_rate_alert: Option<f64>,
    /// The sliding window both are computed over.
    #[serde(with = "duration_ms", default = "default_drift_window")]
    pub drift_window: i64,
    /// Rows the window needs before either is computed.
    #[serde(default = "default_drift_min_rows")]
    pub drift_min_rows: u64,
}

fn default_drift_window() -> i64 {
    300_000
}
fn default_drift_min_rows() -> u64 {
    100
}

fn default_poll() -> i64 {
    2_000
}
fn default_batch_rows() -> usize {
    256
}
fn default_batch_delay() -> i64 {
    2
}
/// 16: with fewer, a fast model's inference thread had to wake the operator after nearly
/// every batch (the wake is skipped only while over half the bound waits), which cost a
/// 70 ns/row MLP 15-20 % of its throughput (BENCHMARKS.md, scoring throughput). 16 batches of
/// 256 rows are a few hundred KB.
fn default_in_flight() -> usize {
    16
}
fn one() -> usize {
    1
}
fn default_warmup() -> usize {
    2
}

impl ModelSection {
    /// The section's own rules (the CPU budget is checked by planning the cores).
    fn check_fields(&self) -> Result<()> {
        match (&self.path, &self.registry, &self.name) {
            (Some(_), None, None) | (None, Some(_), Some(_)) => {}
            (Some(_), Some(_), _) => {
                bail!("[model] has both path and registry; use path = \"dir\" for one model or registry = \"models\" + name = \"...\" for a watched registry")
            }
            (None, Some(_), None) => bail!("[model] registry needs name = \"<model name>\""),
            (_, None, Some(_)) => bail!("[model] name is only used with registry = \"dir\""),
            (None, None, _) => {
                bail!(
                    "[model] needs path = \"model-dir\" or registry = \"models\" + name = \"...\""
                )
            }
        }
        if let (Some(root), Some(name)) = (&self.registry, &self.name) {
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                bail!("[model] name = {name:?} must be one directory name under the registry (no `/`, not starting with `.`)");
            }
            if is_object_store_url(root) {
                let url = root.to_string_lossy();
                if let Err(e) = parse_s3_url(&url) {
                    bail!("[model] registry: {e}");
                }
            }
        }
        if let Some(psi) = self.drift_alert.filter(|t| !(t.is_finite() && *t > 0.0)) {
            bail!("[model] drift_alert = {psi} must be a positive PSI, e.g. 0.2 (above 0.25 is usually read as a major shift)");
        }
        if let Some(rate) = self
            .error_rate_alert
            .filter(|r| !(r.is_finite() && *r > 0.0 && *r < 1.0))
        {
            bail!("[model] error_rate_alert = {rate} must be a share of rows between 0 and 1, e.g. 0.05");
        }
        if self.drift_window <= 0 {
            bail!("[model] drift_window must be positive, e.g. \"5m\"");
        }
        if self.poll <= 0 {
            bail!("[model] poll must be positive, e.g. \"2s\"");
        }
        if self.max_batch_rows == 0 {
            bail!("[model] max_batch_rows must be at least 1");
        }
        if self.max_batch_delay < 0 {
            bail!("[model] max_batch_delay must not be negative");
        }
        if self.max_in_flight == 0 {
            bail!("[model] max_in_flight must be at least 1");
        }
        match (&self.shadow, &self.canary, self.canary_share) {
            (Some(_), Some(_), _) => {
                bail!("[model] has both shadow and canary; run one second version at a time")
            }
            (_, Some(_), Some(share)) => {
                if let Err(problem) = weir_score::control::check_share(share) {
                    bail!("[model] canary_share {share} {problem} (a fraction, e.g. 0.05)");
                }
            }
            (_, Some(_), None) => {
                bail!("[model] canary needs canary_share in (0, 1], e.g. 0.05")
            }
            (_, None, Some(_)) => bail!("[model] canary_share is only used with canary = \"dir\""),
            _ => {}
        }
        Ok(())
    }

    /// Checks the section and plans the score stage, pinned cores included, once;
    /// `placement` (the job's processes and workers) and `score_parallelism` are for the CPU
    /// budget of pinned inference threads (checked per process against this machine's cores).
    pub fn plan(
        &self,
        base_dir: &Path,
        placement: Placement,
        score_parallelism: usize,
    ) -> Result<ScorePlan> {
        self.check_fields()?;
        self.score_settings(base_dir, placement, score_parallelism)
    }

    fn pinned_cores(
        &self,
        placement: Placement,
        parallelism: usize,
    ) -> Result<Option<Vec<InstanceCores>>> {
        Ok(plan_cores(
            &self.cores,
            placement,
            parallelism,
            self.intra_threads,
            cpu_set(),
        )?)
    }

    /// Where the primary model comes from, paths resolved against `base_dir` (an
    /// `s3://bucket/prefix` registry is used as given; nothing is contacted here).
    pub fn source(&self, base_dir: &Path) -> ModelSource {
        let poll = Duration::from_millis(u64::try_from(self.poll).unwrap_or(0).max(1));
        match (&self.registry, &self.name) {
            (Some(root), Some(name)) if is_object_store_url(root) => {
                ModelSource::ObjectStore(RemoteRegistry::new(&root.to_string_lossy(), name, poll))
            }
            (Some(root), Some(name)) => ModelSource::Registry {
                root: base_dir.join(root),
                name: name.clone(),
                poll,
            },
            _ => ModelSource::Dir(base_dir.join(self.path.clone().unwrap_or_default())),
        }
    }

    /// The model directory (path form) or the model's registry directory.
    pub fn dir(&self, base_dir: &Path) -> PathBuf {
        model_dir(&self.source(base_dir))
    }

    /// The directory of the primary version served at start, and the second version served
    /// beside it, paths resolved against `base_dir` (see [`crate::plan::score::initial_models`]).
    pub fn initial_models(
        &self,
        base_dir: &Path,
        loads: impl Fn(&Target) -> weir_score::Result<()>,
    ) -> Result<(PathBuf, Option<SecondaryModel>)> {
        initial_models(&self.source(base_dir), self.secondary(base_dir), loads)
    }

    /// The job file's shadow or canary version (a registry's `CONTROL` file can replace it
    /// while the job runs), paths resolved against `base_dir`.
    pub fn secondary(&self, base_dir: &Path) -> Option<SecondaryModel> {
        match (&self.shadow, &self.canary) {
            (Some(dir), _) => Some(SecondaryModel {
                role: SecondaryRole::Shadow,
                dir: base_dir.join(dir),
            }),
            (None, Some(dir)) => Some(SecondaryModel {
                role: SecondaryRole::Canary {
                    share: self.canary_share.unwrap_or(0.0),
                },
                dir: base_dir.join(dir),
            }),
            (None, None) => None,
        }
    }

    /// Everything model-related the score operator needs (arguments as for
    /// [`ModelSection::plan`]; the section's own rules are not checked).
    pub fn score_settings(
        &self,
        base_dir: &Path,
        placement: Placement,
        score_parallelism: usize,
    ) -> Result<ScorePlan> {
        Ok(ScorePlan {
            model: ModelSettings {
                source: self.source(base_dir),
                secondary: self.secondary(base_dir),
                session: SessionOptions {
                    intra_threads: self.intra_threads,
                    warmup_batches: self.warmup_batches,
                    max_batch_rows: self.max_batch_rows,
                    intra_thread_affinities: None,
                },
            },
            batching: BatchLimits {
                max_batch_delay: Duration::from_millis(
                    u64::try_from(self.max_batch_delay).unwrap_or(0),
                ),
                max_in_flight: self.max_in_flight,
            },
            cores: self.pinned_cores(placement, score_parallelism)?,
            inference_cores: self.cores.clone(),
            alerts: AlertSettings {
                drift_alert: self.drift_alert,
                error_rate_alert: self.error_rate_alert,
                window: Duration::from_millis(self.drift_window.unsigned_abs()),
                min_rows: self.drift_min_rows,
            },
        })
    }
}
