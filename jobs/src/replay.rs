//! `weir replay job.toml --from … --to … --model A --model B`: the gray-release step. Scores a
//! bounded range of history (a Kafka topic between two times or offsets, or JSON Lines files)
//! with two model versions side by side — the job's own pipeline with A as the primary and B
//! as its shadow, so both score exactly the same windows — and reports how B's scores differ
//! from A's ([`crate::score_compare`]). It writes only to files of its own (kept with
//! `--keep DIR`), never to the job's topics, and neither restores nor writes checkpoints nor
//! commits consumer-group offsets.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use weir_kafka::StartFrom;
use weir_score::psi::ScoreBins;
use weir_score::ModelManifest;

use crate::config::JobFile;
use crate::pipeline::Mode;
use crate::plan::SourceInput;
use crate::run::{run_job_in, RunSummary};
use crate::score_compare::ScoreComparison;

/// `weir replay`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The job file (TOML) whose source, features and windows to replay.
    pub job: PathBuf,
    /// The two model directories to compare: `--model A --model B` (B is compared with A).
    #[arg(long = "model", num_args = 1, required = true)]
    pub models: Vec<PathBuf>,
    /// Where the Kafka replay starts: `earliest` (default), an RFC 3339 time or offsets per
    /// partition (`0:1200,1:900`).
    #[arg(long, value_name = "TIME|OFFSETS")]
    pub from: Option<StartFrom>,
    /// Where the Kafka replay stops (before this time or these offsets; default: the end of
    /// each partition when the replay starts).
    #[arg(long, value_name = "TIME|OFFSETS")]
    pub to: Option<StartFrom>,
    /// Replay these JSON Lines files instead of the job's Kafka source (whole files).
    #[arg(long = "input-file", value_name = "FILE")]
    pub input_files: Vec<PathBuf>,
    /// Decision threshold for the agreement figure.
    #[arg(long, default_value_t = 0.5)]
    pub threshold: f64,
    /// Keep the replay's score and dead-letter files in this directory (default: a
    /// temporary directory, removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Kafka bootstrap servers (overrides [kafka] bootstrap.servers).
    #[arg(long)]
    pub brokers: Option<String>,
    /// Timely worker threads (overrides [runtime] workers).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Path of libonnxruntime.so (as for `weir run`).
    #[arg(long)]
    pub ort_lib: Option<PathBuf>,
}

/// What a replay found.
#[derive(Debug)]
pub struct ReplayReport {
    /// The replay run's summary (records read, windows, dead letters).
    pub run: RunSummary,
    /// The comparison of B with A.
    pub comparison: ScoreComparison,
    /// `name version` of A and of B.
    pub versions: [String; 2],
}

impl ReplayReport {
    /// The run summary and the comparison, for the terminal.
    pub fn render(&self) -> String {
        format!(
            "{}\n{}",
            self.run.render(),
            self.comparison.render(&self.versions[0], &self.versions[1])
        )
    }
}

/// Runs the replay of `args`.
pub fn replay(args: &ReplayArgs) -> Result<ReplayReport> {
    let [first, second] = match args.models.as_slice() {
        [a, b] => [absolute(a)?, absolute(b)?],
        other => bail!(
            "weir replay compares two model versions: pass --model A --model B (got {} --model)",
            other.len()
        ),
    };
    let versions = [version_of(&first)?, version_of(&second)?];
    let bins = ScoreBins::of(&ModelManifest::load(&first)?.baseline);
    // Removed when the replay returns, unless the files are to be kept.
    let temporary;
    let dir = match &args.keep {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir.clone()
        }
        None => {
            temporary = tempfile::Builder::new()
                .prefix("weir-replay-")
                .tempdir()
                .context("cannot create a temporary directory")?;
            temporary.path().to_owned()
        }
    };
    let scores = dir.join("scores.jsonl");
    let job = replay_job(
        args,
        first,
        second,
        &scores,
        &dir.join("dead-letters.jsonl"),
    )?;
    weir_score::init_onnx_runtime(args.ort_lib.as_deref())?;
    let run = run_job_in(job, Mode::Score, Arc::new(AtomicBool::new(false)))?;
    let mut comparison = ScoreComparison::new(bins, args.threshold);
    let lines = BufReader::new(
        File::open(&scores).with_context(|| format!("cannot read {}", scores.display()))?,
    );
    for (number, line) in lines.lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", scores.display()))?;
        comparison
            .add_record(line.as_bytes())
            .with_context(|| format!("{} line {}", scores.display(), number + 1))?;
    }
    comparison.tally();
    Ok(ReplayReport {
        run,
        comparison,
        versions,
    })
}

/// The job file turned into the replay: bounded, A primary and B shadow, file outputs, no
/// checkpoints, one process.
fn replay_job(
    args: &ReplayArgs,
    first: PathBuf,
    second: PathBuf,
    scores: &Path,
    dead_letters: &Path,
) -> Result<crate::config::CompiledJob> {
    let mut job = JobFile::load_with_brokers(&args.job, args.brokers.as_deref())?;
    if let Some(workers) = args.workers {
        job.runtime.workers = workers;
    }
    if args.input_files.is_empty() {
        job.source.bounded = true;
        job.source.start = args.from.clone().unwrap_or(StartFrom::Earliest);
    } else {
        if args.from.is_some() || args.to.is_some() {
            bail!("--from and --to select a range of a Kafka topic; a replay of --input-file files reads them whole");
        }
        job.use_input_files(args.input_files.clone());
    }
    let Some(model) = job.model.as_mut() else {
        bail!(
            "{} has no [model] section: weir replay runs the job's scoring stage (its batching and threads) with --model A and B",
            args.job.display()
        );
    };
    model.path = Some(first);
    model.registry = None;
    model.canary = None;
    model.shadow = Some(second);
    job.use_output_file(scores.to_owned(), Some(dead_letters.to_owned()));
    job.checkpoint = None;
    // One process, every stage on every worker (a job sized for a cluster would not fit).
    job.runtime.processes = 1;
    job.parallelism = Default::default();
    let mut compiled = job.compile()?;
    if let SourceInput::Kafka(kafka) = &mut compiled.source.input {
        kafka.stop = args.to.clone();
    }
    Ok(compiled)
}

/// `name version` from a model directory's manifest.
fn version_of(dir: &Path) -> Result<String> {
    let manifest = ModelManifest::load(dir)?;
    Ok(format!("{} {}", manifest.name, manifest.version))
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))
}
