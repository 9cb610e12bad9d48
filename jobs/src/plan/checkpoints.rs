//! The checkpoints a job asked for (`[checkpoint]`, `--checkpoint-dir`,
//! `--checkpoint-interval`), checked; `crate::checkpointing::prepare` opens the store and
//! picks the checkpoint to restore from them.

use std::path::PathBuf;
use std::time::Duration;

/// `[checkpoint]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// Checkpoint location: a directory resolved against the job file, or
    /// `s3://bucket/prefix` as given (`weir_checkpoint::open_store` opens either).
    pub dir: PathBuf,
    /// Processing time between checkpoint epochs (positive).
    pub interval: Duration,
    /// Committed checkpoints to keep (at least 1).
    pub retain: usize,
}
