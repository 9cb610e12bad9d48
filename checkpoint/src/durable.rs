//! Crash-safe file operations for the local store: write a temp file in the target directory,
//! fsync it, rename it over the final name, fsync the directory.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{CheckpointError, Result};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Atomically and durably replaces `dir/name` with `bytes`.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let target = dir.join(name);
    let result = (|| {
        let mut file = File::create(&tmp).map_err(|e| CheckpointError::io("create", &tmp, e))?;
        file.write_all(bytes)
            .map_err(|e| CheckpointError::io("write", &tmp, e))?;
        file.sync_all()
            .map_err(|e| CheckpointError::io("fsync", &tmp, e))?;
        drop(file);
        fs::rename(&tmp, &target).map_err(|e| CheckpointError::io("rename into", &target, e))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `dir` (and missing parents) and makes the new entries durable.
pub(crate) fn create_dir_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(CheckpointError::io("create directory", dir, e)),
    }
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Fsyncs a directory so renames and new entries in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| CheckpointError::io("fsync directory", dir, e))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Reads a whole file; `Ok(None)` when it does not exist.
pub(crate) fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CheckpointError::io("read", path, e)),
    }
}
