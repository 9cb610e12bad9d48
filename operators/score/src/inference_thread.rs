//! The inference thread of one score instance (DESIGN.md §4, §6).
//!
//! Each score instance owns one [`InferenceThread`]: a dedicated OS thread, pinned to its
//! configured core (`crate::budget`), that owns the instance's [`ModelSet`] and every ONNX
//! Runtime session in it. The Timely operator (`crate::batcher`) sends it micro-batches
//! ([`InferenceBatch`]: contiguous values, no rows) over a bounded channel and gets them back,
//! scored, over another; after each result the thread
//! calls `wake` (the operator's `SyncActivator`), so the worker thread never blocks on
//! inference. Between batches (and at least every `poll`) the thread asks the registry what
//! to serve and hot-reloads (`crate::reload`): the primary version, and the second version's
//! version, role and share, each loaded, validated and warmed beside the serving one before
//! the swap; on failure what served keeps serving. The thread hands the operator its
//! [`CanaryShare`] at start, so the operator gives rows their keys' canary buckets while a
//! canary serves; the thread splits each batch by the share serving when it scores it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_features::row::ModelTag;

use crate::budget::pin_current_thread;
use crate::canary::CanaryShare;
use crate::config::InferenceSetup;
use crate::error::{Result, ScoreError};
use crate::inference_batch::InferenceBatch;
use crate::model_set::ModelSet;
use crate::reload::{start, Watcher};

/// A batch to score; `id` comes back with its result.
#[derive(Debug)]
pub struct Job {
    /// Caller's batch id.
    pub id: u64,
    /// The rows' values (the rows themselves stay with the caller); boxed, so the channel
    /// moves a pointer and the caller reuses the box.
    pub batch: Box<InferenceBatch>,
}

/// A scored batch: the [`Job`]'s batch, now with its scores.
#[derive(Debug)]
pub struct Done {
    /// The batch id of the [`Job`].
    pub id: u64,
    /// Values and scores; the caller reuses the box and its buffers for a later job.
    pub batch: Box<InferenceBatch>,
}

/// Why [`InferenceThread::submit`] gave a job back.
#[derive(Debug)]
pub enum Refused {
    /// The queue is full; the job can be submitted again once results were taken.
    Full(Job),
    /// The thread is gone for good; the job will never be scored.
    Stopped(Job),
}

/// Handle to one running inference thread; dropping it stops and joins the thread.
pub struct InferenceThread {
    jobs: Option<SyncSender<Job>>,
    results: Receiver<Done>,
    /// Jobs submitted and not yet taken by the thread.
    queued: Arc<AtomicUsize>,
    /// Whether the thread has woken the operator for results it has not taken yet.
    woken: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    tag: ModelTag,
    canary_share: Arc<CanaryShare>,
}

impl InferenceThread {
    /// Starts the thread, pins it, loads and warms its models, and returns once they serve
    /// (or with the load error). `capacity` bounds the queued jobs; `wake` is called after a
    /// result is sent, unless enough work still waits behind it (see `Hand::must_wake`) or
    /// the operator was already woken and has not taken its results yet
    /// ([`Self::take_results`]).
    pub fn spawn(
        setup: InferenceSetup,
        instance: usize,
        capacity: usize,
        wake: impl Fn() + Send + 'static,
    ) -> Result<Self> {
        let (jobs_tx, jobs_rx) = mpsc::sync_channel::<Job>(capacity.max(1));
        let (results_tx, results_rx) = mpsc::channel::<Done>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(ModelTag, Arc<CanaryShare>)>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let woken = Arc::new(AtomicBool::new(false));
        let hand = Hand {
            jobs: jobs_rx,
            results: results_tx,
            queued: queued.clone(),
            woken: woken.clone(),
            wake_at: capacity.max(1) / 2,
        };
        let handle = std::thread::Builder::new()
            .name(format!("weir-score-{instance}"))
            .spawn(move || {
                // The budget check took the core from this process's affinity mask, so a
                // refusal is unexpected (a core taken offline, the mask changed): the job does
                // not start rather than run its inference thread where it was not meant to.
                let core = setup.cores.as_ref().and_then(|c| c.cores.first().copied());
                if let Some(core) = core.filter(|core| !pin_current_thread(*core)) {
                    let _ = ready_tx.send(Err(ScoreError::CpuBudget {
                        problem: format!(
                            "the OS did not let score instance {instance}'s inference thread \
                             pin to core {core} ([model] cores); check the process's CPU \
                             affinity (taskset, the container's cpuset)"
                        ),
                    }));
                    return;
                }
                let (models, watcher) = match start(&setup) {
                    Ok(started) => started,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let share = models.canary_share().clone();
                // Visible (to checkpoint manifests) once the stage has started.
                publish_serving(&models, &setup);
                let _ = ready_tx.send(Ok((models.primary_tag().clone(), share)));
                serve(models, watcher, &setup, hand, wake);
            })
            .map_err(|e| ScoreError::Thread(format!("cannot start inference thread: {e}")))?;
        let (tag, canary_share) = match ready_rx.recv() {
            Ok(Ok(ready)) => ready,
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(e);
            }
            Err(_) => {
                let _ = handle.join();
                return Err(ScoreError::Thread(
                    "the inference thread stopped while loading its models".into(),
                ));
            }
        };
        Ok(InferenceThread {
            jobs: Some(jobs_tx),
            results: results_rx,
            queued,
            woken,
            handle: Some(handle),
            tag,
            canary_share,
        })
    }

    /// The primary version loaded at start.
    pub fn initial_tag(&self) -> &ModelTag {
        &self.tag
    }

    /// The canary share the thread serves now (`None` from it: no canary), kept current
    /// across hot reloads; while it is `Some` the operator gives rows their keys' buckets.
    pub fn canary_share(&self) -> Arc<CanaryShare> {
        self.canary_share.clone()
    }

    /// Queues a batch; gives it back when the queue is full or the thread is gone.
    pub fn submit(&self, job: Job) -> std::result::Result<(), Refused> {
        let Some(jobs) = &self.jobs else {
            return Err(Refused::Stopped(job));
        };
        // Counted before it can be taken (the thread decrements when it takes it).
        self.queued.fetch_add(1, Ordering::AcqRel);
        jobs.try_send(job).map_err(|e| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            match e {
                TrySendError::Full(job) => Refused::Full(job),
                TrySendError::Disconnected(job) => Refused::Stopped(job),
            }
        })
    }

    /// The finished batches waiting now. Taking them re-arms the thread's wake-up: a result
    /// sent after this call wakes the operator again.
    pub fn take_results(&self) -> mpsc::TryIter<'_, Done> {
        // An acquire RMW: it reads the thread's `swap(true)` after a result it skipped waking
        // for, so that result is visible to the `try_iter` below.
        self.woken.swap(false, Ordering::AcqRel);
        self.results.try_iter()
    }
}

impl Drop for InferenceThread {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The thread's ends of the hand-off.
struct Hand {
    jobs: Receiver<Job>,
    results: mpsc::Sender<Done>,
    /// Jobs submitted and not yet taken (shared with [`InferenceThread::submit`]).
    queued: Arc<AtomicUsize>,
    /// Set when the thread wakes the operator, cleared when the operator takes its results
    /// (shared with [`InferenceThread::take_results`]).
    woken: Arc<AtomicBool>,
    /// Half the queue: see [`Hand::must_wake`].
    wake_at: usize,
}

/// Work queued behind a result that lets the thread skip waking the operator for it.
const SLACK: Duration = Duration::from_micros(100);

impl Hand {
    /// Whether to wake the operator after a result, given how long the batch took.
    ///
    /// Waking a parked thread costs the inference thread a system call (on a VM, an
    /// interrupt too): at one wake per batch that was 10-20 % of its time (BENCHMARKS.md). So
    /// the wake is skipped when more than half the queue still waits *and* that work keeps
    /// the thread busy for at least [`SLACK`] (estimated from this batch): the operator then
    /// gets this result with the next one, soon enough to refill the queue before it runs
    /// dry. With fast batches (less slack than a wake-up and the operator's own work take)
    /// every result wakes it; so does the last one of a burst (nothing queued).
    fn must_wake(&self, took: Duration) -> bool {
        let waiting = self.queued.load(Ordering::Acquire);
        waiting <= self.wake_at || took * (waiting as u32) < SLACK
    }

    /// Whether this wake-up would be the first since the operator last took its results;
    /// marks it done. A second one is only a second system call: the operator, once
    /// scheduled, takes every result sent before it does (`InferenceThread::take_results`).
    fn first_wake(&self) -> bool {
        !self.woken.swap(true, Ordering::AcqRel)
    }
}

/// Runs `f`; a panic inside it comes back as its message instead of unwinding further. The
/// inference thread scores through it: a panicking model runtime must fail one batch (error
/// records, dead letters, counted), not end the thread and strand the batches queued behind it.
fn contain_panic(f: impl FnOnce()) -> std::result::Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned())
    })
}

/// Records what `models` serves for checkpoint manifests (`JobMetrics::serving`).
fn publish_serving(models: &ModelSet, setup: &InferenceSetup) {
    setup.serving.set(setup.instance, models.serving());
}

/// The thread's loop: score jobs in order, reload between them, stop when the operator goes.
fn serve(
    mut models: ModelSet,
    mut watcher: Option<Watcher>,
    setup: &InferenceSetup,
    hand: Hand,
    wake: impl Fn(),
) {
    loop {
        let job = match &watcher {
            Some(w) => match hand.jobs.recv_timeout(w.due()) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match hand.jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            },
        };
        if let Some(Job { id, mut batch }) = job {
            hand.queued.fetch_sub(1, Ordering::AcqRel);
            let start = Instant::now();
            if let Err(message) = contain_panic(|| models.score(&mut batch)) {
                tracing::error!(%message, rows = batch.rows, "inference panicked; the batch's rows get error records and the thread goes on");
                models.fail_batch(&mut batch, ScoreError::Panicked(message));
            }
            let took = start.elapsed();
            setup.counters.inference_seconds.observe(took.as_secs_f64());
            setup
                .counters
                .inference_busy_ns
                .inc_by(took.as_nanos() as u64);
            setup.counters.batch_rows.observe(batch.rows as f64);
            if hand.results.send(Done { id, batch }).is_err() {
                return;
            }
            if hand.must_wake(took) && hand.first_wake() {
                wake();
            }
        }
        if let Some(w) = watcher.as_mut().filter(|w| w.due().is_zero()) {
            if let Err(message) = contain_panic(|| w.check(&mut models, setup)) {
                // A swap is one assignment, so `models` is whole; the watcher may not be, and
                // retrying would panic again every poll: this instance stops watching.
                tracing::error!(%message, instance = setup.instance, "hot reload panicked; this score instance keeps serving what it serves and stops watching the registry");
                setup.counters.reload_failures.inc();
                watcher = None;
            }
            publish_serving(&models, setup);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::contain_panic;

    #[test]
    fn a_panic_comes_back_as_its_message() {
        assert_eq!(contain_panic(|| {}), Ok(()));
        assert_eq!(
            contain_panic(|| panic!("static message")),
            Err("static message".to_owned())
        );
        let n = 3;
        assert_eq!(
            contain_panic(|| panic!("formatted {n}")),
            Err("formatted 3".to_owned())
        );
    }
}
