//! `manifest.json`: what a model expects, read before the model itself.
//!
//! Second step of the scoring stage: a model directory holds `model.onnx` and
//! `manifest.json`. The manifest names the model and version, the input and output
//! tensors, the features in input order with their defaults and preprocessing, and the
//! baseline score histogram used for drift monitoring. [`ModelManifest::load`] parses it
//! strictly (unknown fields are errors) and checks it is self-consistent; checking it
//! against `model.onnx` and the job is [`crate::ModelSession::load`]'s job.
//! The format is documented field by field in `docs/MODEL_MANIFEST.md`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, ScoreError};

/// File name of the manifest inside a model directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The `format_version` values this build reads.
pub const SUPPORTED_FORMAT_VERSIONS: &[u32] = &[1];

/// The parsed `manifest.json` of a model directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelManifest {
    /// Version of the manifest format; see [`SUPPORTED_FORMAT_VERSIONS`].
    pub format_version: u32,
    /// Model name, carried on every score record.
    pub name: String,
    /// Model version, carried on every score record.
    pub version: String,
    /// The model's single input tensor, shaped `[rows, features.len()]`.
    pub input: TensorSpec,
    /// The model output that holds the score.
    pub output: OutputSpec,
    /// The features, in the order of the input tensor's columns.
    pub features: Vec<FeatureSpec>,
    /// Score histogram on held-out data, the reference for drift monitoring.
    pub baseline: Baseline,
    /// How the model was trained (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained: Option<TrainingInfo>,
}

/// Element type of a tensor or feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ElementType {
    /// 32-bit IEEE float.
    Float32,
}

/// A named model input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    /// Tensor name in the ONNX graph.
    pub name: String,
    /// Element type.
    #[serde(rename = "type")]
    pub ty: ElementType,
}

/// The model output that carries the score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// Tensor name in the ONNX graph.
    pub name: String,
    /// Element type.
    #[serde(rename = "type")]
    pub ty: ElementType,
    /// Column of a `[rows, C]` output that is the score (e.g. 1 = probability of class 1);
    /// must be 0 for a `[rows]` output.
    #[serde(default)]
    pub column: usize,
}

/// One input feature (one column of the input tensor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSpec {
    /// Feature name; must equal the name the job computes.
    pub name: String,
    /// Element type fed to the model.
    #[serde(rename = "type")]
    pub ty: ElementType,
    /// Raw value used when the job's value is missing (NaN); preprocessing still applies.
    pub default: f64,
    /// Optional categorical encoding: the value's index in a list of known codes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<Categories>,
    /// Optional clipping to `[min, max]` (either bound may be absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip: Option<Clip>,
    /// Optional standardisation `(x - mean) / std`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<Scale>,
}

/// Categorical (ordinal) encoding: the model sees the index of the value in `values`, or
/// `unknown` for a value not in the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Categories {
    /// Known codes, finite and distinct; code `values[i]` becomes `i`.
    pub values: Vec<f64>,
    /// What any other value becomes (e.g. `-1`, or `values.len()` for an "other" bucket).
    pub unknown: f64,
}

/// Clipping bounds in the feature's units at this step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clip {
    /// Values below become `min`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Values above become `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// Standardisation parameters: the model sees `(x - mean) / std`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    /// Subtracted first.
    pub mean: f64,
    /// Divided by second; must be finite and > 0.
    pub std: f64,
}

/// Histogram of scores on held-out data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// Strictly increasing bin edges; bin `i` is `[edges[i], edges[i+1])`.
    pub bin_edges: Vec<f64>,
    /// Rows per bin; one fewer than `bin_edges`.
    pub counts: Vec<u64>,
}

/// Provenance of the model (informational, not used for scoring).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingInfo {
    /// Training rows.
    pub rows: u64,
    /// Random seed of the training run.
    pub seed: u64,
    /// Largest |ONNX score - training-framework score| on held-out rows.
    pub heldout_max_abs_diff: f64,
}

/// Only `format_version`, read leniently so a newer manifest gets a version message
/// rather than an "unknown field" one.
#[derive(Deserialize)]
struct VersionProbe {
    format_version: u32,
}

impl ModelManifest {
    /// Reads and validates `<model_dir>/manifest.json`.
    pub fn load(model_dir: &Path) -> Result<Self> {
        let path = model_dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| ScoreError::ManifestRead {
            path: path.clone(),
            source,
        })?;
        Self::parse(&text, &path)
    }

    /// Parses and validates manifest JSON; `path` is only used in error messages.
    pub fn parse(json: &str, path: &Path) -> Result<Self> {
        let parse_err = |source| ScoreError::ManifestParse {
            path: path.to_path_buf(),
            source,
        };
        let probe: VersionProbe = serde_json::from_str(json).map_err(parse_err)?;
        if !SUPPORTED_FORMAT_VERSIONS.contains(&probe.format_version) {
            return Err(invalid(
                path,
                format!(
                    "format_version {} is not supported by this build of Weir (it reads {:?}); \
                     upgrade Weir or re-export the model with a supported format",
                    probe.format_version, SUPPORTED_FORMAT_VERSIONS
                ),
            ));
        }
        let manifest: Self = serde_json::from_str(json).map_err(parse_err)?;
        manifest.validate(path)?;
        Ok(manifest)
    }

    /// Checks the manifest on its own; the error names the first problem found, in `path`
    /// (only used in the message).
    pub fn validate(&self, path: &Path) -> Result<()> {
        self.first_problem()
            .map_err(|problem| invalid(path, problem))
    }

    /// The first problem of the manifest on its own, as [`Self::validate`] reports it.
    fn first_problem(&self) -> std::result::Result<(), String> {
        for (field, value) in [
            ("name", &self.name),
            ("version", &self.version),
            ("input.name", &self.input.name),
            ("output.name", &self.output.name),
        ] {
            if value.trim().is_empty() {
                return Err(format!("`{field}` must not be empty"));
            }
        }
        if self.features.is_empty() {
            return Err("`features` is empty; list the model's input columns in order".into());
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, f) in self.features.iter().enumerate() {
            if f.name.trim().is_empty() {
                return Err(format!("features[{i}].name must not be empty"));
            }
            if let Some(first) = seen.insert(f.name.as_str(), i) {
                return Err(format!(
                    "feature `{}` is listed twice (features[{first}] and features[{i}]); \
                     feature names must be unique",
                    f.name
                ));
            }
            if !f.default.is_finite() {
                return Err(format!(
                    "feature `{}` has default {}; defaults must be finite numbers",
                    f.name, f.default
                ));
            }
            if let Some(c) = &f.categories {
                if c.values.is_empty() || !c.unknown.is_finite() {
                    return Err(format!(
                        "feature `{}` has categories with {} values and unknown {}; list at \
                         least one code and give a finite `unknown`",
                        f.name,
                        c.values.len(),
                        c.unknown
                    ));
                }
                for (i, v) in c.values.iter().enumerate() {
                    if !v.is_finite() || c.values[..i].contains(v) {
                        return Err(format!(
                            "feature `{}` categories.values[{i}] = {v} is not finite or is \
                             listed twice; codes must be distinct finite numbers",
                            f.name
                        ));
                    }
                }
            }
            if let Some(c) = f.clip {
                let finite = |b: Option<f64>| b.is_none_or(f64::is_finite);
                let ordered = match (c.min, c.max) {
                    (Some(lo), Some(hi)) => lo <= hi,
                    _ => true,
                };
                if !finite(c.min) || !finite(c.max) || !ordered || (c.min, c.max) == (None, None) {
                    return Err(format!(
                        "feature `{}` has clip {{min: {:?}, max: {:?}}}; give at least one \
                         finite bound, with min <= max",
                        f.name, c.min, c.max
                    ));
                }
            }
            if let Some(s) = f.scale {
                if !s.mean.is_finite() || !s.std.is_finite() || s.std <= 0.0 {
                    return Err(format!(
                        "feature `{}` has scale {{mean: {}, std: {}}}; mean must be finite \
                         and std finite and > 0",
                        f.name, s.mean, s.std
                    ));
                }
            }
        }
        self.baseline.validate()
    }

    /// Checks that the job computes exactly the manifest's features, in input order.
    ///
    /// The error ([`ScoreError::FeatureMismatch`], naming `manifest`, the path this manifest
    /// was read from) lists every problem found, separated by "; ", each naming the feature.
    pub fn check_job_features(&self, manifest: &Path, job: &[String]) -> Result<()> {
        self.job_feature_problems(job)
            .map_err(|problem| ScoreError::FeatureMismatch {
                manifest: manifest.to_path_buf(),
                problem,
            })
    }

    /// Every problem of [`Self::check_job_features`], separated by "; ".
    fn job_feature_problems(&self, job: &[String]) -> std::result::Result<(), String> {
        let mut problems = Vec::new();
        let mut job_index: HashMap<&str, usize> = HashMap::new();
        for (j, name) in job.iter().enumerate() {
            if let Some(first) = job_index.insert(name.as_str(), j) {
                problems.push(format!(
                    "the job computes feature `{name}` twice (at index {first} and {j})"
                ));
            }
        }
        let manifest_index: HashMap<&str, usize> = self
            .features
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.as_str(), i))
            .collect();
        for name in job {
            if !manifest_index.contains_key(name.as_str()) {
                problems.push(format!(
                    "job computes feature `{name}` that manifest.json does not list"
                ));
            }
        }
        for f in &self.features {
            if !job_index.contains_key(f.name.as_str()) {
                problems.push(format!(
                    "manifest.json lists feature `{}` that the job does not compute",
                    f.name
                ));
            }
        }
        // Positions only mean something once both sides hold the same names.
        if problems.is_empty() {
            for (i, f) in self.features.iter().enumerate() {
                match job_index.get(f.name.as_str()) {
                    Some(&j) if j != i => problems.push(format!(
                        "feature `{}` is at input index {i} in manifest.json but the job \
                         computes it at index {j}",
                        f.name
                    )),
                    _ => {}
                }
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        let expected: Vec<&str> = self.feature_names().collect();
        Err(format!(
            "{}; the job must compute exactly {expected:?}, in this order",
            problems.join("; ")
        ))
    }

    /// Feature names in input order.
    pub fn feature_names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.features.iter().map(|f| f.name.as_str())
    }
}

impl Baseline {
    fn validate(&self) -> std::result::Result<(), String> {
        let edges = &self.bin_edges;
        if edges.len() < 2 {
            return Err(format!(
                "baseline.bin_edges has {} value(s); it needs at least 2 (one bin)",
                edges.len()
            ));
        }
        if let Some(bad) = edges.iter().find(|e| !e.is_finite()) {
            return Err(format!(
                "baseline.bin_edges contains {bad}; edges must be finite"
            ));
        }
        if let Some(i) = edges.windows(2).position(|w| w[0] >= w[1]) {
            return Err(format!(
                "baseline.bin_edges must be strictly increasing, but edge {} ({}) >= edge {} ({})",
                i,
                edges[i],
                i + 1,
                edges[i + 1]
            ));
        }
        if self.counts.len() + 1 != edges.len() {
            return Err(format!(
                "baseline.counts has {} entries but baseline.bin_edges has {}; \
                 there must be exactly one count per bin (edges - 1)",
                self.counts.len(),
                edges.len()
            ));
        }
        Ok(())
    }
}

fn invalid(path: &Path, problem: String) -> ScoreError {
    ScoreError::ManifestInvalid {
        path: PathBuf::from(path),
        problem,
    }
}
