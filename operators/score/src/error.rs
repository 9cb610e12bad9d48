//! Errors of the scoring stage.
//!
//! Every failure between "a model directory on disk" and "one f32 score per row" is a
//! [`ScoreError`]. Startup errors (runtime not found, manifest invalid, model and job
//! disagree) stop the job with a message that says what to change; run-time errors
//! ([`ScoreError::Inference`], [`ScoreError::Output`], [`ScoreError::Batch`]) are returned
//! to the operator, which turns them into error records and never panics.

use std::path::PathBuf;

/// Everything that can go wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScoreError {
    /// No ONNX Runtime shared library was found in any of the places searched.
    #[error(
        "could not find the ONNX Runtime library ({lib}); looked in:\n{}\n\
         run `scripts/setup.sh` to download it into .cache/onnxruntime/, \
         or set WEIR_ORT_LIB to the path of {lib}",
        .searched.iter().map(|p| format!("  - {}", p.display())).collect::<Vec<_>>().join("\n")
    )]
    RuntimeNotFound {
        /// File name that was searched for.
        lib: &'static str,
        /// Every path that was tried, in search order.
        searched: Vec<PathBuf>,
    },

    /// A path given explicitly (argument or `WEIR_ORT_LIB`) does not exist.
    #[error(
        "the ONNX Runtime library given by {origin} does not exist: {}; \
         fix the path, or unset it and run `scripts/setup.sh`",
        .path.display()
    )]
    RuntimePathMissing {
        /// Where the path came from, e.g. "the WEIR_ORT_LIB environment variable".
        origin: &'static str,
        /// The path that was given.
        path: PathBuf,
    },

    /// The library was found but could not be loaded (wrong file, wrong version, wrong arch).
    #[error("failed to load the ONNX Runtime library {}: {source}", .path.display())]
    RuntimeLoad {
        /// The library file.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: ort::LoadDynamicError,
    },

    /// `manifest.json` could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    ManifestRead {
        /// The manifest file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// `manifest.json` is not valid JSON or does not have the expected fields.
    #[error("{} is not a valid model manifest: {source} (see docs/MODEL_MANIFEST.md)", .path.display())]
    ManifestParse {
        /// The manifest file.
        path: PathBuf,
        /// The parser's error (with line and column).
        #[source]
        source: serde_json::Error,
    },

    /// `manifest.json` parsed but its contents are inconsistent.
    #[error("{}: {problem} (see docs/MODEL_MANIFEST.md)", .path.display())]
    ManifestInvalid {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        problem: String,
    },

    /// The model directory has no `model.onnx`.
    #[error(
        "{} does not exist; a model directory must hold model.onnx and manifest.json",
        .path.display()
    )]
    ModelMissing {
        /// The expected `model.onnx` path.
        path: PathBuf,
    },

    /// `model.onnx` and `manifest.json` disagree (names, types, shapes).
    #[error("model {} does not match its manifest.json: {problem}", .model.display())]
    ModelMismatch {
        /// The `model.onnx` file.
        model: PathBuf,
        /// What differs and how to fix it.
        problem: String,
    },

    /// The job's feature list and `manifest.json` disagree.
    #[error("the job's features do not match {}: {problem}", .manifest.display())]
    FeatureMismatch {
        /// The manifest file.
        manifest: PathBuf,
        /// Every mismatch found, separated by "; ".
        problem: String,
    },

    /// An ONNX Runtime call failed; `context` says which one.
    #[error("ONNX Runtime failed while {context}: {source}")]
    Inference {
        /// What Weir was doing, e.g. "scoring a batch of 64 rows with model `m` 1.0".
        context: String,
        /// The runtime's error.
        #[source]
        source: ort::Error,
    },

    /// The caller passed a batch whose size does not match the model's features.
    #[error("invalid batch: {0}")]
    Batch(String),

    /// Inference panicked (a bug in a model runtime or in Weir); the batch's rows fail, the
    /// inference thread goes on.
    #[error("inference panicked: {0}")]
    Panicked(String),

    /// The model returned an output of an unexpected shape at run time.
    #[error("unexpected model output: {0}")]
    Output(String),

    /// Pinned inference threads do not fit the machine (DESIGN.md §4, one CPU budget).
    #[error("refusing to start: {problem}")]
    CpuBudget {
        /// What does not fit and what to change.
        problem: String,
    },

    /// The model registry directory cannot say which version to serve.
    #[error("model registry {}: {problem} (see docs/MODEL_MANIFEST.md, \"Registry\")", .dir.display())]
    Registry {
        /// The model's registry directory (or the version directory).
        dir: PathBuf,
        /// What is wrong and how to fix it.
        problem: String,
    },

    /// An inference thread could not start or stopped.
    #[error("inference thread: {0}")]
    Thread(String),
}

/// Result alias for the scoring crate.
pub type Result<T, E = ScoreError> = std::result::Result<T, E>;
