//! One model version the hot-reload watcher keeps current: the primary or the second version
//! (DESIGN.md §6, hot reload).
//!
//! Inside the scoring stage, under the watcher (`crate::reload`), on the inference thread. A
//! [`Follower`] holds what the watcher knows of one version: the key of the serving one, the
//! key of the last one that failed (not retried until the plan names another), and the load
//! running now (`crate::loader`). Each poll the watcher tells it what the plan wants
//! ([`Follower::follow`]): a load the plan no longer names is dropped, a wanted version that
//! is neither serving nor failed is loaded on a thread of its own, and the watcher swaps in
//! what [`Follower::finished`] gives back between two batches. The primary and the second
//! version follow the same rules; only what a swap does differs, and that stays with the
//! watcher.

use crate::config::InferenceSetup;
use crate::error::{Result, ScoreError};
use crate::loader::Loading;
use crate::registry::Registry;
use crate::session::ModelSession;

/// A version the plan can name: what identifies its files, and how to load it.
pub(crate) trait Wanted: Clone + Send + 'static {
    /// What identifies its files: another key needs another session.
    fn key(&self) -> String;

    /// Loads, checks and warms it.
    fn load(&self, setup: &InferenceSetup, registry: &Registry) -> Result<ModelSession>;
}

/// Where [`Follower::follow`] stands with the wanted version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// It serves already.
    Serving,
    /// It failed before and is not retried until the plan names another.
    Failed,
    /// It loads (on a thread of its own); [`Follower::finished`] gives it back when done.
    Loading,
}

/// The watcher's state for one version (the primary or the second).
pub(crate) struct Follower<W> {
    /// Key of the serving version ([`Wanted::key`]), when one serves.
    serving: Option<String>,
    /// Key of the last failure (a version, or the error text), counted once.
    failed: Option<String>,
    /// The version loading now.
    loading: Option<(W, Loading)>,
}

impl<W: Wanted> Follower<W> {
    /// Follows from a start serving `serving`, with `failed` already counted.
    pub(crate) fn new(serving: Option<String>, failed: Option<String>) -> Self {
        Follower {
            serving,
            failed,
            loading: None,
        }
    }

    /// Whether a load runs.
    pub(crate) fn is_loading(&self) -> bool {
        self.loading.is_some()
    }

    /// Moves toward `wanted`: drops a load of another version, and starts loading `wanted`
    /// unless it serves already, failed before or loads already (its newest `wanted` is kept:
    /// a second version's role may have changed meanwhile).
    pub(crate) fn follow(
        &mut self,
        wanted: W,
        setup: &InferenceSetup,
        registry: &Registry,
    ) -> Step {
        let key = wanted.key();
        // A load of a version the plan no longer names is dropped.
        if self
            .loading
            .as_ref()
            .is_some_and(|(loading, _)| loading.key() != key)
        {
            self.loading = None;
        }
        if self.serving.as_ref() == Some(&key) {
            self.failed = None;
            self.loading = None;
            return Step::Serving;
        }
        if self.failed.as_ref() == Some(&key) {
            return Step::Failed;
        }
        // Keep waiting for this version's load; start one if none runs.
        let loading = match self.loading.take() {
            Some((_, loading)) => loading,
            None => {
                let (setup, registry, version) = (setup.clone(), registry.clone(), wanted.clone());
                Loading::start(format!("weir-load-{}", setup.instance), move || {
                    version.load(&setup, &registry)
                })
            }
        };
        self.loading = Some((wanted, loading));
        Step::Loading
    }

    /// Stops following: the plan names no such version. Drops a running load and forgets
    /// the last failure; returns whether a version served.
    pub(crate) fn stop(&mut self) -> bool {
        self.failed = None;
        self.loading = None;
        self.serving.take().is_some()
    }

    /// The load that finished, with what it wanted; `None` while it runs or when none runs.
    pub(crate) fn finished(&mut self) -> Option<(W, Result<ModelSession>)> {
        let (wanted, loading) = self.loading.take()?;
        match loading.outcome() {
            Some(result) => Some((wanted, result)),
            None => {
                self.loading = Some((wanted, loading));
                None
            }
        }
    }

    /// Records that the version with `key` serves now.
    pub(crate) fn served(&mut self, key: String) {
        self.serving = Some(key);
        self.failed = None;
    }

    /// Logs and counts the failure of the version with `key` (`what` says what serves
    /// instead), unless it is the one already counted.
    pub(crate) fn fail(
        &mut self,
        key: String,
        error: &ScoreError,
        what: &str,
        setup: &InferenceSetup,
    ) {
        fail(&mut self.failed, key, error, what, setup);
    }
}

/// Logs and counts a hot-reload failure, unless it is the one already in `slot`.
pub(crate) fn fail(
    slot: &mut Option<String>,
    key: String,
    error: &ScoreError,
    what: &str,
    setup: &InferenceSetup,
) {
    if slot.as_ref() == Some(&key) {
        return;
    }
    tracing::error!(%error, "hot reload failed; {what}");
    setup.counters.reload_failures.inc();
    *slot = Some(key);
}
