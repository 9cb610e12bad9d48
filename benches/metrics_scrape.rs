//! The cost of being watched (issue #16's acceptance: "scraping every second costs ≤ 2 %
//! throughput"): the same `weir run` with its metrics server on, not scraped (the baseline),
//! scraped every second (what Prometheus does at a 1 s interval, the target's case), and
//! scraped every 100 ms (ten times that, to show the slope). Each scrape is a full `GET
//! /metrics` of the job's OpenMetrics text over loopback, from a thread of this benchmark.
//!
//! Run: `cargo build --release -p weir && cargo bench --bench metrics_scrape` (results:
//! BENCHMARKS.md). Harness-less: the three variants run alternated (ABC ABC …) `REPEATS` times
//! (`WEIR_BENCH_REPEATS`), so load from elsewhere on the machine spreads over all three; the
//! median wall time and children's CPU time of each are shown, and the CPU time of the job's
//! metrics server thread (`weir-metrics`, read from `/proc/<pid>/task/*/stat` every 50 ms while
//! it runs): what the scrapes themselves cost, which a loaded machine's noise in wall time
//! cannot hide or fake. The job is
//! `jobs/clickstream.toml` (1-minute tumbling windows, 8 features, the tiny XGBoost model) over
//! `EVENTS` generated events in two JSON Lines files (`WEIR_BENCH_EVENTS`), scores to a file.

#[path = "weir_process/mod.rs"]
mod weir_process;

#[path = "thread_cpu/mod.rs"]
mod thread_cpu;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_process::{children_cpu, generated_inputs, median, weir_binary};
use weir_testkit::clickstream;
use weir_testkit::files::scratch_dir;
use weir_testkit::scrape;

/// Runs per variant (`WEIR_BENCH_REPEATS` overrides), median shown.
const REPEATS: usize = 5;
/// Events in all (`WEIR_BENCH_EVENTS` overrides): about 10 s of a 2-core run, so a 1 s scraper
/// scrapes about ten times.
const EVENTS: usize = 8_000_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
        .max(1)
}

/// Scrapes `GET /metrics` on `addr` every `every` until `stop`: the successful scrapes and the
/// bytes of the last one.
fn scraper(addr: SocketAddr, every: Duration, stop: Arc<AtomicBool>) -> JoinHandle<(usize, usize)> {
    std::thread::spawn(move || {
        let (mut scrapes, mut bytes) = (0, 0);
        let mut next = Instant::now() + every;
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(next.saturating_duration_since(Instant::now()).min(every));
            if Instant::now() < next {
                continue;
            }
            next += every;
            // Refused until the server binds (after the preflight); not counted.
            if let Ok((200, body)) = scrape::get(addr, "/metrics") {
                scrapes += 1;
                bytes = body.len();
            }
        }
        (scrapes, bytes)
    })
}

/// The CPU time (user + system) of thread `name` of process `pid`, if it is running.
fn named_thread_cpu(pid: u32, name: &str) -> Option<Duration> {
    thread_cpu::threads(&pid.to_string())
        .into_iter()
        .find(|thread| thread.name == name)
        .map(|thread| thread.cpu)
}

/// Samples the CPU time of `pid`'s metrics server thread every 50 ms until `stop`: the last
/// value seen.
fn server_cpu_sampler(pid: u32, stop: Arc<AtomicBool>) -> JoinHandle<Duration> {
    std::thread::spawn(move || {
        let mut last = Duration::ZERO;
        while !stop.load(Ordering::Acquire) {
            if let Some(cpu) = named_thread_cpu(pid, "weir-metrics") {
                last = cpu;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        last
    })
}

/// One measured run: wall time, children's CPU time, scrapes made, bytes of a scrape.
struct Run {
    wall: Duration,
    cpu: Duration,
    /// CPU time of the metrics server thread.
    server_cpu: Duration,
    scrapes: usize,
    scrape_bytes: usize,
}

/// `weir run` of the clickstream job over `inputs` with the metrics server on a free port,
/// scraped every `every` (`None`: not scraped).
fn run(weir: &Path, dir: &Path, inputs: &[PathBuf; 2], every: Option<Duration>) -> Run {
    let addr = weir_testkit::cluster::free_addr().unwrap_or_else(|e| panic!("{e}"));
    let scores = dir.join("scores.jsonl");
    let mut command = Command::new(weir);
    command
        .arg("run")
        .arg(dir.join("job.toml"))
        .args(["--workers", "2"])
        .args(["--metrics-addr", &addr.to_string()])
        .arg("--output-file")
        .arg(&scores);
    for input in inputs {
        command.arg("--input-file").arg(input);
    }
    let cpu = children_cpu();
    let started = Instant::now();
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let scraping = every.map(|every| scraper(addr, every, stop.clone()));
    let sampler = server_cpu_sampler(child.id(), stop.clone());
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    let wall = started.elapsed();
    stop.store(true, Ordering::Release);
    let server_cpu = sampler.join().unwrap_or_default();
    let (scrapes, scrape_bytes) = scraping.map_or((0, 0), |s| s.join().unwrap_or((0, 0)));
    assert!(status.success(), "weir run failed: {status}");
    let scored = std::fs::read_to_string(&scores).map_or(0, |t| t.lines().count());
    assert!(scored > 0, "the run wrote no scores");
    Run {
        wall,
        cpu: children_cpu() - cpu,
        server_cpu,
        scrapes,
        scrape_bytes,
    }
}

fn main() {
    let weir = weir_binary();
    let dir = scratch_dir("bench-metrics-scrape");
    let events = env_or("WEIR_BENCH_EVENTS", EVENTS);
    let inputs = generated_inputs(&weir, &dir, events);
    std::fs::write(dir.join("job.toml"), clickstream::job_text()).unwrap_or_else(|e| panic!("{e}"));
    let variants = [
        ("not scraped (baseline)", None),
        ("scraped every 1 s", Some(Duration::from_secs(1))),
        ("scraped every 100 ms", Some(Duration::from_millis(100))),
    ];
    let mut runs: Vec<Vec<Run>> = variants.iter().map(|_| Vec::new()).collect();
    for round in 0..env_or("WEIR_BENCH_REPEATS", REPEATS) {
        for (i, (name, every)) in variants.iter().enumerate() {
            let one = run(&weir, &dir, &inputs, *every);
            eprintln!(
                "round {round}: {name}: {:.2} s wall, {:.2} s CPU ({:.3} s metrics server), {} scrapes",
                one.wall.as_secs_f64(),
                one.cpu.as_secs_f64(),
                one.server_cpu.as_secs_f64(),
                one.scrapes
            );
            runs[i].push(one);
        }
    }
    let medians: Vec<(Duration, Duration, Duration)> = runs
        .iter()
        .map(|r| {
            (
                median(r.iter().map(|r| r.wall).collect()),
                median(r.iter().map(|r| r.cpu).collect()),
                median(r.iter().map(|r| r.server_cpu).collect()),
            )
        })
        .collect();
    let (base_wall, base_cpu, _) = medians[0];
    for (((name, _), (wall, cpu, server)), runs) in variants.iter().zip(&medians).zip(&runs) {
        let scrapes = median(runs.iter().map(|r| r.scrapes).collect());
        println!(
            "{name}: {:.2} s wall, {:.2} s CPU, {:.0} k events/s, {scrapes} scrapes per run \
             (median), {} bytes per scrape; throughput {:.4}x, CPU {:.4}x the baseline; \
             metrics server thread {:.3} s CPU = {:.2} % of the job's CPU",
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            events as f64 / wall.as_secs_f64() / 1e3,
            runs.iter().map(|r| r.scrape_bytes).max().unwrap_or(0),
            base_wall.as_secs_f64() / wall.as_secs_f64(),
            cpu.as_secs_f64() / base_cpu.as_secs_f64(),
            server.as_secs_f64(),
            100.0 * server.as_secs_f64() / cpu.as_secs_f64(),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
