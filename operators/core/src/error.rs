//! Errors of building the dataflow's operators (the one error type of `weir-operators`):
//! restoring state from a checkpoint that cannot be read or does not fit the job, or starting
//! a window instance's snapshot writer thread.

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
    /// The snapshot writer thread of a window instance could not be started.
    #[error("cannot start a window instance's snapshot writer thread: {0}")]
    WriterThread(std::io::Error),
}

/// Result of operator construction.
pub type Result<T, E = OperatorError> = std::result::Result<T, E>;
