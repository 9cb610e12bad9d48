//! Restore of any key-grouped stateful operator (DESIGN.md §5): an instance reads every
//! snapshot of the checkpoint to restore that overlaps its (possibly different) key-group
//! range and hands each one's bytes to the operator, which keeps its own keys, so a rescale is
//! a restore. The window operator uses it; a join or a dedup would too, under its own
//! operator name.

use weir_checkpoint::range::overlapping;
use weir_checkpoint::KeyGroupRange;

use crate::epochs::OperatorCheckpoints;
use crate::error::{OperatorError, Result};

/// Reads the snapshots of `operator` that instance `instance` of `parallelism` (over
/// `key_groups`) must load from the checkpoint `checkpoints` restores, passing `load` each
/// file's key-group range and bytes. Returns false when there is nothing to restore. A file
/// that `load` refuses fails the restore, naming its path and key groups.
pub fn restore_key_groups<E: std::fmt::Display>(
    checkpoints: &OperatorCheckpoints,
    operator: &str,
    (instance, parallelism, key_groups): (usize, usize, u32),
    mut load: impl FnMut(KeyGroupRange, &[u8]) -> std::result::Result<(), E>,
) -> Result<bool> {
    let (Some(manifest), Some(store)) = (&checkpoints.restore, &checkpoints.store) else {
        return Ok(false);
    };
    let files = overlapping(&manifest.files, operator, instance, parallelism, key_groups);
    let mut unfit = None;
    store.for_each_snapshot(
        manifest.epoch,
        &mut files.iter().map(|(file, _)| *file),
        &mut |file, bytes| {
            if let Err(e) = load(file.range, bytes) {
                let stored = file.file_epoch(manifest.epoch);
                let path = store.snapshot_location(stored, &file.operator, file.file_range());
                unfit.get_or_insert(OperatorError::Restore {
                    path,
                    detail: format!("key groups {}: {e}", file.range),
                });
            }
            Ok(())
        },
    )?;
    match unfit {
        Some(error) => Err(error),
        None => Ok(true),
    }
}
