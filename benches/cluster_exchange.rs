//! The cost of the network exchange (issue #17): the same job over the same input as one
//! process with 2 workers (the exchanges between its workers are in memory) and as a cluster
//! of 2 processes with 1 worker each on this machine (every exchange between the two workers
//! crosses Timely's TCP connections, serialized), both `weir run` binaries of this build.
//!
//! Run: `cargo build --release -p weir && cargo bench --bench cluster_exchange` (or
//! `scripts/bench.sh`; results: BENCHMARKS.md). Harness-less: each shape runs `REPEATS` times
//! (`WEIR_BENCH_REPEATS`), the median is shown with the children's CPU time. The input is two
//! JSON Lines files (two partitions, one per source instance in either shape) of the
//! clickstream generator's events; the job is `jobs/clickstream.toml` (1-minute tumbling
//! windows, 8 features, the tiny XGBoost model) writing scores to files.

#[path = "weir_process/mod.rs"]
mod weir_process;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_process::{children_cpu, generated_inputs, median, weir_binary};
use weir_testkit::clickstream;
use weir_testkit::cluster::hosts_file;
use weir_testkit::files::scratch_dir;

/// Runs per shape (`WEIR_BENCH_REPEATS` overrides), median shown.
const REPEATS: usize = 3;
/// Events per input file (`WEIR_BENCH_EVENTS` overrides the total).
const EVENTS: usize = 2_000_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
        .max(1)
}

/// `weir run` of the clickstream job over `inputs`, as process `process` of `processes`.
fn spawn(
    weir: &Path,
    dir: &Path,
    inputs: &[PathBuf; 2],
    shape: (usize, usize),
    process: usize,
) -> Child {
    let (processes, workers) = shape;
    let mut command = Command::new(weir);
    command
        .arg("run")
        .arg(dir.join("job.toml"))
        .args(["--workers", &workers.to_string()])
        .args(["--metrics-addr", "off"])
        .arg("--output-file")
        .arg(dir.join(format!("scores-{processes}x{workers}-{process}.jsonl")));
    for input in inputs {
        command.arg("--input-file").arg(input);
    }
    if processes > 1 {
        command
            .args(["--processes", &processes.to_string()])
            .args(["--process", &process.to_string()])
            .arg("--hosts")
            .arg(hosts_file(dir, processes).unwrap_or_else(|e| panic!("{e}")));
    }
    command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One run of `shape` (processes, workers each): wall time, children's CPU time, scores.
fn run(
    weir: &Path,
    dir: &Path,
    inputs: &[PathBuf; 2],
    shape: (usize, usize),
) -> (Duration, Duration, usize) {
    let cpu = children_cpu();
    let started = Instant::now();
    let children: Vec<Child> = (0..shape.0)
        .map(|p| spawn(weir, dir, inputs, shape, p))
        .collect();
    for mut child in children {
        let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success(), "weir run {shape:?} failed: {status}");
    }
    let wall = started.elapsed();
    let scores = (0..shape.0)
        .map(|p| {
            let path = dir.join(format!("scores-{}x{}-{p}.jsonl", shape.0, shape.1));
            std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
        })
        .sum();
    (wall, children_cpu() - cpu, scores)
}

fn main() {
    let weir = weir_binary();
    let dir = scratch_dir("bench-cluster");
    let events = env_or("WEIR_BENCH_EVENTS", EVENTS);
    let inputs = generated_inputs(&weir, &dir, events);
    std::fs::write(dir.join("job.toml"), clickstream::job_text()).unwrap_or_else(|e| panic!("{e}"));
    let mut results = Vec::new();
    for shape in [(1, 2), (2, 1)] {
        let (mut walls, mut cpus, mut scores) = (vec![], vec![], 0);
        for _ in 0..env_or("WEIR_BENCH_REPEATS", REPEATS) {
            let (wall, cpu, n) = run(&weir, &dir, &inputs, shape);
            walls.push(wall);
            cpus.push(cpu);
            scores = n;
        }
        let (wall, cpu) = (median(walls), median(cpus));
        println!(
            "{} process(es) x {} worker(s): {:.2} s wall, {:.2} s CPU, {:.0} k events/s, {scores} scores",
            shape.0,
            shape.1,
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            events as f64 / wall.as_secs_f64() / 1e3
        );
        results.push((wall, cpu, scores));
    }
    let ((one_wall, one_cpu, one_scores), (two_wall, two_cpu, two_scores)) =
        (results[0], results[1]);
    assert_eq!(
        one_scores, two_scores,
        "the two shapes scored different windows"
    );
    println!(
        "2 processes x 1 worker against 1 process x 2 workers: throughput {:.3}x, CPU time {:.3}x",
        one_wall.as_secs_f64() / two_wall.as_secs_f64(),
        two_cpu.as_secs_f64() / one_cpu.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
