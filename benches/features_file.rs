//! Benchmark F (issue #18): a features-only run, file → file, as a user runs `weir features`,
//! against a same-run baseline that only reads and parses the same file.
//!
//! Run: `cargo bench --bench features_file` (or `scripts/bench.sh F`, which also writes its
//! section of BENCHMARKS.md). Optional: `WEIR_BENCH_F_EVENTS` (default 1 000 000),
//! `WEIR_BENCH_F_KEYS` (default 50 000), `WEIR_BENCH_F_ROUNDS` (default 5: every case runs
//! that many times, in turn, and the table holds each figure's median), `WEIR_BENCH_F_OUT`
//! (the markdown table, default `target/bench-results/F.md`), `WEIR_BENCH_F_RANGE_BYTES`
//! (`[source] range_bytes`; above the file's size, one instance reads it all, as before files
//! were split), `WEIR_BENCH_F_TICK_MS` (`[runtime] tick`; a features run ticks at most every
//! `FEATURES_TICK_MS`, 2 ms, so only a shorter tick changes it), `WEIR_BENCH_F_MAX_BATCH`
//! (`[source] max_batch`, records per source poll). One case alone:
//! `WEIR_BENCH_F_CASE="tumbling 1 m:2" target/release/deps/features_file-*` (or `parse_only`).
//!
//! Input: `weir gen`'s clickstream (seed 42, one event every 50 ms of event time on average,
//! at most 2 s out of order), written once to `target/bench-data/`. The job is
//! `jobs/clickstream.toml`'s 8 features with its window replaced by tumbling 1 m, hopping
//! 5 m / 1 m or session 30 s (max_length 1 h), run by `weir::features_cmd::compute_features` with 1 and 2
//! workers (source and window parallelism = workers, the file split into byte ranges).
//! Baseline: one thread reading the file line by line and deserialising each line into a
//! struct with serde_json, nothing else (`parse_only`).
//!
//! Every case runs in a child process of its own (this binary again), so its resident memory
//! is its own: wall time around the run, CPU time of the whole process
//! (`CLOCK_PROCESS_CPUTIME_ID`: all threads' user + system time, what getrusage reports) and
//! peak resident memory (`VmHWM` of `/proc/self/status`). Per-core throughput = events / CPU
//! seconds. Each ratio is against the baseline measured in the same run. Host steal: of the
//! machine's CPU ticks while a case ran (`/proc/stat`, all its rounds together), the share
//! the hypervisor took (a virtual CPU ready to run while the host ran something else): it
//! slows wall time and not CPU time, so a wall figure read beside a high steal is the
//! host's, not the engine's.

#[path = "results/mod.rs"]
mod results;

#[path = "case_process/mod.rs"]
mod case_process;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;

use case_process::{
    clickstream_job, env_or, input_from_env, median_rounds, run_case, scratch, Scratch,
};
use serde::Deserialize;

/// The job binary's allocator (`weir::allocator`): each case's process holds its state as a
/// job does.
#[global_allocator]
static ALLOCATOR: weir::allocator::JobAllocator = weir::allocator::JobAllocator;

const CASE_VAR: &str = "WEIR_BENCH_F_CASE";
/// Each case's label and `[window]` table (benches/windows/, which scripts/build_pgo.sh's
/// training runs read too).
const WINDOWS: [(&str, &str); 3] = [
    ("tumbling 1 m", include_str!("windows/tumbling.toml")),
    ("hopping 5 m / 1 m", include_str!("windows/hopping.toml")),
    ("session 30 s", include_str!("windows/session.toml")),
];

/// What the baseline parses each line into: the clickstream's fields.
#[derive(Deserialize)]
#[allow(dead_code)]
struct Click {
    user: String,
    ts: i64,
    #[serde(rename = "type")]
    kind: String,
    dwell_ms: f64,
    amount: Option<f64>,
}

fn parse_only(input: &Path) -> anyhow::Result<u64> {
    let mut reader = BufReader::with_capacity(256 * 1024, fs::File::open(input)?);
    let mut line = Vec::new();
    let mut events = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(events);
        }
        let click: Click = serde_json::from_slice(&line)?;
        std::hint::black_box(&click);
        events += 1;
    }
}

fn features(input: &Path, window: &str, workers: usize, out: &Scratch) -> anyhow::Result<u64> {
    let mut job = clickstream_job(window)?;
    job.runtime.workers = workers;
    job.parallelism = Default::default();
    if let Ok(bytes) = std::env::var("WEIR_BENCH_F_RANGE_BYTES") {
        job.source.range_bytes = Some(bytes.parse()?);
    }
    if let Ok(records) = std::env::var("WEIR_BENCH_F_MAX_BATCH") {
        job.source.max_batch = records.parse()?;
    }
    if let Ok(ms) = std::env::var("WEIR_BENCH_F_TICK_MS") {
        job.runtime.tick = ms.parse()?;
    }
    let summary = weir::features_cmd::compute_features(
        job,
        vec![input.to_path_buf()],
        out.join("rows.jsonl"),
        Some(out.join("dead.jsonl")),
    )?;
    anyhow::ensure!(
        summary.dead_letters_total() == 0,
        "dead letters: {summary:?}"
    );
    Ok(summary.events_in)
}

/// Runs one case in this process (the child side).
fn case(case: &str, input: &Path) -> anyhow::Result<()> {
    match case.split_once(':') {
        None => run_case(|| parse_only(input)),
        Some((window, workers)) => {
            let window = WINDOWS.iter().find(|w| w.0 == window).map(|w| w.1);
            let window = window.ok_or_else(|| anyhow::anyhow!("no window {case}"))?;
            let workers = workers.parse()?;
            let out = scratch("f", &format!("features-{workers}"));
            run_case(|| features(input, window, workers, &out))
        }
    }
}

fn main() -> anyhow::Result<()> {
    let (events, keys, input) = input_from_env("WEIR_BENCH_F")?;
    if let Ok(name) = std::env::var(CASE_VAR) {
        return case(&name, &input);
    }
    // `cargo bench` passes `--bench`; anything else is not for this plain `main`.
    let mb = fs::metadata(&input)?.len() as f64 / 1e6;
    let rounds = env_or("WEIR_BENCH_F_ROUNDS", 5_usize).max(1);
    let mut cases = vec!["parse_only".to_owned()];
    for (window, _) in WINDOWS {
        cases.extend([1, 2].map(|workers| format!("{window}:{workers}")));
    }
    let medians = median_rounds(CASE_VAR, &cases, rounds, |case, f| {
        anyhow::ensure!(f.items == events, "{case}: {} of {events} events", f.items);
        Ok(())
    })?;
    let (baseline, cases_medians) = medians
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no cases"))?;
    let mut table = format!(
        "Input: {events} events over {keys} keys ({mb:.0} MB of JSON Lines). M events/s; ratios against `parse_only` of this run; each figure the median of {rounds} rounds (every case in turn).\n\n\
         | case | workers | wall M ev/s | per core M ev/s (CPU time) | wall / baseline | per core / baseline | peak RSS MB | host steal % |\n|---|---|---|---|---|---|---|---|\n\
         | baseline `parse_only` (serde_json into structs, 1 thread) | 1 | {:.2} | {:.2} | 1 | 1 | {:.0} | {} |\n",
        baseline.rate(), baseline.per_core(), baseline.peak_rss_mb, baseline.ticks.steal_cell()
    );
    for (case, f) in cases.iter().skip(1).zip(cases_medians) {
        let (window, workers) = case.split_once(':').unwrap_or((case, "?"));
        table.push_str(&format!(
            "| {window} | {workers} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {} |\n",
            f.rate(),
            f.per_core(),
            f.rate() / baseline.rate(),
            f.per_core() / baseline.per_core(),
            f.peak_rss_mb,
            f.ticks.steal_cell()
        ));
    }
    results::write_table("WEIR_BENCH_F_OUT", "F", &table)?;
    Ok(())
}
