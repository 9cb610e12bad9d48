//! Errors of building the dataflow's operators (the one error type of `weir-operators`):
//! restoring state from a checkpoint that cannot be read or does not fit the job, starting a
//! window instance's snapshot writer thread, opening the file source's inputs, or a stage
//! parallelism the workers cannot hold.

use std::path::PathBuf;

/// What can go wrong while building an operator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// The checkpoint store failed (missing, corrupt or unreadable file).
    #[error(transparent)]
    Checkpoint(#[from] weir_checkpoint::CheckpointError),
    /// A snapshot was read but does not fit this job.
    #[error("cannot restore {}: {detail}; restore a checkpoint written by this job's features (or start without --restore)", path.display())]
    Restore {
        /// The snapshot file.
        path: PathBuf,
        /// Why it does not fit.
        detail: String,
    },
    /// The snapshot writer thread of a stateful operator instance could not be started.
    #[error("cannot start a window instance's snapshot writer thread: {0}")]
    WriterThread(std::io::Error),
    /// An output file of a JSON Lines sink cannot be created.
    #[error("cannot create {}: {source}", path.display())]
    OutputFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An input file of the file source cannot be opened or read.
    #[error("cannot open input file {}: {source}", path.display())]
    InputFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An input file the file source does not read (a directory, a compression it does not
    /// decode, a name that contradicts its bytes).
    #[error("cannot read input file {}: {reason}", path.display())]
    UnreadableInput {
        /// The file.
        path: PathBuf,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A checkpoint's position in an input file does not fit the file as it is now (the file
    /// was replaced or truncated, or `[source] range_bytes` changed).
    #[error("cannot resume input file {} from the checkpoint: {reason}", path.display())]
    InputResume {
        /// The file (or the input files).
        path: PathBuf,
        /// What does not fit.
        reason: String,
    },
    /// A stage's parallelism is 0 or more than the job's workers.
    #[error("parallelism {stage}={parallelism} is invalid: it must be between 1 and the number of workers ({workers})")]
    Parallelism {
        /// The stage (`source`, `window`, `score`, `sink`).
        stage: &'static str,
        /// Its parallelism.
        parallelism: usize,
        /// Workers of the job.
        workers: usize,
    },
}

/// Result of operator construction.
pub type Result<T, E = OperatorError> = std::result::Result<T, E>;
