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
//! `object_store` is async; the store owns a one-thread tokio runtime and blocks on it. Its
//! callers are the snapshot writer threads, the committer and the CLI, never a hot path.
//! Requests that fail with a 5xx, a 429, a timeout or a refused connection are retried with
//! exponential backoff ([`Retries`]); past the bound the error is an
//! [`CheckpointError::Io`] naming the object (`s3://bucket/prefix/<epoch>/...`).
//!
//! Credentials and endpoint come from the environment, as `object_store`'s
//! `AmazonS3Builder::from_env` reads it: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ENDPOINT_URL` (or
//! `AWS_ENDPOINT`; an S3-compatible server), `AWS_ALLOW_HTTP=true` (a plain-http endpoint),
//! `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (Kubernetes service accounts), the ECS
//! container credential variables, and otherwise the EC2 instance metadata service. Profiles
//! in `~/.aws/config` and `~/.aws/credentials` are not read.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use weir_features::vocab::Epoch;

use crate::error::{CheckpointError, Result};
use crate::format::{self, Snapshot};
use crate::manifest::{self, Manifest};
use crate::range::{check_operator_name, KeyGroupRange, SnapshotEntry};
use crate::store::{encoded_snapshot, SnapshotStore, StoredFile, MANIFEST_FILE};

/// The URL scheme of an object-store checkpoint location.
pub const S3_SCHEME: &str = "s3://";

/// How failed requests are retried: exponential backoff from `first_backoff` (doubling, capped
/// at `max_backoff`), at most `max_retries` times and no longer than `timeout` in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retries {
    /// Retries of one request after its first attempt.
    pub max_retries: usize,
    /// The first wait.
    pub first_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
    /// No retry starts later than this after the first attempt.
    pub timeout: Duration,
}

impl Default for Retries {
    /// 10 retries from 100 ms up to 5 s, within 60 s: a server that refuses a few requests is
    /// ridden out; one that is down fails the commit within a minute, and the next epoch
    /// tries again.
    fn default() -> Self {
        Retries {
            max_retries: 10,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            timeout: Duration::from_secs(60),
        }
    }
}

/// How to reach the bucket, besides the environment.
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    /// `object_store` S3 options applied over the environment, by their names
    /// (`aws_endpoint`, `aws_allow_http`, `aws_access_key_id`, `aws_region`, ...).
    pub config: Vec<(String, String)>,
    /// Retry policy.
    pub retries: Retries,
}

/// A [`SnapshotStore`] on an S3 bucket under a prefix. Safe to share between threads and
/// processes under the same rule as the local store: one writer per (epoch, operator,
/// range), one committer per epoch.
pub struct ObjectStoreSnapshotStore {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket`, for messages.
    bucket_url: String,
    /// Prefix of every key (no leading or trailing `/`; empty for the bucket's root).
    prefix: ObjectPath,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for ObjectStoreSnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreSnapshotStore")
            .field("location", &self.location())
            .finish_non_exhaustive()
    }
}

/// Splits `s3://bucket/prefix` into the bucket and the prefix (possibly empty).
pub fn parse_s3_url(url: &str) -> Result<(String, String)> {
    let invalid = |reason: &str| CheckpointError::InvalidLocation {
        location: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix(S3_SCHEME)
        .ok_or_else(|| invalid("it does not start with s3://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(invalid("it names no bucket (s3://bucket/prefix)"));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|part| part == "." || part == "..") || prefix.contains("//") {
        return Err(invalid("its prefix has an empty, `.` or `..` segment"));
    }
    Ok((bucket.to_owned(), prefix.to_owned()))
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
        let (bucket, prefix) = parse_s3_url(url)?;
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_retry(retry_config(options.retries));
        for (key, value) in &options.config {
            let key =
                key.parse()
                    .map_err(|e: object_store::Error| CheckpointError::InvalidLocation {
                        location: url.to_owned(),
                        reason: format!("unknown S3 option `{key}`: {e}"),
                    })?;
            builder = builder.with_config(key, value);
        }
        let store = builder.build().map_err(|e| CheckpointError::Io {
            op: "configure S3 access to",
            path: PathBuf::from(url),
            source: std::io::Error::other(e),
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-ckpt-s3")
            .enable_all()
            .build()
            .map_err(|e| CheckpointError::io("start the S3 client runtime for", url, e))?;
        Ok(ObjectStoreSnapshotStore {
            store: Arc::new(store),
            bucket_url: format!("{S3_SCHEME}{bucket}"),
            prefix: ObjectPath::from(prefix),
            runtime,
        })
    }

    /// `s3://bucket/prefix`.
    pub fn location(&self) -> String {
        self.url_of(&self.prefix)
    }

    fn url_of(&self, key: &ObjectPath) -> String {
        if key.as_ref().is_empty() {
            self.bucket_url.clone()
        } else {
            format!("{}/{key}", self.bucket_url)
        }
    }

    fn path_of(&self, key: &ObjectPath) -> PathBuf {
        PathBuf::from(self.url_of(key))
    }

    fn epoch_prefix(&self, epoch: Epoch) -> ObjectPath {
        self.prefix.clone().join(epoch.0.to_string())
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

    /// Runs `future` on the store's runtime (on a scoped thread when the caller is itself
    /// inside a tokio runtime, where blocking on another one is not allowed).
    fn block_on<F: Future + Send>(&self, future: F) -> F::Output
    where
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(
                |scope| match scope.spawn(|| self.runtime.block_on(future)).join() {
                    Ok(output) => output,
                    Err(panic) => std::panic::resume_unwind(panic),
                },
            )
        } else {
            self.runtime.block_on(future)
        }
    }

    fn error(&self, op: &'static str, key: &ObjectPath, e: object_store::Error) -> CheckpointError {
        CheckpointError::Io {
            op,
            path: self.path_of(key),
            source: std::io::Error::other(flatten(&e)),
        }
    }

    /// The object's bytes; `None` when it does not exist.
    fn get(&self, key: &ObjectPath) -> Result<Option<Vec<u8>>> {
        let result = self.block_on(async {
            let got = self.store.get(key).await?;
            got.bytes().await
        });
        match result {
            Ok(bytes) => Ok(Some(bytes.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("read", key, e)),
        }
    }

    fn put(&self, key: &ObjectPath, bytes: Vec<u8>) -> Result<()> {
        self.block_on(self.store.put(key, PutPayload::from(bytes)))
            .map(drop)
            .map_err(|e| self.error("write", key, e))
    }

    fn delete(&self, key: &ObjectPath) -> Result<()> {
        match self.block_on(self.store.delete(key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", key, e)),
        }
    }

    /// Every object under `epoch`, as (name relative to the epoch, size, key).
    fn list_epoch(&self, epoch: Epoch) -> Result<Vec<(String, u64, ObjectPath)>> {
        let prefix = self.epoch_prefix(epoch);
        let objects = self
            .block_on(self.store.list(Some(&prefix)).try_collect::<Vec<_>>())
            .map_err(|e| self.error("list", &prefix, e))?;
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

/// One line for an `object_store` error: its own message (which repeats its first causes)
/// and the root cause (a refused connection, a DNS failure) when the message lacks it. A
/// string, not a source chain: `{:#}` printing would repeat each level's text.
fn flatten(error: &object_store::Error) -> String {
    let mut message = error.to_string();
    let mut root: &dyn std::error::Error = error;
    while let Some(next) = root.source() {
        root = next;
    }
    let cause = root.to_string();
    if !message.contains(&cause) {
        message.push_str(": ");
        message.push_str(&cause);
    }
    message
}

/// The `object_store` retry policy of `retries`.
fn retry_config(retries: Retries) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: retries.first_backoff,
            max_backoff: retries.max_backoff,
            base: 2.0,
        },
        max_retries: retries.max_retries,
        retry_timeout: retries.timeout,
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
        let root = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listed = self
            .block_on(self.store.list_with_delimiter(root))
            .map_err(|e| self.error("list", &self.prefix, e))?;
        let mut epochs: Vec<Epoch> = listed
            .common_prefixes
            .iter()
            .filter_map(|dir| dir.filename())
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
