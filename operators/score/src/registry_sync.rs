//! One sync of a remote model directory (`s3://bucket/prefix/<name>/`) into its local cache
//! (`<cache>/<name>/`), which the registry (`crate::registry`) and hot reload read as they
//! read any local registry. Called by the mirror (`crate::registry_mirror`): once at start,
//! then every poll on its thread. No threads, no S3 here: the remote is a [`RemoteModel`].
//!
//! The cache holds exactly the remote's complete versions and its `CONTROL`:
//!
//! - a version directory (name not starting with `.`) with both `model.onnx` and
//!   `manifest.json` is downloaded, every file of it, when it is new or any file's stamp
//!   (ETag, else size and modification time) changed. Its files go to a hidden directory
//!   `.v<generation>-<version>`, and the version's entry `<version>` is a symlink to it,
//!   replaced by renaming a new symlink over it: a reader sees the old version or the new
//!   one, never half of either, and a replaced version's fingerprint changes (the registry
//!   fingerprints the link's target too). The replaced directory is removed at the next
//!   sync, so a load that started before the swap can finish reading it;
//! - a version missing one of the two files is left out (logged once) until it is complete;
//!   a version gone from the remote (or no longer complete) is removed;
//! - `CONTROL` is written aside and renamed into place; removed when the remote has none.
//!
//! New and changed versions are applied before `CONTROL`, and removals after it, so a
//! `CONTROL` naming a version just published, or no longer naming one just deleted, is never
//! read without its versions. A failure stops the sync where it is (what was applied stays,
//! consistent version by version) and the next sync starts over from the listing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::control::CONTROL_FILE;
use crate::error::{Result, ScoreError};
use crate::manifest::MANIFEST_FILE;
use crate::session::MODEL_FILE;

/// An object of the remote model directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteFile {
    /// Its key relative to the model directory (`v3/model.onnx`, `CONTROL`).
    pub key: String,
    /// Changes whenever its content may have (ETag, else size and modification time).
    pub stamp: String,
}

/// A model's directory on a remote store.
pub trait RemoteModel: Send + Sync {
    /// `s3://bucket/prefix/<name>`, for messages.
    fn location(&self) -> String;
    /// Every object under the model directory, at any depth.
    fn list(&self) -> Result<Vec<RemoteFile>>;
    /// An object's bytes and stamp; `None` when it is gone.
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>>;
}

/// A version as the cache holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CachedVersion {
    /// Stamp by file key (relative to the version directory).
    files: BTreeMap<String, String>,
    /// The hidden directory holding its files (the symlink's target).
    data: String,
}

/// What the cache holds, between syncs.
#[derive(Debug, Default)]
pub struct SyncState {
    versions: BTreeMap<String, CachedVersion>,
    /// The stamp of the `CONTROL` copied, if any.
    control: Option<String>,
    /// Incomplete versions already logged.
    incomplete: BTreeSet<String>,
    /// Directories of replaced or removed versions, deleted at the next sync.
    retired: Vec<String>,
    generation: u64,
}

impl SyncState {
    /// The versions the cache holds, by name.
    pub fn versions(&self) -> impl Iterator<Item = &str> {
        self.versions.keys().map(String::as_str)
    }
}

/// What a sync changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Versions downloaded for the first time.
    pub added: Vec<String>,
    /// Versions downloaded again (a file changed remotely).
    pub replaced: Vec<String>,
    /// Versions removed (deleted remotely, or no longer complete).
    pub removed: Vec<String>,
    /// `CONTROL` was written or removed.
    pub control: bool,
}

impl Changes {
    /// True when the sync changed nothing.
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

/// The remote listing, grouped: each well-formed version's files, and `CONTROL`'s stamp.
#[derive(Default)]
struct Listing {
    versions: BTreeMap<String, BTreeMap<String, String>>,
    control: Option<String>,
}

fn group(files: Vec<RemoteFile>) -> Listing {
    let mut listing = Listing::default();
    for file in files {
        let parts: Vec<&str> = file.key.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            continue;
        }
        match parts.as_slice() {
            [CONTROL_FILE] => listing.control = Some(file.stamp),
            [version, rest @ ..] if !rest.is_empty() && !version.starts_with('.') => {
                listing
                    .versions
                    .entry((*version).to_owned())
                    .or_default()
                    .insert(rest.join("/"), file.stamp);
            }
            _ => {}
        }
    }
    listing
}

/// Brings `dir` (`<cache>/<name>`, created if missing) up to date with `remote`.
pub fn sync(remote: &dyn RemoteModel, dir: &Path, state: &mut SyncState) -> Result<Changes> {
    std::fs::create_dir_all(dir).map_err(|e| local(dir, "create", e))?;
    for retired in std::mem::take(&mut state.retired) {
        remove_tree(&dir.join(&retired))?;
    }
    let listing = group(remote.list()?);
    let mut changes = Changes::default();
    let mut complete = BTreeSet::new();
    for (version, files) in &listing.versions {
        let missing: Vec<&str> = [MODEL_FILE, MANIFEST_FILE]
            .into_iter()
            .filter(|f| !files.contains_key(*f))
            .collect();
        if !missing.is_empty() {
            if state.incomplete.insert(version.clone()) {
                tracing::info!(
                    version = %version,
                    registry = %remote.location(),
                    missing = ?missing,
                    "model registry: a version without both model.onnx and manifest.json is left out until it has both"
                );
            }
            continue;
        }
        state.incomplete.remove(version);
        complete.insert(version.clone());
        let cached = state.versions.get(version);
        if cached.is_some_and(|c| &c.files == files) {
            continue;
        }
        let replaced = cached.is_some();
        download(remote, dir, state, version, files)?;
        if replaced {
            changes.replaced.push(version.clone());
        } else {
            changes.added.push(version.clone());
        }
    }
    changes.control = sync_control(remote, dir, state, listing.control.as_deref())?;
    let gone: Vec<String> = state
        .versions
        .keys()
        .filter(|v| !complete.contains(*v))
        .cloned()
        .collect();
    for version in gone {
        let entry = dir.join(&version);
        match std::fs::remove_file(&entry) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(local(&entry, "remove", e)),
        }
        if let Some(cached) = state.versions.remove(&version) {
            state.retired.push(cached.data);
        }
        changes.removed.push(version);
    }
    state
        .incomplete
        .retain(|v| listing.versions.contains_key(v));
    Ok(changes)
}

/// Downloads every file of `version` into a new hidden directory and points the version's
/// symlink at it.
fn download(
    remote: &dyn RemoteModel,
    dir: &Path,
    state: &mut SyncState,
    version: &str,
    files: &BTreeMap<String, String>,
) -> Result<()> {
    state.generation += 1;
    let data = format!(".v{}-{version}", state.generation);
    let target = dir.join(&data);
    remove_tree(&target)?;
    let fetched = fetch_all(remote, &target, version, files);
    let fetched = match fetched {
        Ok(fetched) => fetched,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&target);
            return Err(e);
        }
    };
    let link = dir.join(format!(".link-{version}"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&data, &link).map_err(|e| local(&link, "create symlink", e))?;
    let entry = dir.join(version);
    std::fs::rename(&link, &entry).map_err(|e| local(&entry, "rename a symlink onto", e))?;
    let old = state.versions.insert(
        version.to_owned(),
        CachedVersion {
            files: fetched,
            data,
        },
    );
    if let Some(old) = old {
        state.retired.push(old.data);
    }
    Ok(())
}

/// Writes each of `files` of `version` under `target`; their stamps as read.
fn fetch_all(
    remote: &dyn RemoteModel,
    target: &Path,
    version: &str,
    files: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>> {
    let mut fetched = BTreeMap::new();
    for key in files.keys() {
        let remote_key = format!("{version}/{key}");
        let Some((bytes, stamp)) = remote.get(&remote_key)? else {
            return Err(ScoreError::Registry {
                dir: PathBuf::from(format!("{}/{remote_key}", remote.location())),
                problem: "it was deleted while the version was being copied; the next sync \
                          tries again"
                    .to_owned(),
            });
        };
        let path = target.join(key);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| local(parent, "create", e))?;
        }
        std::fs::write(&path, bytes).map_err(|e| local(&path, "write", e))?;
        fetched.insert(key.clone(), stamp);
    }
    Ok(fetched)
}

/// Copies, replaces or removes `CONTROL`; true when it did.
fn sync_control(
    remote: &dyn RemoteModel,
    dir: &Path,
    state: &mut SyncState,
    listed: Option<&str>,
) -> Result<bool> {
    let path = dir.join(CONTROL_FILE);
    if listed.is_some() && listed == state.control.as_deref() {
        return Ok(false);
    }
    let got = match listed {
        Some(_) => remote.get(CONTROL_FILE)?,
        None => None,
    };
    match got {
        Some((bytes, stamp)) => {
            let staging = dir.join(format!(".{CONTROL_FILE}.incoming"));
            std::fs::write(&staging, bytes).map_err(|e| local(&staging, "write", e))?;
            std::fs::rename(&staging, &path).map_err(|e| local(&path, "rename onto", e))?;
            state.control = Some(stamp);
            Ok(true)
        }
        None if state.control.is_some() => {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(local(&path, "remove", e)),
            }
            state.control = None;
            Ok(true)
        }
        None => Ok(false),
    }
}

fn remove_tree(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(local(path, "remove", e)),
    }
}

fn local(path: &Path, op: &str, e: std::io::Error) -> ScoreError {
    ScoreError::Registry {
        dir: path.to_path_buf(),
        problem: format!(
            "cannot {op} it in the registry's local cache: {e} (the cache is under the \
             system temporary directory, TMPDIR)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(key: &str) -> RemoteFile {
        RemoteFile {
            key: key.to_owned(),
            stamp: format!("stamp of {key}"),
        }
    }

    #[test]
    fn a_listing_groups_into_versions_and_control() {
        let listing = group(
            [
                "v1/model.onnx",
                "v1/manifest.json",
                "v1/weights/extra.bin",
                "CONTROL",
                ".incoming/model.onnx",
                "README",
                "v2/../v1/model.onnx",
                "v3/manifest.json",
            ]
            .map(file)
            .to_vec(),
        );
        assert_eq!(listing.control.as_deref(), Some("stamp of CONTROL"));
        let versions: Vec<(&str, Vec<&str>)> = listing
            .versions
            .iter()
            .map(|(v, files)| (v.as_str(), files.keys().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            versions,
            [
                (
                    "v1",
                    vec!["manifest.json", "model.onnx", "weights/extra.bin"]
                ),
                ("v3", vec!["manifest.json"]),
            ]
        );
    }
}
