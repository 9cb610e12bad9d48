//! Benchmark F (issue #18): a features-only run, file → file, as a user runs `weir features`,
//! against a same-run baseline that only reads and parses the same file.
//!
//! Run: `cargo bench --bench features_file` (or `scripts/bench.sh F`, which also writes its
//! section of BENCHMARKS.md). Optional: `WEIR_BENCH_F_EVENTS` (default 1 000 000),
//! `WEIR_BENCH_F_KEYS` (default 50 000), `WEIR_BENCH_F_OUT` (the markdown table, default
//! `target/bench-results/F.md`), `WEIR_BENCH_F_RANGE_BYTES` (`[source] range_bytes`; above the
//! file's size, one instance reads it all, as before files were split). One case alone:
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
//! seconds. Each ratio is against the baseline measured in the same run.

#[path = "results/mod.rs"]
mod results;

use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rustix::time::{clock_gettime, ClockId};
use serde::Deserialize;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const CASE_VAR: &str = "WEIR_BENCH_F_CASE";
const WINDOWS: [(&str, &str); 3] = [
    ("tumbling 1 m", "kind = \"tumbling\"\nsize = \"1m\""),
    (
        "hopping 5 m / 1 m",
        "kind = \"hopping\"\nsize = \"5m\"\nslide = \"1m\"",
    ),
    (
        "session 30 s",
        "kind = \"session\"\ngap = \"30s\"\nmax_length = \"1h\"",
    ),
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

/// One case's figures, as a child prints them.
#[derive(Debug, Clone, Copy)]
struct Figures {
    events: u64,
    wall_s: f64,
    cpu_s: f64,
    peak_rss_mb: f64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn process_cpu_s() -> f64 {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn peak_rss_mb() -> f64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The input file, generated once per (events, keys).
fn input(events: u64, keys: u64) -> anyhow::Result<PathBuf> {
    let dir = results::target_dir().join("bench-data");
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("clickstream-{events}-{keys}.jsonl"));
    if path.exists() {
        return Ok(path);
    }
    let config = weir::gen::ClickstreamConfig {
        events,
        users: u32::try_from(keys)?,
        ..weir::gen::ClickstreamConfig::default()
    };
    let partial = path.with_extension("partial");
    let mut out = BufWriter::new(fs::File::create(&partial)?);
    for event in weir::gen::Clickstream::new(config)? {
        out.write_all(&event.payload)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    fs::rename(&partial, &path)?;
    Ok(path)
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

fn features(input: &Path, window: &str, workers: usize) -> anyhow::Result<u64> {
    let job_path = weir_testkit::clickstream::job_path();
    let text = fs::read_to_string(&job_path)?;
    let default_window = "kind = \"tumbling\"\nsize = \"1m\"";
    anyhow::ensure!(
        text.contains(default_window),
        "{} has another [window]",
        job_path.display()
    );
    let mut job: weir::JobFile = toml::from_str(&text.replacen(default_window, window, 1))?;
    job.base_dir = job_path.parent().map(Path::to_path_buf).unwrap_or_default();
    job.runtime.workers = workers;
    job.parallelism = Default::default();
    if let Ok(bytes) = std::env::var("WEIR_BENCH_F_RANGE_BYTES") {
        job.source.range_bytes = bytes.parse()?;
    }
    let out = tempdir_path(&format!("features-{workers}"));
    let summary = weir::features_cmd::compute_features(
        job,
        vec![input.to_path_buf()],
        out.join("rows.jsonl"),
        Some(out.join("dead.jsonl")),
    )?;
    let _ = fs::remove_dir_all(&out);
    anyhow::ensure!(
        summary.dead_letters_total() == 0,
        "dead letters: {summary:?}"
    );
    Ok(summary.events_in)
}

fn tempdir_path(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-bench-f-{label}-{}", std::process::id()));
    let _ = fs::create_dir_all(&dir);
    dir
}

/// Runs one case in this process and prints its figures (the child side).
fn run_case(case: &str, input: &Path) -> anyhow::Result<()> {
    let (wall, cpu) = (Instant::now(), process_cpu_s());
    let events = match case.split_once(':') {
        None => parse_only(input)?,
        Some((window, workers)) => {
            let window = WINDOWS.iter().find(|w| w.0 == window).map(|w| w.1);
            features(
                input,
                window.ok_or_else(|| anyhow::anyhow!("no window {case}"))?,
                workers.parse()?,
            )?
        }
    };
    let (wall_s, cpu_s) = (wall.elapsed().as_secs_f64(), process_cpu_s() - cpu);
    println!("{events} {wall_s} {cpu_s} {}", peak_rss_mb());
    Ok(())
}

/// Runs one case in a child process.
fn child(case: &str) -> anyhow::Result<Figures> {
    let output = Command::new(std::env::current_exe()?)
        .env(CASE_VAR, case)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "case {case} failed: {}{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    let fields: Vec<f64> = stdout
        .lines()
        .last()
        .unwrap_or_default()
        .split(' ')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let [events, wall_s, cpu_s, peak_rss_mb] = fields[..] else {
        anyhow::bail!("case {case} printed `{stdout}`");
    };
    Ok(Figures {
        events: events as u64,
        wall_s,
        cpu_s,
        peak_rss_mb,
    })
}

fn main() -> anyhow::Result<()> {
    let (events, keys) = (
        env_u64("WEIR_BENCH_F_EVENTS", 1_000_000),
        env_u64("WEIR_BENCH_F_KEYS", 50_000),
    );
    let input = input(events, keys)?;
    if let Ok(case) = std::env::var(CASE_VAR) {
        return run_case(&case, &input);
    }
    // `cargo bench` passes `--bench`; anything else is not for this plain `main`.
    let mb = fs::metadata(&input)?.len() as f64 / 1e6;
    let baseline = child("parse_only")?;
    anyhow::ensure!(
        baseline.events == events,
        "the baseline parsed {} of {events} lines",
        baseline.events
    );
    let rate = |f: &Figures| f.events as f64 / f.wall_s / 1e6;
    let per_core = |f: &Figures| f.events as f64 / f.cpu_s / 1e6;
    let mut table = format!(
        "Input: {events} events over {keys} keys ({mb:.0} MB of JSON Lines). M events/s; ratios against `parse_only` of this run.\n\n\
         | case | workers | wall M ev/s | per core M ev/s (CPU time) | wall / baseline | per core / baseline | peak RSS MB |\n|---|---|---|---|---|---|---|\n\
         | baseline `parse_only` (serde_json into structs, 1 thread) | 1 | {:.2} | {:.2} | 1 | 1 | {:.0} |\n",
        rate(&baseline), per_core(&baseline), baseline.peak_rss_mb
    );
    for (window, _) in WINDOWS {
        for workers in [1, 2] {
            let f = child(&format!("{window}:{workers}"))?;
            anyhow::ensure!(
                f.events == events,
                "{window}, {workers} workers: {} of {events} events",
                f.events
            );
            table.push_str(&format!(
                "| {window} | {workers} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} |\n",
                rate(&f),
                per_core(&f),
                rate(&f) / rate(&baseline),
                per_core(&f) / per_core(&baseline),
                f.peak_rss_mb
            ));
            eprintln!("{window}, {workers} workers: {f:?}");
        }
    }
    results::write_table("WEIR_BENCH_F_OUT", "F", &table)?;
    Ok(())
}
