//! Where a job's checkpoints live: `s3://bucket/prefix` is an object store
//! ([`ObjectStoreSnapshotStore`]), anything else a local directory ([`LocalDirStore`]).
//! [`open_store`] is the one place that decides, for `weir run` and `weir checkpoints`.

use std::path::Path;

use crate::error::{CheckpointError, Result};
use crate::local::LocalDirStore;
use crate::object::ObjectStoreSnapshotStore;
use crate::s3::S3_SCHEME;
use crate::store::SnapshotStore;

/// True when `location` names an object store (`s3://...`) rather than a directory. Such a
/// location is used as given, never resolved against a job file's directory.
pub fn is_object_store_url(location: &Path) -> bool {
    location
        .to_str()
        .is_some_and(|text| text.starts_with(S3_SCHEME))
}

/// Opens the checkpoint store at `location`: an [`ObjectStoreSnapshotStore`] for
/// `s3://bucket/prefix` (credentials and endpoint from the `AWS_*` environment), else a
/// [`LocalDirStore`] on that directory (created if missing).
pub fn open_store(location: &Path) -> Result<Box<dyn SnapshotStore>> {
    if is_object_store_url(location) {
        let url = location
            .to_str()
            .ok_or_else(|| CheckpointError::InvalidLocation {
                location: location.display().to_string(),
                reason: "it is not valid UTF-8".to_owned(),
            })?;
        return Ok(Box::new(ObjectStoreSnapshotStore::open(url)?));
    }
    Ok(Box::new(LocalDirStore::open(location)?))
}
