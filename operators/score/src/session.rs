//! A validated, warmed ONNX Runtime session for one model version.
//!
//! Fourth step of the scoring stage, between the feature windows and the score sink:
//! [`ModelSession::load`] reads `manifest.json`, checks it against the job's feature list
//! and against `model.onnx`, builds the ONNX Runtime session once and warms it up;
//! [`ModelSession::score_batch`] then turns one micro-batch of feature rows into one
//! `f32` score per row, and names the rows whose output is not a finite number. The Timely operator owns one `ModelSession` per model version
//! and never shares it between workers.

use std::path::{Path, PathBuf};

use ort::session::{HasSelectedOutputs, OutputSelector, RunOptions, Session};
use ort::value::{TensorElementType, TensorRef, ValueType};
use weir_features::scored::RowErrors;

use crate::error::{Result, ScoreError};
use crate::manifest::{FeatureSpec, ModelManifest, MANIFEST_FILE};
use crate::preprocess::Preprocessor;
use crate::runtime::onnx_environment;

/// File name of the model inside a model directory.
pub const MODEL_FILE: &str = "model.onnx";

/// How to build and warm a [`ModelSession`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// ONNX Runtime intra-op threads for this session; 0 lets ONNX Runtime pick (one per
    /// core). Threads block instead of spinning, to leave the cores to Timely workers.
    pub intra_threads: usize,
    /// Synthetic batches (every feature at its default) run before `load` returns.
    pub warmup_batches: usize,
    /// Rows in a warm-up batch; also the input buffer's initial capacity. Larger batches
    /// are accepted and grow the buffer once.
    pub max_batch_rows: usize,
    /// ONNX Runtime's `session.intra_op_thread_affinities` (1-based core ids, one per extra
    /// intra-op thread, `;`-separated), set when the scoring stage pins its threads.
    pub intra_thread_affinities: Option<String>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            intra_threads: 1,
            warmup_batches: 2,
            max_batch_rows: 256,
            intra_thread_affinities: None,
        }
    }
}

/// What one [`ModelSession::score_batch`] call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchStats {
    /// Rows run through the model.
    pub rows: usize,
    /// Missing (NaN) feature values replaced by the manifest's defaults.
    pub defaults_used: usize,
    /// Rows whose output has a value that is not a finite number (NaN, ±inf) in any column,
    /// not only the scored one, with what it was: these rows have no score.
    pub non_finite: RowErrors,
}

/// One loaded model version, ready to score batches.
pub struct ModelSession {
    manifest: ModelManifest,
    model_path: PathBuf,
    session: Session,
    run_options: RunOptions<HasSelectedOutputs>,
    preprocessor: Preprocessor,
    input: Vec<f32>,
    defaults_used_total: u64,
}

impl std::fmt::Debug for ModelSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSession")
            .field("name", &self.manifest.name)
            .field("version", &self.manifest.version)
            .field("model_path", &self.model_path)
            .finish_non_exhaustive()
    }
}

impl ModelSession {
    /// Loads `<model_dir>/manifest.json` and `<model_dir>/model.onnx`, validates them
    /// against each other and against `job_features` (the names the job computes, in the
    /// order it will pass values), then warms the session up.
    ///
    /// Initialises ONNX Runtime with [`crate::init_onnx_runtime`]'s default search if the
    /// job has not done so already.
    pub fn load(model_dir: &Path, job_features: &[String], opts: &SessionOptions) -> Result<Self> {
        let manifest = ModelManifest::load(model_dir)?;
        manifest.check_job_features(&model_dir.join(MANIFEST_FILE), job_features)?;
        let model_path = model_dir.join(MODEL_FILE);
        if !model_path.is_file() {
            return Err(ScoreError::ModelMissing { path: model_path });
        }
        let env = onnx_environment()?;
        let ort_err = |source: ort::Error| ScoreError::Inference {
            context: format!("loading {}", model_path.display()),
            source,
        };
        let session = Session::builder(&env)
            .and_then(|b| Ok(b.with_intra_threads(opts.intra_threads)?))
            .and_then(|b| Ok(b.with_inter_threads(1)?))
            .and_then(|b| Ok(b.with_intra_op_spinning(false)?))
            .and_then(|b| match &opts.intra_thread_affinities {
                Some(cores) => {
                    Ok(b.with_config_entry("session.intra_op_thread_affinities", cores)?)
                }
                None => Ok(b),
            })
            .and_then(|mut b| b.commit_from_file(&model_path))
            .map_err(ort_err)?;
        check_model(&manifest, &session).map_err(|problem| ScoreError::ModelMismatch {
            model: model_path.clone(),
            problem,
        })?;
        let run_options = RunOptions::new()
            .map_err(ort_err)?
            .with_outputs(OutputSelector::no_default().with(manifest.output.name.as_str()));
        let width = manifest.features.len();
        let mut this = ModelSession {
            preprocessor: Preprocessor::new(&manifest.features),
            input: Vec::with_capacity(opts.max_batch_rows.saturating_mul(width)),
            manifest,
            model_path,
            session,
            run_options,
            defaults_used_total: 0,
        };
        this.warm_up(opts)?;
        Ok(this)
    }

    fn warm_up(&mut self, opts: &SessionOptions) -> Result<()> {
        let rows = opts.max_batch_rows.max(1);
        let values = vec![f64::NAN; rows * self.preprocessor.width()];
        let mut out = Vec::with_capacity(rows);
        for _ in 0..opts.warmup_batches {
            self.score_batch(&values, rows, &mut out)?;
        }
        self.defaults_used_total = 0;
        Ok(())
    }

    /// Scores `n_rows` rows and replaces the contents of `out` with one score per row.
    ///
    /// `values` is row-major: row `r`, feature `c` (in [`Self::features`] order) is
    /// `values[r * features().len() + c]`; NaN means "missing" and is replaced by the
    /// feature's default before preprocessing. The input buffer is reused across calls,
    /// so no Weir-side allocation happens once a batch this large has been seen.
    ///
    /// A row whose output (any of its columns) is NaN or ±inf is named in
    /// [`BatchStats::non_finite`] with the value; its slot in `out` holds whatever the model
    /// gave. Errors (wrong `values` length, ONNX Runtime failure, unexpected output shape) are
    /// returned for the caller to turn into error records; `out` is then empty.
    pub fn score_batch(
        &mut self,
        values: &[f64],
        n_rows: usize,
        out: &mut Vec<f32>,
    ) -> Result<BatchStats> {
        out.clear();
        let width = self.preprocessor.width();
        if n_rows.checked_mul(width) != Some(values.len()) {
            return Err(ScoreError::Batch(format!(
                "{} values for {n_rows} rows of {width} features; expected rows x features = {}",
                values.len(),
                n_rows.saturating_mul(width)
            )));
        }
        if n_rows == 0 {
            return Ok(BatchStats::default());
        }
        let defaults_used = self.preprocessor.fill(values, &mut self.input);
        let (name, version) = (&self.manifest.name, &self.manifest.version);
        let ort_err = |source: ort::Error| ScoreError::Inference {
            context: match n_rows {
                1 => format!("scoring 1 row with model `{name}` version `{version}`"),
                n => format!("scoring {n} rows with model `{name}` version `{version}`"),
            },
            source,
        };
        let tensor = TensorRef::from_array_view(([n_rows, width], self.input.as_slice()))
            .map_err(ort_err)?;
        let outputs = self
            .session
            .run_with_options(ort::inputs![tensor], &self.run_options)
            .map_err(ort_err)?;
        let output = &self.manifest.output;
        let value = outputs.get(&output.name).ok_or_else(|| {
            ScoreError::Output(format!("the run returned no output `{}`", output.name))
        })?;
        let (shape, data) = value.try_extract_tensor::<f32>().map_err(ort_err)?;
        let stride = match **shape {
            [n] if n == n_rows as i64 && output.column == 0 => 1,
            [n, c] if n == n_rows as i64 && c > output.column as i64 => c as usize,
            _ => {
                return Err(ScoreError::Output(format!(
                    "output `{}` has shape {shape} for {n_rows} rows; expected [{n_rows}] or \
                     [{n_rows}, C] with C > output.column ({})",
                    output.name, output.column
                )))
            }
        };
        out.extend(data.iter().skip(output.column).step_by(stride).take(n_rows));
        let mut non_finite = RowErrors::default();
        for (row, values) in data.chunks_exact(stride).take(n_rows).enumerate() {
            if let Some((column, value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                let at = match stride {
                    1 => String::new(),
                    columns => format!(" at column {column} of {columns}"),
                };
                non_finite.insert(
                    row,
                    format!(
                        "model output `{}` is {value}{at}; a score must be a finite number",
                        output.name
                    ),
                );
            }
        }
        self.defaults_used_total += defaults_used as u64;
        Ok(BatchStats {
            rows: n_rows,
            defaults_used,
            non_finite,
        })
    }

    /// Model name from the manifest.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// Model version from the manifest.
    pub fn version(&self) -> &str {
        &self.manifest.version
    }

    /// Features in input order; `score_batch` expects values in this order.
    pub fn features(&self) -> &[FeatureSpec] {
        &self.manifest.features
    }

    /// The whole manifest (baseline histogram, training info, ...).
    pub fn manifest(&self) -> &ModelManifest {
        &self.manifest
    }

    /// Path of the loaded `model.onnx`.
    pub fn model_path(&self) -> &Path {
        &self.model_path
    }

    /// Missing values replaced by defaults since `load` returned (warm-up not counted).
    pub fn defaults_used_total(&self) -> u64 {
        self.defaults_used_total
    }
}

/// Checks `model.onnx`'s declared input and output against the manifest.
fn check_model(manifest: &ModelManifest, session: &Session) -> std::result::Result<(), String> {
    let names = |outlets: &[ort::value::Outlet]| {
        let names: Vec<_> = outlets.iter().map(|o| format!("`{}`", o.name())).collect();
        names.join(", ")
    };
    let width = manifest.features.len() as i64;
    let [input] = session.inputs() else {
        return Err(format!(
            "the model has {} inputs ({}); Weir feeds exactly one [rows, {width}] float32 tensor",
            session.inputs().len(),
            names(session.inputs())
        ));
    };
    let want = &manifest.input.name;
    if input.name() != want {
        return Err(format!(
            "manifest.json names input `{want}` but the model's input is `{}`; \
             fix input.name in manifest.json or re-export the model",
            input.name()
        ));
    }
    let shape = float_tensor_shape(input.dtype(), "input", want)?;
    match *shape {
        [batch, _] if batch >= 0 => {
            return Err(format!(
                "input `{want}` has a fixed batch size {batch}; re-export the model with a \
                 dynamic first axis (e.g. skl2onnx initial_types [None, {width}])"
            ))
        }
        [_, cols] if cols >= 0 && cols != width => {
            return Err(format!(
                "input `{want}` has {cols} columns but manifest.json lists {width} features"
            ))
        }
        [_, cols] => {
            if cols < 0 {
                tracing::warn!(input = %want, "model input width is dynamic; warm-up will check it");
            }
        }
        _ => {
            return Err(format!(
                "input `{want}` has shape {shape:?}; expected [rows, {width}] (rank 2)"
            ))
        }
    }
    let out_name = &manifest.output.name;
    let Some(output) = session.outputs().iter().find(|o| o.name() == out_name) else {
        return Err(format!(
            "manifest.json names output `{out_name}` but the model's outputs are {}",
            names(session.outputs())
        ));
    };
    let shape = float_tensor_shape(output.dtype(), "output", out_name)?;
    let column = manifest.output.column;
    match *shape {
        [_] if column == 0 => Ok(()),
        [_] => Err(format!(
            "output `{out_name}` is one score per row ([rows]) but output.column is {column}; \
             set it to 0"
        )),
        [_, c] if c < 0 || (column as i64) < c => Ok(()),
        [_, c] => Err(format!(
            "output.column is {column} but output `{out_name}` has only {c} columns \
             (valid: 0..={})",
            c - 1
        )),
        _ => Err(format!(
            "output `{out_name}` has shape {shape:?}; expected [rows] or [rows, columns]"
        )),
    }
}

fn float_tensor_shape<'a>(
    dtype: &'a ValueType,
    role: &str,
    name: &str,
) -> std::result::Result<&'a [i64], String> {
    match dtype {
        ValueType::Tensor {
            ty: TensorElementType::Float32,
            shape,
            ..
        } => Ok(shape),
        ValueType::Tensor { ty, .. } => Err(format!(
            "{role} `{name}` has element type {} but manifest.json says float32; \
             re-export the model with a float32 {role}",
            onnx_type_name(*ty)
        )),
        other => Err(format!(
            "{role} `{name}` is a {other:?}, not a tensor (for skl2onnx classifiers pass \
             options={{'zipmap': False}})"
        )),
    }
}

/// ONNX's spelling of common element types (ort's `Display` says `f64`, `i64`, ...).
fn onnx_type_name(ty: TensorElementType) -> String {
    match ty {
        TensorElementType::Float64 => "float64".into(),
        TensorElementType::Float16 => "float16".into(),
        TensorElementType::Int64 => "int64".into(),
        TensorElementType::Int32 => "int32".into(),
        TensorElementType::String => "string".into(),
        other => other.to_string(),
    }
}
