//! A model registry on S3 (`[model] registry = "s3://bucket/prefix"` + `name`): mirrored into
//! a local cache directory that the registry (`crate::registry`) and hot reload
//! (`crate::reload`) read unchanged, as a `ModelSource::Registry` rooted at the cache.
//!
//! [`RemoteRegistry`] is the job's model source as planned: the URL, the name and the poll,
//! and the process's mirror once started (clones share it). [`RemoteRegistry::start`] makes
//! the cache (a fresh directory under the system temporary directory, removed when the last
//! clone is dropped) and syncs it once, blocking: a start fails with an error naming the URL
//! when the bucket cannot be read or holds no complete version of the model. Preflight and
//! every inference thread call it; the first does the work. [`RemoteRegistry::watch`], from
//! the inference threads, then starts one thread per process (`weir-reg-sync`) that
//! syncs every `poll` (`crate::registry_sync` says what a sync does). A failed sync is logged
//! (once while the error stays the same) and counted (`weir_model_registry_sync_failures_total`),
//! and the job serves what the cache holds until a sync succeeds.
//!
//! The bucket is opened with `weir_checkpoint::S3Client`, the client the checkpoint store
//! uses: credentials and endpoint from the same `AWS_*` environment. Requests are retried
//! less than a checkpoint's ([`SYNC_RETRIES`]): the next poll retries anyway.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use weir_checkpoint::{CheckpointError, Retries, S3Client, S3Options};

use crate::error::{Result, ScoreError};
use crate::registry_sync::{sync, Changes, RemoteFile, RemoteModel, SyncState};

/// Retries of one request of a sync: 3, from 100 ms up to 1 s, within 10 s.
pub const SYNC_RETRIES: Retries = Retries {
    max_retries: 3,
    first_backoff: Duration::from_millis(100),
    max_backoff: Duration::from_secs(1),
    timeout: Duration::from_secs(10),
};

/// A model's registry on an object store, and its local mirror once started.
#[derive(Clone)]
pub struct RemoteRegistry {
    url: String,
    name: String,
    poll: Duration,
    options: S3Options,
    mirror: Arc<Mutex<Option<Arc<Mirror>>>>,
}

impl std::fmt::Debug for RemoteRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRegistry")
            .field("url", &self.url)
            .field("name", &self.name)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// Equal when they name the same model at the same URL with the same poll.
impl PartialEq for RemoteRegistry {
    fn eq(&self, other: &Self) -> bool {
        (&self.url, &self.name, self.poll) == (&other.url, &other.name, other.poll)
    }
}

impl Eq for RemoteRegistry {}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl RemoteRegistry {
    /// Model `name` of the registry at `url` (`s3://bucket/prefix`), polled every `poll`,
    /// with credentials and endpoint from the environment. Contacts nothing until
    /// [`RemoteRegistry::start`].
    pub fn new(url: &str, name: &str, poll: Duration) -> Self {
        Self::with_options(
            url,
            name,
            poll,
            S3Options {
                config: Vec::new(),
                retries: SYNC_RETRIES,
            },
        )
    }

    /// [`RemoteRegistry::new`] with `options` applied over the environment.
    pub fn with_options(url: &str, name: &str, poll: Duration, options: S3Options) -> Self {
        RemoteRegistry {
            url: url.trim_end_matches('/').to_owned(),
            name: name.to_owned(),
            poll,
            options,
            mirror: Arc::default(),
        }
    }

    /// The registry's URL (`s3://bucket/prefix`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The model name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How often the mirror syncs (and each inference thread reads the cache).
    pub fn poll(&self) -> Duration {
        self.poll
    }

    /// The model's directory on the store, `s3://bucket/prefix/<name>`.
    pub fn location(&self) -> String {
        format!("{}/{}", self.url, self.name)
    }

    /// The local cache root (holding `<name>/`), syncing it first when this process has not
    /// yet: the registry root to read.
    pub fn start(&self) -> Result<PathBuf> {
        let mut slot = lock(&self.mirror);
        if let Some(mirror) = slot.as_ref() {
            return Ok(mirror.root().to_path_buf());
        }
        let mirror = Mirror::start(self)?;
        let root = mirror.root().to_path_buf();
        *slot = Some(Arc::new(mirror));
        Ok(root)
    }

    /// Starts the process's sync thread, counting failed syncs in `failures`, unless it runs
    /// already (or the mirror has not started).
    pub fn watch(&self, failures: &Counter) {
        if let Some(mirror) = lock(&self.mirror).as_ref() {
            mirror.watch(failures);
        }
    }

    /// The cache root, once started.
    pub fn cache_root(&self) -> Option<PathBuf> {
        lock(&self.mirror)
            .as_ref()
            .map(|mirror| mirror.root().to_path_buf())
    }
}

/// The cache and its sync thread; stops the thread and removes the cache when dropped.
struct Mirror {
    cache: tempfile::TempDir,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the sync thread shares with the mirror.
struct Shared {
    remote: Box<dyn RemoteModel>,
    /// `<cache>/<name>`.
    dir: PathBuf,
    poll: Duration,
    state: Mutex<SyncState>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Mirror {
    fn start(registry: &RemoteRegistry) -> Result<Mirror> {
        let remote = S3Model::open(registry)?;
        let cache = tempfile::Builder::new()
            .prefix("weir-registry-")
            .tempdir()
            .map_err(|e| ScoreError::Registry {
                dir: std::env::temp_dir(),
                problem: format!(
                    "cannot create a local cache for {}: {e} (set TMPDIR to a writable directory)",
                    registry.location()
                ),
            })?;
        let dir = cache.path().join(&registry.name);
        let mut state = SyncState::default();
        let changes = sync(&remote, &dir, &mut state)?;
        if state.versions().next().is_none() {
            return Err(ScoreError::Registry {
                dir: PathBuf::from(remote.location()),
                problem: "it holds no complete version: publish <version>/model.onnx and \
                          <version>/manifest.json under it"
                    .to_owned(),
            });
        }
        tracing::info!(
            registry = %remote.location(),
            cache = %dir.display(),
            versions = ?changes.added,
            "model registry mirrored into a local cache"
        );
        Ok(Mirror {
            cache,
            shared: Arc::new(Shared {
                remote: Box::new(remote),
                dir,
                poll: registry.poll,
                state: Mutex::new(state),
                stop: Mutex::new(false),
                wake: Condvar::new(),
            }),
            thread: Mutex::new(None),
        })
    }

    fn root(&self) -> &Path {
        self.cache.path()
    }

    fn watch(&self, failures: &Counter) {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return;
        }
        let shared = self.shared.clone();
        let failures = failures.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-reg-sync".into())
            .spawn(move || shared.run(&failures));
        match spawned {
            Ok(handle) => *thread = Some(handle),
            Err(e) => tracing::error!(
                error = %e,
                registry = %self.shared.remote.location(),
                "cannot start the model registry's sync thread; the versions mirrored at start keep serving"
            ),
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    /// Syncs every poll until stopped.
    fn run(&self, failures: &Counter) {
        let location = self.remote.location();
        let mut failing: Option<String> = None;
        let mut failed = 0u64;
        loop {
            let stop = lock(&self.stop);
            let (stop, _) = self
                .wake
                .wait_timeout_while(stop, self.poll, |stop| !*stop)
                .unwrap_or_else(|poison| poison.into_inner());
            if *stop {
                return;
            }
            drop(stop);
            let result = sync(&*self.remote, &self.dir, &mut lock(&self.state));
            match result {
                Ok(changes) => {
                    if failed > 0 {
                        tracing::info!(registry = %location, failed, "model registry sync works again");
                    }
                    (failing, failed) = (None, 0);
                    log_changes(&location, &changes);
                }
                Err(e) => {
                    failures.inc();
                    failed += 1;
                    let text = e.to_string();
                    if failing.as_ref() != Some(&text) {
                        tracing::warn!(
                            error = %text,
                            registry = %location,
                            "model registry sync failed; the job serves what the local cache holds and syncs again every poll"
                        );
                        failing = Some(text);
                    }
                }
            }
        }
    }
}

fn log_changes(location: &str, changes: &Changes) {
    if changes.is_empty() {
        return;
    }
    tracing::info!(
        registry = %location,
        added = ?changes.added,
        replaced = ?changes.replaced,
        removed = ?changes.removed,
        control = changes.control,
        "model registry synced"
    );
}

/// A model's directory in an S3 bucket.
struct S3Model {
    client: S3Client,
    name: String,
}

impl S3Model {
    fn open(registry: &RemoteRegistry) -> Result<S3Model> {
        let client = S3Client::open(&registry.url, &registry.options, "weir-reg-s3")
            .map_err(|e| remote_error(&registry.location(), e))?;
        Ok(S3Model {
            client,
            name: registry.name.clone(),
        })
    }
}

/// A store error as a registry error naming the model's URL.
fn remote_error(location: &str, error: CheckpointError) -> ScoreError {
    let problem = match error {
        CheckpointError::Io { op, path, source } => {
            format!("cannot {op} {}: {source}", path.display())
        }
        other => other.to_string(),
    };
    ScoreError::Registry {
        dir: PathBuf::from(location),
        problem,
    }
}

impl RemoteModel for S3Model {
    fn location(&self) -> String {
        self.client.url(&self.name)
    }

    fn list(&self) -> Result<Vec<RemoteFile>> {
        let under = format!("{}/", self.name);
        let listed = self
            .client
            .list(&self.name)
            .map_err(|e| remote_error(&self.location(), e))?;
        Ok(listed
            .into_iter()
            .filter_map(|object| {
                Some(RemoteFile {
                    key: object.key.strip_prefix(&under)?.to_owned(),
                    stamp: object.stamp(),
                })
            })
            .collect())
    }

    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>> {
        let got = self
            .client
            .get(&format!("{}/{key}", self.name))
            .map_err(|e| remote_error(&self.location(), e))?;
        Ok(got.map(|(bytes, info)| (bytes, info.stamp())))
    }
}
