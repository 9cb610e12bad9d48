//! Benchmark S (issue #18): the whole scoring job, file → features → ONNX → file, for the
//! XGBoost, LightGBM and MLP models, against a same-run baseline of raw ONNX Runtime scoring
//! the same feature rows on as many threads.
//!
//! Run: `WEIR_ORT_LIB=… cargo bench --bench score_job` (or `scripts/bench.sh S`, which writes
//! its section of BENCHMARKS.md). Optional: `WEIR_BENCH_S_EVENTS` (default 1 000 000),
//! `WEIR_BENCH_S_KEYS` (default 50 000), `WEIR_BENCH_S_ROUNDS` (default 3: every case runs
//! that many times, in turn, and the table holds each figure's median), `WEIR_BENCH_S_OUT`
//! (the markdown table, default `<target dir>/bench-results/S.md`), `WEIR_BENCH_S_TICK_MS`
//! (the job's `[runtime] tick`, default `features`' 2 ms), `WEIR_BENCH_S_MODELS`
//! (`label=dir,…`: the models to run instead of the committed three; `scripts/bench.sh SP`
//! passes production-sized ones). One case alone:
//! `WEIR_BENCH_S_CASE=job:mlp target/release/deps/score_job-*` (or `features`, `raw_ort:xgboost`, …; `raw_ort` needs the
//! rows `features` writes).
//!
//! Input: F's clickstream file (`weir gen`, seed 42), one event every 50 ms of event time on
//! average over 50 000 users, so nearly every event is a window of its own. The job is
//! `jobs/clickstream.toml` as shipped (tumbling 1 m, 8 features, 2 workers, every stage on
//! both, micro-batches of at most 256 rows, 1 intra-op thread per inference thread) with
//! `[model] path` set to each model, reading the file (split into `[source] range_bytes` ranges) and writing
//! score records to a JSON Lines file: `weir run --input-file … --output-file …`, at the tick
//! of a features run (`FEATURES_TICK_MS`, 2 ms; the job file says 100 ms).
//!
//! - `features`: the same job without its model (`weir features`), which also writes the
//!   feature rows the baseline scores: the part of the job's time that is not scoring.
//! - `raw_ort`: the rows of `features` in batches of 256, read and converted to `f64` before
//!   the clock starts; 2 threads (one per score instance of the job), each with a plain `ort`
//!   session of 1 intra-op thread that converts its batches to `f32` (default, clip, scale)
//!   and runs them, every other batch each (`benches/score_common`'s `RawOrt`). The last
//!   partial batch is left out.
//!
//! Every case runs in a child process of its own (this binary again), for its own CPU time and
//! peak resident memory. Ratios are throughputs (rows per second of wall time) against
//! `raw_ort` of the same model in this run, and against `features`: how much of the job's
//! rate scoring costs. Host steal: as in F (`benches/features_file.rs`), the share of the
//! machine's CPU ticks the hypervisor took while the case ran.

#[path = "results/mod.rs"]
mod results;

#[path = "case_process/mod.rs"]
mod case_process;

mod score_common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Barrier};

use anyhow::{ensure, Context, Result};
use case_process::{
    clickstream_job, env_or, input_from_env, median_rounds, run_case, scratch, CaseClock, Scratch,
};
use score_common::{models, RawOrt, BATCH_ROWS};
use serde::Deserialize;

const CASE_VAR: &str = "WEIR_BENCH_S_CASE";
/// The job's default window (`jobs/clickstream.toml`).
const WINDOW: &str = "kind = \"tumbling\"\nsize = \"1m\"";
/// Threads of the baseline: one per score instance of the job (2 workers).
const RAW_THREADS: usize = 2;

/// The feature rows `features` writes for the baseline, kept beside the input.
fn rows_path(input: &Path) -> PathBuf {
    input.with_extension("rows.jsonl")
}

/// The models of this run, (label, directory): `WEIR_BENCH_S_MODELS` (`label=dir,…`), else
/// the three committed ones.
fn run_models() -> Result<Vec<(String, PathBuf)>> {
    let Ok(list) = std::env::var("WEIR_BENCH_S_MODELS") else {
        return Ok(models()
            .into_iter()
            .map(|(label, dir)| (label.to_owned(), dir))
            .collect());
    };
    list.split(',')
        .map(|item| {
            let (label, dir) = item
                .split_once('=')
                .with_context(|| format!("WEIR_BENCH_S_MODELS: `{item}` is not label=dir"))?;
            Ok((label.trim().to_owned(), PathBuf::from(dir.trim())))
        })
        .collect()
}

fn model_dir(label: &str) -> Result<PathBuf> {
    run_models()?
        .into_iter()
        .find(|(l, _)| l == label)
        .map(|(_, dir)| dir)
        .with_context(|| format!("no model {label}"))
}

/// The features-only run (the rows to `rows_path`); returns the rows written.
fn features(input: &Path, out: &Scratch) -> Result<u64> {
    let job = clickstream_job(WINDOW)?;
    let summary = weir::features_cmd::compute_features(
        job,
        vec![input.to_path_buf()],
        rows_path(input),
        Some(out.join("dead.jsonl")),
    )?;
    ensure!(
        summary.dead_letters_total() == 0,
        "dead letters: {summary:?}"
    );
    Ok(summary.rows_written)
}

/// The whole job scoring with the model `label`; returns the rows scored.
fn job(input: &Path, label: &str, out: &Scratch) -> Result<u64> {
    let mut job = clickstream_job(WINDOW)?;
    let model = job
        .model
        .as_mut()
        .context("clickstream.toml has a [model]")?;
    model.path = Some(model_dir(label)?);
    job.runtime.tick = match std::env::var("WEIR_BENCH_S_TICK_MS") {
        Ok(ms) => ms.parse()?,
        // `features`' tick, so that the two runs differ only by the model.
        Err(_) => job.runtime.tick.min(weir::features_cmd::FEATURES_TICK_MS),
    };
    job.use_input_files(vec![input.to_path_buf()]);
    job.use_output_file(out.join("scores.jsonl"), Some(out.join("dead.jsonl")));
    let summary = weir::run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    ensure!(
        summary.dead_letters_total() == 0 && summary.inference_errors == 0,
        "dead letters or inference errors: {summary:?}"
    );
    ensure!(
        summary.scores == summary.windows_fired,
        "{} scores of {} windows",
        summary.scores,
        summary.windows_fired
    );
    Ok(summary.scores)
}

/// A feature row as `weir features` writes it (missing values are null).
#[derive(Deserialize)]
struct RowLine {
    features: Vec<Option<f64>>,
}

/// The rows of `rows_path`, in batches of [`BATCH_ROWS`] rows side by side (missing: NaN).
fn row_batches(path: &Path) -> Result<Vec<Vec<f64>>> {
    let reader = BufReader::new(
        fs::File::open(path)
            .with_context(|| format!("{} (run the `features` case first)", path.display()))?,
    );
    let mut batches = vec![];
    let mut batch = Vec::new();
    for line in reader.lines() {
        let row: RowLine = serde_json::from_str(&line?)?;
        batch.extend(row.features.iter().map(|x| x.unwrap_or(f64::NAN)));
        if batch.len() == BATCH_ROWS * row.features.len() {
            batches.push(std::mem::take(&mut batch));
        }
    }
    Ok(batches)
}

/// The baseline: [`RAW_THREADS`] raw sessions scoring every other batch each, timed from when
/// all have loaded; prints its figures.
fn raw_ort(input: &Path, label: &str) -> Result<()> {
    let dir = model_dir(label)?;
    let batches = Arc::new(row_batches(&rows_path(input))?);
    let ready = Arc::new(Barrier::new(RAW_THREADS + 1));
    let threads: Vec<_> = (0..RAW_THREADS)
        .map(|t| {
            let (dir, batches, ready) = (dir.clone(), batches.clone(), ready.clone());
            std::thread::spawn(move || {
                let mut raw = RawOrt::load(&dir);
                raw.score(&batches[0]);
                ready.wait();
                let mut sum = 0.0f32;
                for values in batches.iter().skip(t).step_by(RAW_THREADS) {
                    sum += raw.score(values);
                }
                std::hint::black_box(sum);
            })
        })
        .collect();
    ready.wait();
    let clock = CaseClock::start();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a raw thread panicked"))?;
    }
    clock.report((batches.len() * BATCH_ROWS) as u64);
    Ok(())
}

/// Runs one case in this process (the child side).
fn case(name: &str, input: &Path) -> Result<()> {
    match name.split_once(':') {
        None if name == "features" => {
            let out = scratch("s", "features");
            run_case(|| features(input, &out))
        }
        Some(("job", label)) => {
            let out = scratch("s", label);
            run_case(|| job(input, label, &out))
        }
        Some(("raw_ort", label)) => raw_ort(input, label),
        _ => anyhow::bail!("no case {name}"),
    }
}

fn main() -> Result<()> {
    let (events, keys, input) = input_from_env("WEIR_BENCH_S")?;
    if let Ok(name) = std::env::var(CASE_VAR) {
        return case(&name, &input);
    }
    // `features` first in each round: `raw_ort` scores the rows it writes.
    let rounds = env_or("WEIR_BENCH_S_ROUNDS", 3_usize).max(1);
    let models = run_models()?;
    let mut cases = vec!["features".to_owned()];
    for (label, _) in &models {
        cases.extend([format!("raw_ort:{label}"), format!("job:{label}")]);
    }
    let medians = median_rounds(CASE_VAR, &cases, rounds, |_, _| Ok(()))?;
    let (features, pairs) = medians
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no cases"))?;
    let mut table = format!(
        "Input: {events} events over {keys} keys; {} feature rows, each scored once. M rows/s of \
         wall time (per core: of CPU time); ratios against `raw_ort` of the same model in this run; \
         each figure the median of {rounds} rounds (every case in turn).\n\n\
         | model | case | wall s | wall M rows/s | per core M rows/s | / raw_ort | / `features` | peak RSS MB | host steal % |\n\
         |---|---|---|---|---|---|---|---|---|\n\
         | – | `features` (the job without its model) | {:.2} | {:.2} | {:.2} | – | 1 | {:.0} | {} |\n",
        features.items,
        features.wall_s,
        features.rate(),
        features.per_core(),
        features.peak_rss_mb,
        features.ticks.steal_cell()
    );
    for ((label, _), pair) in models.iter().zip(pairs.chunks(2)) {
        let [raw, job] = pair else {
            anyhow::bail!("{label}: a case has no runs");
        };
        ensure!(
            job.items == features.items,
            "{label}: the job scored {} rows, features wrote {}",
            job.items,
            features.items
        );
        for (name, f) in [("`raw_ort`, 2 threads", raw), ("job", job)] {
            table.push_str(&format!(
                "| {label} | {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {} |\n",
                f.wall_s,
                f.rate(),
                f.per_core(),
                f.rate() / raw.rate(),
                f.rate() / features.rate(),
                f.peak_rss_mb,
                f.ticks.steal_cell()
            ));
        }
    }
    results::write_table("WEIR_BENCH_S_OUT", "S", &table)?;
    Ok(())
}
