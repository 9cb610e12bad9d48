//! The `SnapshotStore` trait: what the dataflow and the CLI need from a checkpoint store.
//! Backends implement a few storage primitives; verification, restore selection and retention
//! are written once here on top of them, so an object-store backend only has to provide
//! durable puts, gets, listings and deletes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use weir_features::vocab::Epoch;

use crate::bundle;
use crate::error::{CheckpointError, Result};
use crate::format;
use crate::format::Snapshot;
use crate::manifest::Manifest;
use crate::range::{check_operator_name, KeyGroupRange, SnapshotEntry};

/// Name of the commit file of an epoch.
pub const MANIFEST_FILE: &str = "MANIFEST";

/// A file found in an epoch, committed or not (for listings of uncommitted epochs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredFile {
    /// Path relative to the epoch (`<operator>/kg-<lo>-<hi>` or `MANIFEST`).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
}

/// What [`SnapshotStore::prune`] deleted and kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Committed epochs kept, oldest first.
    pub kept: Vec<Epoch>,
    /// Epochs deleted (committed or not), oldest first.
    pub deleted: Vec<Epoch>,
    /// Epochs no longer restorable (MANIFEST deleted) whose directories still hold files that
    /// kept epochs list (incremental checkpoints), oldest first.
    pub retired: Vec<Epoch>,
}

/// What a backend's [`SnapshotStore::write_snapshot`] stores and returns: the checked name and
/// range, `payload` framed ([`format::encode`]) and the manifest entry describing it.
pub(crate) fn encoded_snapshot(
    epoch: Epoch,
    operator: &str,
    range: KeyGroupRange,
    payload: &[u8],
) -> Result<(Vec<u8>, SnapshotEntry)> {
    check_operator_name(operator)?;
    KeyGroupRange::new(range.lo, range.hi)?;
    let (bytes, xxh3) = format::encode(payload);
    let entry = SnapshotEntry {
        operator: operator.to_owned(),
        range,
        size: bytes.len() as u64,
        xxh3,
        stored_in: Some(epoch),
        section: None,
    };
    Ok((bytes, entry))
}

/// A checkpoint store laid out as `<epoch>/<operator>/kg-<lo>-<hi>` plus `<epoch>/MANIFEST`.
pub trait SnapshotStore: Send + Sync {
    /// Durably stores `payload` as the snapshot of `range` of `operator` at `epoch`: when this
    /// returns, the file survives a crash. Returns the entry to list in the epoch's manifest.
    fn write_snapshot(
        &self,
        epoch: Epoch,
        operator: &str,
        range: KeyGroupRange,
        payload: &[u8],
    ) -> Result<SnapshotEntry>;

    /// Durably stores `sections` (each a key-group range and its bytes) as one bundle file
    /// `<operator>/kg-<lo>-<hi>` of `file` at `epoch` (one write, one fsync); returns one entry
    /// per section for the manifest. See [`crate::bundle`].
    fn write_bundle(
        &self,
        epoch: Epoch,
        operator: &str,
        file: KeyGroupRange,
        sections: &[(KeyGroupRange, &[u8])],
    ) -> Result<Vec<SnapshotEntry>> {
        bundle::write(epoch, operator, file, sections, |payload| {
            self.write_snapshot(epoch, operator, file, payload)
        })
    }

    /// Reads and verifies every snapshot of `entries`, listed by the manifest of `listed_by`
    /// (files of earlier epochs included), and hands each one's bytes to `each`; each file is
    /// read once.
    fn for_each_snapshot<'a>(
        &self,
        listed_by: Epoch,
        entries: &mut dyn Iterator<Item = &'a SnapshotEntry>,
        each: &mut dyn FnMut(&SnapshotEntry, &[u8]) -> Result<()>,
    ) -> Result<()> {
        bundle::for_each(
            listed_by,
            entries,
            |(epoch, operator, file)| self.read_snapshot(epoch, operator, file),
            |(epoch, operator, file)| self.snapshot_location(epoch, operator, file),
            each,
        )
    }

    /// Reads and verifies (magic, version, length, checksum) one snapshot file.
    fn read_snapshot(&self, epoch: Epoch, operator: &str, range: KeyGroupRange)
        -> Result<Snapshot>;

    /// Commits `manifest.epoch`: checks the manifest and that its files are present with their
    /// sizes, then durably and atomically publishes the MANIFEST. Call only after every
    /// [`write_snapshot`](Self::write_snapshot) of the epoch returned.
    fn commit_manifest(&self, manifest: &Manifest) -> Result<()>;

    /// Reads and verifies (checksum, version, epoch) the MANIFEST of `epoch`; does not look at
    /// the snapshot files. [`CheckpointError::NotCommitted`] when there is none.
    fn read_manifest(&self, epoch: Epoch) -> Result<Manifest>;

    /// Every epoch present in the store, committed or not, oldest first.
    fn list_epochs(&self) -> Result<Vec<Epoch>>;

    /// The files present under `epoch`, sorted by name.
    fn stored_files(&self, epoch: Epoch) -> Result<Vec<StoredFile>>;

    /// Deletes `epoch` (its MANIFEST first, so a crash midway leaves it uncommitted).
    fn delete_epoch(&self, epoch: Epoch) -> Result<()>;

    /// Deletes one file of `epoch` (a [`StoredFile::name`]); a missing file is not an error.
    fn delete_file(&self, epoch: Epoch, name: &str) -> Result<()>;

    /// Where a snapshot lives, for messages.
    fn snapshot_location(&self, epoch: Epoch, operator: &str, range: KeyGroupRange) -> PathBuf;

    /// Full verification of `epoch`: its manifest, and every listed file present with the
    /// listed size and checksum. Returns the manifest when the epoch can be restored.
    fn verify_epoch(&self, epoch: Epoch) -> Result<Manifest> {
        let manifest = self.read_manifest(epoch)?;
        manifest.validate()?;
        self.for_each_snapshot(epoch, &mut manifest.files.iter(), &mut |_, _| Ok(()))?;
        Ok(manifest)
    }

    /// The newest epoch that passes [`verify_epoch`](Self::verify_epoch). Uncommitted epochs
    /// are skipped silently (a crash before the commit point); a committed but corrupt or
    /// partial one is skipped with a warning naming the reason. `None` when nothing is valid.
    fn latest_valid(&self) -> Result<Option<Manifest>> {
        for epoch in self.list_epochs()?.into_iter().rev() {
            match self.verify_epoch(epoch) {
                Ok(manifest) => return Ok(Some(manifest)),
                Err(CheckpointError::NotCommitted { .. }) => {
                    tracing::debug!(epoch = epoch.0, "skipping uncommitted checkpoint epoch");
                }
                Err(CheckpointError::Io { op, path, source }) => {
                    return Err(CheckpointError::Io { op, path, source })
                }
                Err(reason) => {
                    tracing::warn!(
                        epoch = epoch.0,
                        %reason,
                        "checkpoint epoch {} is invalid and will not be restored; trying the previous one",
                        epoch.0
                    );
                }
            }
        }
        Ok(None)
    }

    /// Retention: keeps the newest `keep_last` committed epochs (at least 1) and removes older
    /// epochs, plus uncommitted leftovers older than the newest commit. Uncommitted epochs newer
    /// than the newest commit may still be in progress and are kept. An older epoch holding
    /// files that a kept epoch lists is *retired*: its MANIFEST goes first (it is no longer a
    /// restore point), then every file no kept epoch lists. An epoch counts as committed when
    /// its MANIFEST verifies (its files are not re-read here).
    fn prune(&self, keep_last: usize) -> Result<Pruned> {
        let epochs = self.list_epochs()?;
        let mut committed = Vec::new();
        for &epoch in &epochs {
            match self.read_manifest(epoch) {
                Ok(manifest) => committed.push(manifest),
                Err(CheckpointError::Io { op, path, source }) => {
                    return Err(CheckpointError::Io { op, path, source })
                }
                Err(_) => {}
            }
        }
        let kept = &committed[committed.len().saturating_sub(keep_last.max(1))..];
        let Some(newest) = kept.last().map(|m| m.epoch) else {
            return Ok(Pruned::default());
        };
        let mut listed: BTreeMap<Epoch, BTreeSet<String>> = BTreeMap::new();
        for manifest in kept {
            for file in &manifest.files {
                listed
                    .entry(file.file_epoch(manifest.epoch))
                    .or_default()
                    .insert(file.file_name());
            }
        }
        let mut pruned = Pruned {
            kept: kept.iter().map(|m| m.epoch).collect(),
            ..Pruned::default()
        };
        for epoch in epochs {
            if epoch >= newest || pruned.kept.contains(&epoch) {
                continue;
            }
            let Some(names) = listed.get(&epoch) else {
                self.delete_epoch(epoch)?;
                pruned.deleted.push(epoch);
                continue;
            };
            self.delete_file(epoch, MANIFEST_FILE)?;
            for file in self.stored_files(epoch)? {
                if !names.contains(&file.name) {
                    self.delete_file(epoch, &file.name)?;
                }
            }
            pruned.retired.push(epoch);
        }
        Ok(pruned)
    }
}
