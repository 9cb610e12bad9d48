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
    /// A checkpoint resumes an input file past its end (the file was replaced or truncated).
    #[error("{} has only {lines} lines but the checkpoint resumes it at line {resume_at}", path.display())]
    ResumedPastEnd {
        /// The file.
        path: PathBuf,
        /// Lines it has.
        lines: i64,
        /// Line the checkpoint resumes at.
        resume_at: i64,
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
