//! `LocalDirStore`: the snapshot store on a directory (local disk, or a shared mount that
//! every process of a multi-host job sees at the same path).

use std::fs;
use std::path::{Path, PathBuf};

use weir_features::vocab::Epoch;

use crate::durable::{create_dir_durable, read_if_exists, sync_dir, write_atomic};
use crate::error::{CheckpointError, Result};
use crate::format::{self, Snapshot};
use crate::manifest::{self, Manifest};
use crate::range::{check_operator_name, KeyGroupRange, SnapshotEntry};
use crate::store::{encoded_snapshot, SnapshotStore, StoredFile, MANIFEST_FILE};

/// A [`SnapshotStore`] on a directory: `<root>/<epoch>/<operator>/kg-<lo>-<hi>` and
/// `<root>/<epoch>/MANIFEST`. Safe to share between threads and processes as long as each
/// (epoch, operator, range) has one writer and each epoch one committer.
#[derive(Clone, Debug)]
pub struct LocalDirStore {
    root: PathBuf,
}

impl LocalDirStore {
    /// Opens (creating if needed) the store rooted at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        create_dir_durable(&root)?;
        Ok(LocalDirStore { root })
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory of `epoch`.
    pub fn epoch_dir(&self, epoch: Epoch) -> PathBuf {
        self.root.join(epoch.0.to_string())
    }

    /// Path of the MANIFEST of `epoch`.
    pub fn manifest_path(&self, epoch: Epoch) -> PathBuf {
        self.epoch_dir(epoch).join(MANIFEST_FILE)
    }
}

impl SnapshotStore for LocalDirStore {
    fn write_snapshot(
        &self,
        epoch: Epoch,
        operator: &str,
        range: KeyGroupRange,
        payload: &[u8],
    ) -> Result<SnapshotEntry> {
        let (bytes, entry) = encoded_snapshot(epoch, operator, range, payload)?;
        let dir = self.epoch_dir(epoch).join(operator);
        create_dir_durable(&dir)?;
        write_atomic(&dir, &range.file_name(), &bytes)?;
        Ok(entry)
    }

    fn read_snapshot(
        &self,
        epoch: Epoch,
        operator: &str,
        range: KeyGroupRange,
    ) -> Result<Snapshot> {
        check_operator_name(operator)?;
        let path = self.snapshot_location(epoch, operator, range);
        let bytes = read_if_exists(&path)?.ok_or_else(|| CheckpointError::SnapshotMissing {
            epoch,
            path: path.clone(),
        })?;
        format::decode(&path, &bytes)
    }

    fn commit_manifest(&self, manifest: &Manifest) -> Result<()> {
        manifest.validate()?;
        let epoch = manifest.epoch;
        manifest.check_files_stored(|stored, entry| {
            let path = self.snapshot_location(stored, &entry.operator, entry.file_range());
            match fs::metadata(&path) {
                Ok(meta) => Ok((path, Some(meta.len()))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((path, None)),
                Err(e) => Err(CheckpointError::io("stat", path, e)),
            }
        })?;
        let dir = self.epoch_dir(epoch);
        create_dir_durable(&dir)?;
        write_atomic(&dir, MANIFEST_FILE, &manifest.encode()?)
    }

    fn read_manifest(&self, epoch: Epoch) -> Result<Manifest> {
        let path = self.manifest_path(epoch);
        let Some(bytes) = read_if_exists(&path)? else {
            if !self.epoch_dir(epoch).is_dir() {
                return Err(CheckpointError::NoSuchEpoch {
                    epoch,
                    path: self.root.clone(),
                });
            }
            return Err(CheckpointError::NotCommitted { epoch, path });
        };
        manifest::decode_for_epoch(&path, &bytes, epoch, "in the directory")
    }

    fn list_epochs(&self) -> Result<Vec<Epoch>> {
        let entries =
            fs::read_dir(&self.root).map_err(|e| CheckpointError::io("list", &self.root, e))?;
        let mut epochs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| CheckpointError::io("list", &self.root, e))?;
            let name = entry.file_name();
            let Some(epoch) = name.to_str().and_then(parse_epoch_dir) else {
                continue;
            };
            if entry.path().is_dir() {
                epochs.push(Epoch(epoch));
            }
        }
        epochs.sort();
        Ok(epochs)
    }

    fn stored_files(&self, epoch: Epoch) -> Result<Vec<StoredFile>> {
        let dir = self.epoch_dir(epoch);
        let mut files = Vec::new();
        collect_files(&dir, "", &mut files)?;
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    fn delete_epoch(&self, epoch: Epoch) -> Result<()> {
        let dir = self.epoch_dir(epoch);
        let manifest = self.manifest_path(epoch);
        match fs::remove_file(&manifest) {
            Ok(()) => sync_dir(&dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CheckpointError::io("delete", manifest, e)),
        }
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CheckpointError::io("delete", dir, e)),
        }
        sync_dir(&self.root)
    }

    fn delete_file(&self, epoch: Epoch, name: &str) -> Result<()> {
        let path = self.epoch_dir(epoch).join(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(CheckpointError::io("delete", path, e)),
        }
        match path.parent() {
            Some(dir) => sync_dir(dir),
            None => Ok(()),
        }
    }

    fn snapshot_location(&self, epoch: Epoch, operator: &str, range: KeyGroupRange) -> PathBuf {
        self.epoch_dir(epoch).join(operator).join(range.file_name())
    }
}

/// An epoch directory name: decimal digits only.
fn parse_epoch_dir(name: &str) -> Option<u64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

fn collect_files(dir: &Path, prefix: &str, out: &mut Vec<StoredFile>) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| CheckpointError::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| CheckpointError::io("list", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let meta = entry
            .metadata()
            .map_err(|e| CheckpointError::io("stat", &path, e))?;
        let relative = format!("{prefix}{name}");
        if meta.is_dir() {
            collect_files(&path, &format!("{relative}/"), out)?;
        } else {
            out.push(StoredFile {
                name: relative,
                size: meta.len(),
            });
        }
    }
    Ok(())
}
