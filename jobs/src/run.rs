//! Running a job: preflight checks on the calling thread (ONNX Runtime, model against the job,
//! topics), then the Timely computation with one dataflow per worker, then the run summary
//! ([`crate::summary`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use weir_checkpoint::Manifest;
use weir_features::vocab::Tick;
use weir_kafka::group_offsets::GroupOffsets;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::committer::CommitHook;
use weir_operators::file_claims::RangeClaims;
use weir_operators::metrics::JobMetrics;
use weir_operators::source_alignment::SourceAlignment;
use weir_score::counters::ScoreCounters;

use crate::checkpointing::{self, RestoreChoice};
use crate::cluster::{timely_config, ClusterArgs};
use crate::cluster_totals::{self, ClusterTotals};
use crate::config::CompiledJob;
use crate::metrics_server::{self, Readiness};
use crate::pipeline::{self, JobPlan, Mode};
use crate::plan::SinkPlan;
use crate::preflight;
use crate::progress::Progress;
use crate::start_agreement::{self, StartPoint};
use crate::summary::summarize;
pub use crate::summary::{ModelActivity, RunSummary};

/// How a run starts: which checkpoint to restore, and the process shape.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// `--restore`.
    pub restore: RestoreChoice,
    /// `--processes`, `--process`, `--hosts`.
    pub cluster: ClusterArgs,
    /// Where to serve `/metrics`, `/healthz` and `/readyz` during the run (`None`: no server;
    /// `weir run` passes `[metrics] listen` or `--metrics-addr`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Show live progress on stderr while the run goes on ([`crate::progress`]; `weir run`).
    pub progress: bool,
}

/// Runs a compiled job to completion (bounded) or until `stop` is set.
pub fn run_job(job: CompiledJob, stop: Arc<AtomicBool>) -> Result<RunSummary> {
    run_job_with(job, Mode::Score, stop, &RunOptions::default())
}

/// Runs a compiled job in `mode`.
pub fn run_job_in(job: CompiledJob, mode: Mode, stop: Arc<AtomicBool>) -> Result<RunSummary> {
    run_job_with(job, mode, stop, &RunOptions::default())
}

/// Runs a compiled job in `mode` with `options`.
pub fn run_job_with(
    mut job: CompiledJob,
    mode: Mode,
    stop: Arc<AtomicBool>,
    options: &RunOptions,
) -> Result<RunSummary> {
    if mode == Mode::FeaturesOnly && !matches!(job.sinks, SinkPlan::File { .. }) {
        bail!("a features-only run writes feature rows to a file: set [sink] kind = \"file\" or pass --output");
    }
    let model_versions = preflight(&job, mode)?;
    let threads = job.runtime.workers;
    if options.cluster.processes != job.runtime.processes {
        bail!(
            "--processes {} does not match [runtime] processes = {}; set both the same",
            options.cluster.processes,
            job.runtime.processes
        );
    }
    let timely_config = timely_config(&options.cluster, threads)?;
    if options.cluster.processes > 1 {
        crate::cluster::exit_on_lost_peer(&options.cluster)?;
    }
    let checkpoints = checkpointing::prepare(&mut job, options.restore)?;
    checkpointing::fence_removed_sinks(&job, checkpoints.as_ref(), options.cluster.process)?;
    let on_commit = group_offsets_hook(&job, checkpoints.is_some())?;
    // Processes choose their checkpoint on their own: a cluster checks they chose alike.
    let start = (options.cluster.processes > 1).then(|| {
        let restore = checkpoints.as_ref().and_then(|c| c.restore.as_ref());
        StartPoint::of(&job, options.cluster.process, restore.map(|m| m.epoch.0))
    });
    let metrics = Arc::new(JobMetrics::default());
    if job.source.bounded {
        metrics.latency.set_bounded_replay();
    }
    let alerts = job.score.as_ref().map(|s| s.alerts).unwrap_or_default();
    let score_counters = Arc::new(ScoreCounters::new(alerts));
    let serving = Arc::default();
    if checkpoints.as_ref().is_some_and(|c| c.restore.is_some()) {
        metrics.checkpoints.restores.inc();
    }
    let process = options.cluster.process;
    let counters = (&metrics, &score_counters);
    let server = options
        .metrics_addr
        .map(|addr| metrics_server::serve_run(addr, &job, process, counters, &serving))
        .transpose()?;
    let readiness = server.as_ref().map(|(_, readiness)| readiness.clone());
    let alignment = SourceAlignment::for_tick(crate::plan::millis::millis(job.runtime.tick));
    let plan = JobPlan {
        mode,
        job,
        metrics: metrics.clone(),
        stop,
        checkpoints,
        model_versions,
        on_commit,
        score_counters: score_counters.clone(),
        backlog: ScoreBacklog::default(),
        alignment,
        range_claims: RangeClaims::default(),
        serving,
    };
    let started = Instant::now();
    // Until the workers are joined below.
    let progress = options
        .progress
        .then(|| Progress::start(metrics.clone()))
        .transpose()
        .context("cannot start the progress reporter")?;
    // Dropped once `cluster::connect` has connected the cluster (or failed to).
    let connecting = match plan.job.runtime.connect_timeout {
        Some(timeout) if options.cluster.processes > 1 => {
            Some(connect_watchdog(timeout, options.cluster.processes)?)
        }
        _ => None,
    };
    let (allocators, network) = crate::cluster::connect(timely_config.communication)?;
    drop(connecting);
    let guards =
        timely::execute::execute_from(allocators, network, timely_config.worker, move |worker| {
            // A worker that panics leaves its peers waiting for its capabilities forever (the
            // process would look alive and do nothing): the process exits instead, non-zero, so a
            // supervisor restarts it from the last checkpoint. The panic message is already out.
            // In a cluster, a process whose connection to a peer breaks exits with
            // `cluster::PEER_LOST_EXIT` before its workers get here.
            let index = worker.index();
            let ready = readiness.as_deref();
            let run =
                std::panic::AssertUnwindSafe(|| run_worker(worker, &plan, start.clone(), ready));
            let Ok(outcome) = std::panic::catch_unwind(run) else {
                let hint = if start.is_some() {
                    " (in a cluster this is usually another process that stopped, or the network \
                 between them: see any `timely communication error` above)"
                } else {
                    ""
                };
                tracing::error!("worker {index} panicked{hint}; stopping the process");
                eprintln!("error: worker {index} panicked{hint}; stopping the process");
                std::process::exit(101);
            };
            outcome
        })
        .map_err(|e| anyhow!("cannot start Timely workers: {e}"));
    let guards = guards?;
    let mut cluster = None;
    // `join` also joins Timely's network threads: every connection is closed cleanly here.
    for result in guards.join() {
        match result.map_err(|e| anyhow!("a worker failed: {e}"))? {
            Ok(totals) => cluster = cluster.or(totals),
            Err(StartRefused(disagreement)) => {
                tracing::error!("{disagreement}");
                eprintln!("error: {disagreement}");
                std::process::exit(2);
            }
        }
    }
    drop(progress);
    let mut summary = summarize(&metrics, &score_counters, started.elapsed());
    summary.cluster = cluster.map(|totals| (options.cluster.process, totals));
    if mode == Mode::Score {
        summary.models.log();
    }
    let read_failures = JobMetrics::get(&metrics.source_read_failures);
    if read_failures > 0 {
        return Err(anyhow!(
            "the input could not be read ({read_failures} read errors, logged above); the job stopped without finishing its windows\n{}",
            summary.render()
        ));
    }
    if summary.delivery_failures > 0 {
        return Err(anyhow!(
            "{} records could not be delivered to Kafka\n{}",
            summary.delivery_failures,
            summary.render()
        ));
    }
    Ok(summary)
}

/// Exits the process (status 2) unless the sender it returns is dropped within `timeout`: the
/// processes of a cluster connect inside `timely::execute`, which waits for a peer that never
/// starts forever; a supervisor needs an exit to act on.
fn connect_watchdog(timeout: Duration, processes: usize) -> Result<mpsc::Sender<()>> {
    let (connecting, watched) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("weir-connect-watchdog".to_owned())
        .spawn(move || {
            if watched.recv_timeout(timeout) == Err(mpsc::RecvTimeoutError::Timeout) {
                let message = format!(
                    "the {processes} processes of this run did not all connect within [runtime] connect_timeout = {} ms: start every process with the same --processes and --hosts file, and check that each can reach the others' host:port; exiting",
                    timeout.as_millis()
                );
                tracing::error!("{message}");
                eprintln!("error: {message}");
                std::process::exit(2);
            }
        })
        .context("cannot start the connection watchdog")?;
    Ok(connecting)
}

/// Why the processes of a cluster did not start: they would start from different points
/// (`start_agreement`), with the explanation every process prints.
struct StartRefused(String);

/// One Timely worker: checks that every process starts from the same point (clusters), builds
/// the dataflow and steps it until it completes; a cluster's workers then gather every
/// process's counts.
fn run_worker(
    worker: &mut timely::worker::Worker,
    plan: &JobPlan,
    start: Option<StartPoint>,
    readiness: Option<&Readiness>,
) -> Result<Option<ClusterTotals>, StartRefused> {
    if let Some(mine) = &start {
        // Every worker of every process sees the same start points: all stop alike. The
        // worker returns rather than exiting, so that Timely's network threads send the last
        // progress messages and close the connections cleanly: a process that exited here
        // could leave a peer still waiting for them, which would then report a lost peer.
        start_agreement::agree(worker, mine.clone()).map_err(StartRefused)?;
    }
    let built = worker.dataflow::<Tick, _, _>(|scope| pipeline::build(scope, plan));
    if let Err(error) = built {
        // Preflight makes this rare. A worker that cannot build would stall its peers
        // forever, so the process exits (a supervisor restarts it from the last checkpoint).
        tracing::error!(
            "worker {} could not build the dataflow: {error:#}",
            worker.index()
        );
        eprintln!(
            "error: worker {} could not build the dataflow: {error:#}",
            worker.index()
        );
        std::process::exit(2);
    }
    if let Some(readiness) = readiness {
        readiness.workers_built.fetch_add(1, Ordering::Release);
    }
    while worker.step_or_park(Some(Duration::from_millis(20))) {}
    Ok(start.map(|s| cluster_totals::gather(worker, s.process, s.workers, &plan.metrics)))
}

/// After each checkpoint, commits the source offsets to the job's consumer group (Kafka
/// sources with checkpoints only).
fn group_offsets_hook(job: &CompiledJob, checkpoints: bool) -> Result<Option<CommitHook>> {
    let Some(kafka) = job.source.kafka().filter(|_| checkpoints) else {
        return Ok(None);
    };
    let topic = kafka.topic.clone();
    let committer = GroupOffsets::new(&kafka.properties, &topic)?;
    Ok(Some(Arc::new(move |manifest: &Manifest| {
        if let Some(partitions) = manifest.sources.get(&topic) {
            committer.commit(partitions);
        }
    })))
}

/// Fails fast, with a clear message, on anything that would stop workers from building
/// (`weir validate` runs the same checks to the end, [`crate::validate`]). Returns the model's
/// version by model name.
fn preflight(job: &CompiledJob, mode: Mode) -> Result<BTreeMap<String, String>> {
    preflight::input_files(job)?;
    if mode == Mode::FeaturesOnly {
        return Ok(BTreeMap::new());
    }
    let versions = preflight::models(job)?;
    if let Some(check) = &job.topic_check {
        let partitions = preflight::topic_partitions(check)?;
        if let Some(warning) = preflight::idle_source_instances(job, &partitions) {
            tracing::warn!("{warning}");
            eprintln!("warning: {warning}");
        }
    }
    Ok(versions)
}
