//! `ObjectStoreSnapshotStore`: the snapshot store on S3 or an S3-compatible server
//! (`s3://bucket/prefix`), through the `object_store` crate, so the processes of a multi-host
//! job share their checkpoints without a shared mount.
//!
//! Same layout and commit protocol as [`crate::LocalDirStore`]: snapshots are whole-object
//! PUTs under `<prefix>/<epoch>/<operator>/kg-<lo>-<hi>`; the committer checks the listed
//! objects' sizes and then PUTs `<prefix>/<epoch>/MANIFEST`. An S3 PUT is atomic for a whole
//! object and durable when it returns, so a MANIFEST is either absent or complete: that PUT
//! is the commit point. Listings are strongly consistent on S3, which retention relies on.
//!
//! The bucket is reached through [`crate::s3::S3Client`] (shared with the model registry
//! mirror): credentials and endpoint from the `AWS_*` environment, failed requests retried
//! with backoff ([`Retries`]); past the bound the error is a [`CheckpointError::Io`] naming
//! the object (`s3://bucket/prefix/<epoch>/...`). Its callers are the snapshot writer
//! threads, the committer and the CLI, never a hot path.

use std::path::PathBuf;

use object_store::path::Path as ObjectPath;
use weir_features::vocab::Epoch;

use crate::error::{CheckpointError, Result};
use crate::format::{self, Snapshot};
use crate::manifest::{self, Manifest};
use crate::range::{check_operator_name, KeyGroupRange, SnapshotEntry};
use crate::s3::S3Client;
pub use crate::s3::{parse_s3_url, Retries, S3Options, S3_SCHEME};
use crate::store::{encoded_snapshot, SnapshotStore, StoredFile, MANIFEST_FILE};

/// A [`SnapshotStore`] on an S3 bucket under a prefix. Safe to share between threads and
/// processes under the same rule as the local store: one writer per (epoch, operator,
/// range), one committer per epoch.
pub struct ObjectStoreSnapshotStore {
    client: S3Client,
}

impl std::fmt::Debug for ObjectStoreSnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreSnapshotStore")
            .field("location", &self.location())
            .finish_non_exhaustive()
    }
}

impl ObjectStoreSnapshotStore {
    /// Opens the store at `url` (`s3://bucket/prefix`) with credentials and endpoint from the
    /// environment (see the module docs) and the default [`Retries`]. Does not contact the
    /// server: a wrong endpoint or credentials show in the first read or write.
    pub fn open(url: &str) -> Result<Self> {
        Self::open_with(url, &S3Options::default())
    }

    /// Opens the store at `url` with `options` applied over the environment.
    pub fn open_with(url: &str, options: &S3Options) -> Result<Self> {
        Ok(ObjectStoreSnapshotStore {
            client: S3Client::open(url, options, "weir-ckpt-s3")?,
        })
    }

    /// `s3://bucket/prefix`.
    pub fn location(&self) -> String {
        self.client.location()
    }

    fn path_of(&self, key: &ObjectPath) -> PathBuf {
        self.client.path_of(key)
    }

    fn epoch_prefix(&self, epoch: Epoch) -> ObjectPath {
        self.client.prefix().clone().join(epoch.0.to_string())
    }

    fn key_of(&self, epoch: Epoch, name: &str) -> ObjectPath {
        name.split('/')
            .fold(self.epoch_prefix(epoch), |key, part| key.join(part))
    }

    fn snapshot_key(&self, epoch: Epoch, operator: &str, range: KeyGroupRange) -> ObjectPath {
        self.epoch_prefix(epoch)
            .join(operator)
            .join(range.file_name())
    }

    fn get(&self, key: &ObjectPath) -> Result<Option<Vec<u8>>> {
        Ok(self.client.get_key(key)?.map(|(bytes, _)| bytes))
    }

    fn put(&self, key: &ObjectPath, bytes: Vec<u8>) -> Result<()> {
        self.client.put_key(key, bytes)
    }

    fn delete(&self, key: &ObjectPath) -> Result<()> {
        self.client.delete_key(key)
    }

    /// Every object under `epoch`, as (name relative to the epoch, size, key).
    fn list_epoch(&self, epoch: Epoch) -> Result<Vec<(String, u64, ObjectPath)>> {
        let prefix = self.epoch_prefix(epoch);
        let objects = self.client.list_key(&prefix)?;
        let mut out = Vec::with_capacity(objects.len());
        for object in objects {
            let Some(parts) = object.location.prefix_match(&prefix) else {
                continue;
            };
            let name = parts
                .map(|part| part.as_ref().to_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((name, object.size, object.location));
        }
        Ok(out)
    }
}

impl SnapshotStore for ObjectStoreSnapshotStore {
    fn write_snapshot(
        &self,
        epoch: Epoch,
        operator: &str,
        range: KeyGroupRange,
        payload: &[u8],
    ) -> Result<SnapshotEntry> {
        let (bytes, entry) = encoded_snapshot(epoch, operator, range, payload)?;
        self.put(&self.snapshot_key(epoch, operator, range), bytes)?;
        Ok(entry)
    }

    fn read_snapshot(
        &self,
        epoch: Epoch,
        operator: &str,
        range: KeyGroupRange,
    ) -> Result<Snapshot> {
        check_operator_name(operator)?;
        let key = self.snapshot_key(epoch, operator, range);
        let path = self.path_of(&key);
        let bytes = self
            .get(&key)?
            .ok_or_else(|| CheckpointError::SnapshotMissing {
                epoch,
                path: path.clone(),
            })?;
        format::decode(&path, &bytes)
    }

    fn commit_manifest(&self, manifest: &Manifest) -> Result<()> {
        manifest.validate()?;
        let epoch = manifest.epoch;
        // One listing per epoch whose objects the manifest lists, not one HEAD per file.
        let mut sizes = std::collections::BTreeMap::new();
        manifest.check_files_stored(|stored, entry| {
            if let std::collections::btree_map::Entry::Vacant(slot) = sizes.entry(stored) {
                let listed: std::collections::BTreeMap<String, u64> = self
                    .list_epoch(stored)?
                    .into_iter()
                    .map(|(name, size, _)| (name, size))
                    .collect();
                slot.insert(listed);
            }
            let key = self.snapshot_key(stored, &entry.operator, entry.file_range());
            let size = sizes
                .get(&stored)
                .and_then(|listed| listed.get(&entry.file_name()))
                .copied();
            Ok((self.path_of(&key), size))
        })?;
        self.put(&self.key_of(epoch, MANIFEST_FILE), manifest.encode()?)
    }

    fn read_manifest(&self, epoch: Epoch) -> Result<Manifest> {
        let key = self.key_of(epoch, MANIFEST_FILE);
        let path = self.path_of(&key);
        let Some(bytes) = self.get(&key)? else {
            if self.list_epoch(epoch)?.is_empty() {
                return Err(CheckpointError::NoSuchEpoch {
                    epoch,
                    path: PathBuf::from(self.location()),
                });
            }
            return Err(CheckpointError::NotCommitted { epoch, path });
        };
        manifest::decode_for_epoch(&path, &bytes, epoch, "under the prefix")
    }

    fn list_epochs(&self) -> Result<Vec<Epoch>> {
        let mut epochs: Vec<Epoch> = self
            .client
            .list_dirs()?
            .iter()
            .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()))
            .filter_map(|name| name.parse().ok())
            .map(Epoch)
            .collect();
        epochs.sort();
        Ok(epochs)
    }

    fn stored_files(&self, epoch: Epoch) -> Result<Vec<StoredFile>> {
        let mut files: Vec<StoredFile> = self
            .list_epoch(epoch)?
            .into_iter()
            .map(|(name, size, _)| StoredFile { name, size })
            .collect();
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    fn delete_epoch(&self, epoch: Epoch) -> Result<()> {
        self.delete(&self.key_of(epoch, MANIFEST_FILE))?;
        for (_, _, key) in self.list_epoch(epoch)? {
            self.delete(&key)?;
        }
        Ok(())
    }

    fn delete_file(&self, epoch: Epoch, name: &str) -> Result<()> {
        self.delete(&self.key_of(epoch, name))
    }

    fn snapshot_location(&self, epoch: Epoch, operator: &str, range: KeyGroupRange) -> PathBuf {
        self.path_of(&self.snapshot_key(epoch, operator, range))
    }
}
