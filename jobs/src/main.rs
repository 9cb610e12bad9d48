//! `weir`: run a streaming ML job, generate events, compute features over files, manage topics.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use weir::config::JobFile;
use weir::plan::MetricsPlan;

/// jemalloc, with transparent huge pages for blocks of 2 MiB and more (window state's large
/// tables) and small pages for the rest ([`weir::allocator`]). Override jemalloc's options at
/// run time with `_RJEM_MALLOC_CONF`, e.g. `thp:always` for huge pages everywhere.
#[global_allocator]
static ALLOCATOR: weir::allocator::JobAllocator = weir::allocator::JobAllocator;

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "Kafka → event-time window features → ONNX scores → Kafka"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a job file.
    Run(RunArgs),
    /// Check a job file, its model, brokers, topics and checkpoint store; list every problem.
    Validate(weir::validate::ValidateArgs),
    /// Score a range of history with two model versions and report how their scores differ.
    Replay(weir::replay::ReplayArgs),
    /// Generate a deterministic clickstream to Kafka or a JSON Lines file.
    Gen(weir::gen::GenArgs),
    /// Compute a job's features over a JSON Lines file (training sets, replays).
    Features(FeaturesArgs),
    /// Create the topics a job needs.
    Topics(TopicsArgs),
    /// Re-send dead letters of chosen reasons to the job's source topic (after a fix).
    ReplayDlq(ReplayDlqArgs),
    /// Start a local cluster of N processes of a job (development): hosts file, `[p<i>]` log
    /// prefixes, Ctrl-C to all; `--supervise` restarts them all when one fails.
    Launch(weir::launch::LaunchArgs),
    /// Run a command (one `weir run` process of a cluster) and restart it when it fails, with
    /// backoff and a restart limit.
    Supervise(weir::supervise::SuperviseArgs),
    /// List or inspect the checkpoints in a checkpoint directory or `s3://bucket/prefix`.
    Checkpoints {
        #[command(subcommand)]
        action: CheckpointsAction,
    },
}

#[derive(Subcommand, Debug)]
enum CheckpointsAction {
    /// One line per epoch: status, files, size.
    List {
        /// The checkpoint directory, or `s3://bucket/prefix`.
        dir: PathBuf,
    },
    /// Everything a manifest records: offsets, watermarks, parallelism, models, files.
    Inspect {
        /// The checkpoint directory, or `s3://bucket/prefix`.
        dir: PathBuf,
        /// Only this epoch.
        #[arg(long)]
        epoch: Option<u64>,
    },
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The job file (TOML).
    job: PathBuf,
    /// Timely worker threads (overrides [runtime] workers).
    #[arg(long)]
    workers: Option<usize>,
    /// Per-stage parallelism, e.g. `source=2,window=4,score=1,sink=1`.
    #[arg(long)]
    parallelism: Option<String>,
    /// Stop at the end offsets seen at start and flush all windows.
    #[arg(long)]
    bounded: bool,
    /// Where to start when there is no checkpoint (overrides [source] start): `earliest`,
    /// `latest`, an RFC 3339 time (`2026-11-30T12:00:00Z`: the first record at or after it,
    /// per partition) or offsets per partition (`0:1200,1:900`). A checkpoint to restore
    /// wins (use `--restore none` to start fresh).
    #[arg(long, value_name = "TIME|OFFSETS")]
    from: Option<weir_kafka::StartFrom>,
    /// Kafka bootstrap servers (overrides [kafka] bootstrap.servers).
    #[arg(long)]
    brokers: Option<String>,
    /// Read these JSON Lines files (plain, gzip or zstd) instead of the job's source (bounded).
    #[arg(long = "input-file", value_name = "FILE")]
    input_files: Vec<PathBuf>,
    /// Write scores to this JSON Lines file instead of the job's sink.
    #[arg(long = "output-file", value_name = "FILE")]
    output_file: Option<PathBuf>,
    /// Dead letters file for --output-file (default: <output-file>.dead-letters.jsonl).
    #[arg(
        long = "dead-letter-file",
        value_name = "FILE",
        requires = "output_file"
    )]
    dead_letter_file: Option<PathBuf>,
    /// Path of libonnxruntime.so (default: WEIR_ORT_LIB, then .cache/onnxruntime/ above the binary or cwd).
    #[arg(long)]
    ort_lib: Option<PathBuf>,
    /// Where this process serves /metrics, /healthz and /readyz: HOST:PORT or `off`
    /// (overrides [metrics] listen, used as given in every process of a cluster).
    #[arg(long, value_name = "HOST:PORT|off", env = "WEIR_METRICS_ADDR")]
    metrics_addr: Option<String>,
    /// Checkpoint to start from: `latest`, an epoch number, `none` (start fresh) or `auto`
    /// (the default: the newest valid checkpoint if there is one).
    #[arg(long, default_value = "auto")]
    restore: weir::checkpointing::RestoreChoice,
    /// Checkpoint directory (overrides [checkpoint] dir; turns checkpoints on).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Checkpoint interval, e.g. `10s` (overrides [checkpoint] interval).
    #[arg(long, value_name = "DURATION")]
    checkpoint_interval: Option<String>,
    /// Processes of a multi-process run (overrides [runtime] processes).
    #[arg(long)]
    processes: Option<usize>,
    /// This process's index (0..processes).
    #[arg(long, default_value_t = 0)]
    process: usize,
    /// Hosts file of a multi-process run: one host:port per process, process 0 first.
    #[arg(long, value_name = "FILE")]
    hosts: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct FeaturesArgs {
    /// The job file whose features to compute.
    job: PathBuf,
    /// JSON Lines input files, plain, gzip or zstd (one event per line; large plain files are
    /// split into byte ranges read by every worker).
    #[arg(long, required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// JSON Lines output (one row per key, window and revision).
    #[arg(long)]
    output: PathBuf,
    /// Dead letters (default: <output>.dead-letters.jsonl).
    #[arg(long)]
    dead_letters: Option<PathBuf>,
    /// Timely worker threads (overrides [runtime] workers).
    #[arg(long)]
    workers: Option<usize>,
}

#[derive(clap::Args, Debug)]
struct TopicsArgs {
    /// The job file whose source, score and dead-letter topics to create.
    job: PathBuf,
    /// Partitions of the source topic (outputs get the same count).
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Replicas of each partition (at most the number of brokers; 3 is usual in production).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
    replication_factor: i32,
    /// Kafka bootstrap servers (overrides [kafka] bootstrap.servers).
    #[arg(long)]
    brokers: Option<String>,
}

#[derive(clap::Args, Debug)]
struct ReplayDlqArgs {
    /// The job file whose dead-letter topic to read and source topic to write.
    job: PathBuf,
    /// Reasons to re-send, comma-separated (e.g. `late,inference_failed`).
    #[arg(long = "reason", value_delimiter = ',', required = true)]
    reasons: Vec<weir_features::dead_letter::DeadLetterReason>,
    /// Write to this topic instead of the job's source topic.
    #[arg(long)]
    to_topic: Option<String>,
    /// Count what would be re-sent; send nothing.
    #[arg(long)]
    dry_run: bool,
    /// Kafka bootstrap servers (overrides [kafka] bootstrap.servers).
    #[arg(long)]
    brokers: Option<String>,
}

/// Refuses reasons whose letters are not source records: re-sent to the source topic they
/// would only be dead-lettered again.
fn only_source_records(reasons: &[weir_features::dead_letter::DeadLetterReason]) -> Result<()> {
    if let Some(reason) = reasons.iter().find(|r| !r.carries_source_record()) {
        anyhow::bail!(
            "{} letters are not source records (inference_failed: feature rows, undeliverable: output records); re-sending them to the source topic would only dead-letter them again: give --to-topic",
            reason.as_str()
        );
    }
    Ok(())
}

/// `weir replay-dlq`: reads the dead-letter topic up to its end at start (so it never reads
/// what it re-sends) and prints the letters re-sent and skipped per reason.
fn replay_dlq(args: ReplayDlqArgs) -> Result<()> {
    let job = JobFile::load_with_brokers(&args.job, args.brokers.as_deref())?;
    if args.to_topic.is_none() {
        only_source_records(&args.reasons)?;
    }
    let to_topic = args.to_topic.unwrap_or_else(|| job.source.topic.clone());
    anyhow::ensure!(
        !to_topic.is_empty(),
        "the job reads no Kafka topic ([source] topic); give --to-topic"
    );
    anyhow::ensure!(
        to_topic != job.sink.dead_letter_topic,
        "--to-topic {to_topic} is the dead-letter topic itself: re-sending there only duplicates the letters"
    );
    let request = weir_kafka::dlq_replay::ReplayRequest {
        properties: job.kafka.clone(),
        dead_letter_topic: job.sink.dead_letter_topic.clone(),
        to_topic: to_topic.clone(),
        reasons: args.reasons.into_iter().collect(),
        dry_run: args.dry_run,
    };
    let report = weir_kafka::dlq_replay::replay_dead_letters(&request)?;
    let verb = if args.dry_run {
        "would re-send"
    } else {
        "re-sent"
    };
    for (reason, n) in &report.resent {
        println!("{verb} {n} {reason} letter(s) to {to_topic}");
    }
    for (reason, n) in &report.truncated {
        println!(
            "skipped {n} {reason} letter(s) cut to fit the dead-letter topic (original bytes lost)"
        );
    }
    for (reason, n) in &report.skipped {
        println!("skipped {n} {reason} letter(s) (reason not chosen)");
    }
    let total: u64 = report.resent.values().sum();
    println!(
        "{verb} {total} letter(s) from {}",
        job.sink.dead_letter_topic
    );
    Ok(())
}

fn run(args: RunArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let on_signal = stop.clone();
    // Ctrl-C, SIGTERM (what Kubernetes sends) and SIGHUP stop reading and let the sinks flush;
    // no window is flushed as if the input were complete. A second signal exits at once.
    // Installed first, so that a signal during the checks before the run (S3 retries, the
    // transaction fence, the topic check) is a clean stop, not the default termination.
    ctrlc::set_handler(move || {
        if on_signal.swap(true, Ordering::SeqCst) {
            eprintln!("second stop signal: exiting without waiting for output to flush");
            std::process::exit(130);
        }
        eprintln!("stop signal: the sources stop reading; waiting for output to flush (signal again to exit now)");
    })
    .context("cannot install the stop-signal handler")?;
    let mut job = JobFile::load_with_brokers(&args.job, args.brokers.as_deref())?;
    if let Some(workers) = args.workers {
        job.runtime.workers = workers;
    }
    if let Some(flags) = &args.parallelism {
        job.override_parallelism(flags)?;
    }
    if args.bounded {
        job.source.bounded = true;
    }
    if let Some(start) = &args.from {
        job.source.start = start.clone();
    }
    if !args.input_files.is_empty() {
        job.use_input_files(args.input_files.clone());
    }
    if let Some(output) = &args.output_file {
        job.use_output_file(output.clone(), args.dead_letter_file.clone());
    }
    if let Some(processes) = args.processes {
        job.runtime.processes = processes;
    }
    job.override_checkpoints(
        args.checkpoint_dir.clone(),
        args.checkpoint_interval.as_deref(),
    )?;
    let metrics_addr = MetricsPlan::parse(&job.metrics.listen, "[metrics] listen")?.for_process(
        args.metrics_addr.as_deref(),
        args.process,
        job.runtime.processes,
    )?;
    let options = weir::run::RunOptions {
        metrics_addr,
        progress: true,
        restore: args.restore,
        cluster: weir::cluster::ClusterArgs {
            processes: job.runtime.processes,
            process: args.process,
            hosts: args.hosts.clone(),
        },
    };
    let job = job.compile()?;
    let library = weir_score::init_onnx_runtime(args.ort_lib.as_deref())?;
    tracing::info!(library = %library.display(), "ONNX Runtime loaded");
    let bounded = job.source.bounded;
    let summary = weir::run::run_job_with(job, weir::pipeline::Mode::Score, stop, &options)?;
    println!("{}", summary.render());
    let stopped = summary.sources_stopped_in_run();
    if bounded && stopped > 0 {
        // A script running a backfill must not take an interrupted run for a finished one.
        bail!(
            "stopped by a signal before the end of the bounded input ({} source instance(s) had not finished): the windows still open were not flushed and are missing from the output; run again to finish (with checkpoints it resumes from the last one)",
            stopped
        );
    }
    Ok(())
}

fn features(args: FeaturesArgs) -> Result<()> {
    let mut job = JobFile::load(&args.job)?;
    if let Some(workers) = args.workers {
        job.runtime.workers = workers;
        job.parallelism = Default::default();
    }
    let summary = weir::features_cmd::compute_features(
        job,
        args.input,
        args.output.clone(),
        args.dead_letters,
    )?;
    eprintln!(
        "{} records read, {} events, {} dead letters, {} rows written to {}",
        summary.records_in,
        summary.events_in,
        summary.dead_letters_total(),
        summary.rows_written,
        args.output.display()
    );
    Ok(())
}

fn checkpoints(action: CheckpointsAction) -> Result<()> {
    let (dir, epoch, detailed) = match action {
        CheckpointsAction::List { dir } => (dir, None, false),
        CheckpointsAction::Inspect { dir, epoch } => (dir, epoch, true),
    };
    if !weir_checkpoint::is_object_store_url(&dir) && !dir.is_dir() {
        anyhow::bail!("{} is not a checkpoint directory", dir.display());
    }
    let store = weir_checkpoint::open_store(&dir)?;
    let summaries = weir_checkpoint::inspect(store.as_ref())?;
    if summaries.is_empty() {
        println!("no checkpoints in {}", dir.display());
    }
    for summary in summaries
        .iter()
        .filter(|s| epoch.is_none_or(|e| s.epoch.0 == e))
    {
        if detailed {
            println!("{summary}");
        } else {
            println!("{}", summary.line());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,ort=warn,librdkafka=warn".into()),
        )
        .with_writer(weir::progress::log_writer)
        // Colours only for a person reading a terminal: a log file or collector gets the
        // plain text of each line, not escape codes.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Launch(args) => return exit_with(weir::launch::launch(&args)),
        Command::Supervise(args) => return exit_with(weir::supervise::supervise(&args)),
        Command::Run(args) => run(args),
        Command::Validate(args) => weir::validate::report(&weir::validate::validate(&args)),
        Command::Replay(args) => {
            weir::replay::replay(&args).map(|report| println!("{}", report.render()))
        }
        Command::Gen(args) => weir::gen::run(&args).map(|_| ()),
        Command::Features(args) => features(args),
        Command::Checkpoints { action } => checkpoints(action),
        Command::ReplayDlq(args) => replay_dlq(args),
        Command::Topics(args) => JobFile::load_with_brokers(&args.job, args.brokers.as_deref())
            .and_then(|job| {
                for topic in [
                    &job.source.topic,
                    &job.sink.topic,
                    &job.sink.dead_letter_topic,
                ] {
                    weir_kafka::admin::ensure_replicated_topic(
                        &job.kafka,
                        topic,
                        args.partitions,
                        args.replication_factor,
                    )?;
                    println!("topic {topic} ready");
                }
                Ok(())
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The exit status a supervising command (`weir launch`, `weir supervise`) chose, or 1 when
/// it could not run.
fn exit_with(status: Result<i32>) -> ExitCode {
    match status {
        Ok(status) => ExitCode::from(u8::try_from(status).unwrap_or(1)),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use weir_features::dead_letter::DeadLetterReason;

    #[test]
    fn replaying_feature_rows_or_outputs_to_the_source_topic_is_refused() {
        let source = [DeadLetterReason::Malformed, DeadLetterReason::Late];
        assert!(super::only_source_records(&source).is_ok());
        for reason in [
            DeadLetterReason::InferenceFailed,
            DeadLetterReason::Undeliverable,
        ] {
            let refused = super::only_source_records(&[DeadLetterReason::Late, reason]);
            let message = refused.expect_err("refused").to_string();
            assert!(
                message.contains(reason.as_str()) && message.contains("--to-topic"),
                "{message}"
            );
        }
    }
}
