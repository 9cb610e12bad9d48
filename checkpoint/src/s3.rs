//! `S3Client`: one S3 bucket under a prefix (`s3://bucket/prefix`), reached through the
//! `object_store` crate with credentials and endpoint from the environment. The one place
//! that builds an S3 client: the checkpoint store ([`crate::ObjectStoreSnapshotStore`]) and
//! the scoring stage's model registry mirror (`weir_score::registry_mirror`) both open their
//! bucket here, so both read the same `AWS_*` settings and retry the same way.
//!
//! Credentials and endpoint come from the environment, as `object_store`'s
//! `AmazonS3Builder::from_env` reads it: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ENDPOINT_URL` (or
//! `AWS_ENDPOINT`; an S3-compatible server), `AWS_ALLOW_HTTP=true` (a plain-http endpoint),
//! `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (Kubernetes service accounts), the ECS
//! container credential variables, and otherwise the EC2 instance metadata service. Profiles
//! in `~/.aws/config` and `~/.aws/credentials` are not read.
//!
//! `object_store` is async; the client owns a one-thread tokio runtime and blocks on it. Its
//! callers are checkpoint writer threads, the committer, the CLI and the registry's sync
//! thread, never a hot path. Requests that fail with a 5xx, a 429, a timeout or a refused
//! connection are retried with exponential backoff ([`Retries`]); past the bound the error is
//! a [`CheckpointError::Io`] naming the object (`s3://bucket/prefix/...`).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};

use crate::error::{CheckpointError, Result};

/// The URL scheme of an object-store location.
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

/// An object as listed or read: its key relative to the client's prefix, size, ETag and
/// modification time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The key under the client's prefix (`v3/model.onnx`).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// The server's entity tag, when it sends one.
    pub e_tag: Option<String>,
    /// Last modification.
    pub last_modified: SystemTime,
}

impl ObjectInfo {
    /// Changes whenever the object's content may have: the ETag, else size and modification
    /// time.
    pub fn stamp(&self) -> String {
        match &self.e_tag {
            Some(tag) => format!("etag {tag}"),
            None => {
                let at = self
                    .last_modified
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                format!("{} bytes @{at}", self.size)
            }
        }
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

/// A bucket under a prefix, with the runtime its requests block on.
pub struct S3Client {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket`, for messages.
    bucket_url: String,
    /// Prefix of every key (no leading or trailing `/`; empty for the bucket's root).
    prefix: ObjectPath,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for S3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Client")
            .field("location", &self.location())
            .finish_non_exhaustive()
    }
}

impl S3Client {
    /// Opens `url` (`s3://bucket/prefix`) with `options` applied over the environment (see
    /// the module docs); the runtime's thread is named `thread_name`. Does not contact the
    /// server: a wrong endpoint or credentials show in the first request.
    pub fn open(url: &str, options: &S3Options, thread_name: &str) -> Result<Self> {
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
            .thread_name(thread_name)
            .enable_all()
            .build()
            .map_err(|e| CheckpointError::io("start the S3 client runtime for", url, e))?;
        Ok(S3Client {
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

    /// The prefix every key is under.
    pub(crate) fn prefix(&self) -> &ObjectPath {
        &self.prefix
    }

    /// `s3://bucket/<key>`.
    pub(crate) fn url_of(&self, key: &ObjectPath) -> String {
        if key.as_ref().is_empty() {
            self.bucket_url.clone()
        } else {
            format!("{}/{key}", self.bucket_url)
        }
    }

    /// [`S3Client::url_of`] as a path, for errors.
    pub(crate) fn path_of(&self, key: &ObjectPath) -> PathBuf {
        PathBuf::from(self.url_of(key))
    }

    /// The key of `relative` (`a/b/c`, split at `/`) under the prefix.
    pub(crate) fn key(&self, relative: &str) -> ObjectPath {
        relative
            .split('/')
            .filter(|part| !part.is_empty())
            .fold(self.prefix.clone(), |key, part| key.join(part))
    }

    /// Runs `future` on the client's runtime (on a scoped thread when the caller is itself
    /// inside a tokio runtime, where blocking on another one is not allowed).
    pub(crate) fn block_on<F: Future + Send>(&self, future: F) -> F::Output
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

    pub(crate) fn error(
        &self,
        op: &'static str,
        key: &ObjectPath,
        e: object_store::Error,
    ) -> CheckpointError {
        CheckpointError::Io {
            op,
            path: self.path_of(key),
            source: std::io::Error::other(flatten(&e)),
        }
    }

    /// The object's bytes and what the server says of it; `None` when it does not exist.
    pub(crate) fn get_key(&self, key: &ObjectPath) -> Result<Option<(Vec<u8>, ObjectMeta)>> {
        let result = self.block_on(async {
            let got = self.store.get(key).await?;
            let meta = got.meta.clone();
            Ok::<_, object_store::Error>((got.bytes().await?, meta))
        });
        match result {
            Ok((bytes, meta)) => Ok(Some((bytes.to_vec(), meta))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("read", key, e)),
        }
    }

    /// One whole-object PUT (atomic on S3: readers see the old object or the new one).
    pub(crate) fn put_key(&self, key: &ObjectPath, bytes: Vec<u8>) -> Result<()> {
        self.block_on(self.store.put(key, PutPayload::from(bytes)))
            .map(drop)
            .map_err(|e| self.error("write", key, e))
    }

    /// Deletes the object; one that does not exist is no error.
    pub(crate) fn delete_key(&self, key: &ObjectPath) -> Result<()> {
        match self.block_on(self.store.delete(key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", key, e)),
        }
    }

    /// Every object under `prefix`, at any depth.
    pub(crate) fn list_key(&self, prefix: &ObjectPath) -> Result<Vec<ObjectMeta>> {
        self.block_on(self.store.list(Some(prefix)).try_collect::<Vec<_>>())
            .map_err(|e| self.error("list", prefix, e))
    }

    /// The names of the "directories" right under the client's prefix.
    pub(crate) fn list_dirs(&self) -> Result<Vec<String>> {
        let root = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listed = self
            .block_on(self.store.list_with_delimiter(root))
            .map_err(|e| self.error("list", &self.prefix, e))?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|dir| dir.filename())
            .map(str::to_owned)
            .collect())
    }

    /// The key of `meta` relative to `under`, `/`-separated.
    fn relative(under: &ObjectPath, meta: &ObjectMeta) -> Option<String> {
        let parts = meta.location.prefix_match(under)?;
        Some(
            parts
                .map(|part| part.as_ref().to_owned())
                .collect::<Vec<_>>()
                .join("/"),
        )
    }

    fn info(&self, meta: &ObjectMeta) -> Option<ObjectInfo> {
        Some(ObjectInfo {
            key: Self::relative(&self.prefix, meta)?,
            size: meta.size,
            e_tag: meta.e_tag.clone(),
            last_modified: meta.last_modified.into(),
        })
    }

    /// Every object under `relative` (a `/`-separated path under the prefix; `""` for all),
    /// keys relative to the client's prefix.
    pub fn list(&self, relative: &str) -> Result<Vec<ObjectInfo>> {
        let under = self.key(relative);
        Ok(self
            .list_key(&under)?
            .iter()
            .filter_map(|meta| self.info(meta))
            .collect())
    }

    /// The bytes of the object at `relative` and what the server said of them; `None` when
    /// it does not exist.
    pub fn get(&self, relative: &str) -> Result<Option<(Vec<u8>, ObjectInfo)>> {
        let key = self.key(relative);
        Ok(self.get_key(&key)?.and_then(|(bytes, meta)| {
            let info = self.info(&meta)?;
            Some((bytes, info))
        }))
    }

    /// Writes the object at `relative` (one whole-object PUT).
    pub fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<()> {
        self.put_key(&self.key(relative), bytes)
    }

    /// Deletes the object at `relative` (absent is no error).
    pub fn delete(&self, relative: &str) -> Result<()> {
        self.delete_key(&self.key(relative))
    }

    /// `s3://bucket/prefix/<relative>`, for messages.
    pub fn url(&self, relative: &str) -> String {
        self.url_of(&self.key(relative))
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
