//! Hot reload (DESIGN.md §6): which model versions an inference thread serves, and how it
//! changes them while the job runs.
//!
//! On each inference thread (`crate::inference_thread`), between two batches. At start,
//! `start` loads what the model source names: a fixed directory, or the registry's [`Plan`]
//! (`crate::registry`: the primary version, and a second version from a `canary` / `shadow`
//! line of `CONTROL`), and the job file's fixed second version when `CONTROL` names none. When
//! the primary follows `latest` and the newest version does not load, the start serves the
//! newest older version that does ([`start_primary`]; logged, counted as a reload failure, and
//! the newest is retried only once its files change), so a bad publish cannot keep a restarting
//! job down; a pinned version, a second version, or a registry where no version loads stops the
//! start. Then, every `poll`, the `Watcher` resolves the plan again and applies what changed,
//! the primary first (a registry on S3 is read from its local mirror, which `start` syncs
//! first if this process has not and whose sync thread it starts: `crate::registry_mirror`):
//!
//! - a new version (another version directory, or its files changed) is loaded, checked
//!   (manifest, the job's features, a registry version's name and version against its
//!   directory) and warmed on a thread of its own (`crate::loader`) while the serving one
//!   keeps scoring, then swapped in between two batches (while a load runs the watcher looks
//!   at it every [`LOADING_POLL`], and resolves the registry again only every `poll`);
//! - another role or share of the same second version applies at once, without a reload;
//! - a removed `canary` / `shadow` line stops the second version (or brings back the job
//!   file's, which a `CONTROL` line overrides while present).
//!
//! On any failure (unreadable or invalid `CONTROL`, a version that does not load or check) what
//! served keeps serving; the failure is logged and counted once
//! (`ScoreCounters::reload_failures`) and not retried until its files or `CONTROL` change. Both
//! versions follow these rules through one piece of code (`crate::follower`); only what a swap
//! does differs. Changes are logged with from/to and counted (`reloads`, `secondary_changes`).
//! Should a check ever panic (no input known to do so), the thread (`crate::inference_thread`)
//! keeps serving what it serves, logs and counts it as a failure, and stops watching for that
//! instance.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use crate::config::InferenceSetup;
use crate::error::{Result, ScoreError};
use crate::follower::{fail, Follower, Step, Wanted};
use crate::model_set::{tag_of, ModelSet};
use crate::registry::{ModelSource, Plan, Registry, Target};
use crate::secondary::{SecondaryModel, SecondaryRole};
use crate::session::{ModelSession, SessionOptions};

/// Resolves, loads and warms the initial models; the watcher when the source is a registry.
pub(crate) fn start(setup: &InferenceSetup) -> Result<(ModelSet, Option<Watcher>)> {
    match &setup.model.source {
        ModelSource::Dir(dir) => {
            let primary = load(setup, dir)?;
            let secondary = match &setup.model.secondary {
                Some(s) => Some((s.role, load(setup, &s.dir)?)),
                None => None,
            };
            Ok((model_set(setup, primary, secondary), None))
        }
        ModelSource::Registry { root, name, poll } => start_registry(setup, root, name, *poll),
        ModelSource::ObjectStore(remote) => {
            let root = remote.start()?;
            remote.watch(&setup.counters.registry_sync_failures);
            start_registry(setup, &root, remote.name(), remote.poll())
        }
    }
}

/// The set serving `primary` (and `secondary`) with the job's metrics and counters.
fn model_set(
    setup: &InferenceSetup,
    primary: ModelSession,
    secondary: Option<(SecondaryRole, ModelSession)>,
) -> ModelSet {
    ModelSet::new(
        primary,
        secondary,
        setup.metrics.clone(),
        setup.counters.clone(),
    )
}

/// [`start`] from a registry directory (a local one, or an object store's local mirror).
fn start_registry(
    setup: &InferenceSetup,
    root: &Path,
    name: &str,
    poll: Duration,
) -> Result<(ModelSet, Option<Watcher>)> {
    let registry = Registry::new(root, name);
    let plan = registry.plan()?;
    let StartingPrimary {
        serving,
        loaded: session,
        skipped,
    } = start_primary(&plan, &registry, |target| {
        load_version(setup, &registry, target)
    })?;
    for (target, error) in &skipped {
        tracing::error!(
            %error,
            skipped = %target.version,
            serving = %serving.version,
            "a newer model version does not load; starting with an older one (the newest is retried when its files change)"
        );
        count(&setup.counters.reload_failures);
    }
    // The watcher would otherwise retry the newest every poll.
    let failed = skipped.first().map(|(t, _)| t.fingerprint.clone());
    let wanted = Second::wanted(plan.second, setup.model.secondary.as_ref());
    let secondary = match &wanted {
        Some(w) => Some((w.role, w.load(setup, &registry)?)),
        None => None,
    };
    let watcher = Watcher {
        registry,
        primary: Follower::new(Some(serving.fingerprint), failed),
        second: Follower::new(wanted.map(|w| w.key()), None),
        failed_plan: None,
        poll,
        last_poll: Instant::now(),
        last_look: Instant::now(),
    };
    Ok((model_set(setup, session, secondary), Some(watcher)))
}

/// The primary version a job starts with ([`start_primary`]).
#[derive(Debug)]
pub struct StartingPrimary<T> {
    /// The version served.
    pub serving: Target,
    /// What the loader made of it.
    pub loaded: T,
    /// Each newer version passed over, with its error, newest first (the newest's
    /// fingerprint is the one a watcher must not retry).
    pub skipped: Vec<(Target, ScoreError)>,
}

/// The primary a job starts with: `plan.primary`, or, when it does not `load` and the plan
/// has fallbacks (the primary follows `latest`), the newest of them that does. When nothing
/// loads, the error is the planned primary's.
pub fn start_primary<T>(
    plan: &Plan,
    registry: &Registry,
    load: impl Fn(&Target) -> Result<T>,
) -> Result<StartingPrimary<T>> {
    let newest_error = match load(&plan.primary) {
        Ok(loaded) => {
            return Ok(StartingPrimary {
                serving: plan.primary.clone(),
                loaded,
                skipped: Vec::new(),
            })
        }
        Err(e) => e,
    };
    let mut skipped = vec![(plan.primary.clone(), newest_error)];
    for version in &plan.fallbacks {
        let target = registry.target(version.clone());
        match load(&target) {
            Ok(loaded) => {
                return Ok(StartingPrimary {
                    serving: target,
                    loaded,
                    skipped,
                })
            }
            Err(e) => skipped.push((target, e)),
        }
    }
    Err(skipped.swap_remove(0).1)
}

fn session_options(setup: &InferenceSetup) -> SessionOptions {
    let mut opts = setup.model.session.clone();
    if let Some(cores) = &setup.cores {
        opts.intra_thread_affinities = cores.ort_affinities();
    }
    opts
}

fn load(setup: &InferenceSetup, dir: &Path) -> Result<ModelSession> {
    ModelSession::load(dir, &setup.job_features, &session_options(setup))
}

/// Loads a registry version, checking that its manifest names the model and the version of
/// its directory (so every score's version tag is the one an operator can pin).
pub fn load_version(
    setup: &InferenceSetup,
    registry: &Registry,
    target: &Target,
) -> Result<ModelSession> {
    let session = load(setup, &target.dir)?;
    check_registry_tag(registry.name(), target, &session)?;
    Ok(session)
}

/// Checks that a registry version's manifest names model `name` and the version of its
/// directory.
pub fn check_registry_tag(name: &str, target: &Target, session: &ModelSession) -> Result<()> {
    let tag = tag_of(session);
    if tag.name != name || tag.version != target.version {
        return Err(ScoreError::Registry {
            dir: target.dir.clone(),
            problem: format!(
                "manifest.json says model `{}` version `{}`, but the directory is {name}/{}; \
                 a registry version's manifest must match its directory",
                tag.name, tag.version, target.version
            ),
        });
    }
    Ok(())
}

/// How often the watcher looks while a version loads on its own thread.
pub const LOADING_POLL: Duration = Duration::from_millis(2);

/// The second version an inference thread should serve.
#[derive(Clone)]
struct Second {
    role: SecondaryRole,
    from: SecondFrom,
}

/// Where a second version comes from.
#[derive(Clone)]
enum SecondFrom {
    /// A registry version named by a `CONTROL` line.
    Version(Target),
    /// The job file's fixed directory (`[model] shadow` / `canary`); its files are not
    /// watched, it is loaded again only when a `CONTROL` line that replaced it goes.
    Dir(PathBuf),
}

impl Second {
    /// The `CONTROL` file's second version, else the job file's.
    fn wanted(
        control: Option<(SecondaryRole, Target)>,
        job_file: Option<&SecondaryModel>,
    ) -> Option<Second> {
        match (control, job_file) {
            (Some((role, target)), _) => Some(Second {
                role,
                from: SecondFrom::Version(target),
            }),
            (None, Some(fixed)) => Some(Second {
                role: fixed.role,
                from: SecondFrom::Dir(fixed.dir.clone()),
            }),
            (None, None) => None,
        }
    }
}

impl Wanted for Second {
    fn key(&self) -> String {
        match &self.from {
            SecondFrom::Version(target) => target.fingerprint.clone(),
            SecondFrom::Dir(dir) => format!("job file|{}", dir.display()),
        }
    }

    fn load(&self, setup: &InferenceSetup, registry: &Registry) -> Result<ModelSession> {
        match &self.from {
            SecondFrom::Version(target) => load_version(setup, registry, target),
            SecondFrom::Dir(dir) => load(setup, dir),
        }
    }
}

/// A primary version, by its fingerprint.
impl Wanted for Target {
    fn key(&self) -> String {
        self.fingerprint.clone()
    }

    fn load(&self, setup: &InferenceSetup, registry: &Registry) -> Result<ModelSession> {
        load_version(setup, registry, self)
    }
}

/// Hot-reload state of one inference thread.
pub(crate) struct Watcher {
    registry: Registry,
    /// The primary version, by fingerprint.
    primary: Follower<Target>,
    /// The second version, by [`Second::key`].
    second: Follower<Second>,
    /// The last plan failure (the error text), counted once.
    failed_plan: Option<String>,
    poll: Duration,
    /// The last full poll (the registry resolved again).
    last_poll: Instant,
    /// The last look of any kind (while a version loads: only at the load).
    last_look: Instant,
}

/// `pp v4 (canary at 5%)`, for the logs.
fn describe(role: SecondaryRole, session: &ModelSession) -> String {
    format!("{} {} ({role})", session.name(), session.version())
}

impl Watcher {
    /// How long until the next look: the next poll, or at most [`LOADING_POLL`] while a
    /// version loads.
    pub(crate) fn due(&self) -> Duration {
        let poll = self.poll.saturating_sub(self.last_poll.elapsed());
        if self.primary.is_loading() || self.second.is_loading() {
            poll.min(LOADING_POLL.saturating_sub(self.last_look.elapsed()))
        } else {
            poll
        }
    }

    /// Looks at the registry and applies what changed: primary, then second version. Before
    /// the next poll is due (a look while a version loads), only swaps in a finished load.
    pub(crate) fn check(&mut self, models: &mut ModelSet, setup: &InferenceSetup) {
        self.last_look = Instant::now();
        if self.last_poll.elapsed() < self.poll {
            self.finish_primary(models, setup);
            self.finish_second(models, setup);
            return;
        }
        self.last_poll = Instant::now();
        let plan = match self.registry.plan() {
            Ok(plan) => plan,
            Err(e) => {
                let what = "the serving versions keep serving as they are";
                return fail(&mut self.failed_plan, e.to_string(), &e, what, setup);
            }
        };
        self.failed_plan = None;
        if self.primary.follow(plan.primary, setup, &self.registry) == Step::Loading {
            self.finish_primary(models, setup);
        }
        let wanted = Second::wanted(plan.second, setup.model.secondary.as_ref());
        self.check_second(wanted, models, setup);
    }

    /// Swaps in the primary version loading now, once its load is done.
    fn finish_primary(&mut self, models: &mut ModelSet, setup: &InferenceSetup) {
        let Some((target, result)) = self.primary.finished() else {
            return;
        };
        match result {
            Ok(session) => {
                let old = models.swap_primary(session);
                tracing::info!(
                    model = %self.registry.name(),
                    from = %old.version(),
                    to = %target.version,
                    "hot reload: now serving a new model version"
                );
                count(&setup.counters.reloads);
                self.primary.served(target.fingerprint);
            }
            Err(e) => {
                let what = "the current model version keeps serving";
                self.primary.fail(target.fingerprint, &e, what, setup);
            }
        }
    }

    /// Follows the second version the plan wants: stops it, gives it another role or share
    /// in place, or loads another one.
    fn check_second(
        &mut self,
        wanted: Option<Second>,
        models: &mut ModelSet,
        setup: &InferenceSetup,
    ) {
        let Some(wanted) = wanted else {
            if self.second.stop() {
                if let Some((role, old)) = models.replace_secondary(None) {
                    tracing::info!(
                        from = %describe(role, &old),
                        to = "none",
                        "second model version stopped: the primary scores every row"
                    );
                    count(&setup.counters.secondary_changes);
                }
            }
            return;
        };
        let role = wanted.role;
        match self.second.follow(wanted, setup, &self.registry) {
            Step::Serving => {
                let change = models
                    .secondary()
                    .filter(|(serving, _)| *serving != role)
                    .map(|(serving, tag)| (serving, tag.clone()));
                if let Some((old, tag)) = change {
                    models.set_secondary_role(role);
                    tracing::info!(
                        model = %tag.name,
                        version = %tag.version,
                        from = %old,
                        to = %role,
                        "second model version: new role or share"
                    );
                    count(&setup.counters.secondary_changes);
                }
            }
            Step::Failed => {}
            Step::Loading => self.finish_second(models, setup),
        }
    }

    /// Serves the second version loading now, once its load is done.
    fn finish_second(&mut self, models: &mut ModelSet, setup: &InferenceSetup) {
        let Some((wanted, result)) = self.second.finished() else {
            return;
        };
        let key = wanted.key();
        match result {
            Ok(session) => {
                let to = describe(wanted.role, &session);
                let old = models.replace_secondary(Some((wanted.role, session)));
                let from = old.map_or("none".to_owned(), |(role, old)| describe(role, &old));
                tracing::info!(%from, %to, "hot reload: new second model version");
                count(&setup.counters.secondary_changes);
                self.second.served(key);
            }
            Err(e) => {
                let what = match models.secondary() {
                    Some(_) => "the current second version keeps serving",
                    None => "the primary keeps scoring every row",
                };
                self.second.fail(key, &e, what, setup);
            }
        }
    }
}

fn count(counter: &Counter) {
    counter.inc();
}
