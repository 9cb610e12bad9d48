//! `weir launch` (issue #17): a local cluster started by one command.
//!
//! - Acceptance: the clickstream job over three JSON Lines files, launched as 3 processes × 1
//!   worker, writes the same scores and dead letters (each exactly once) as one process with
//!   3 workers; every child's log line carries its `[p<i>]` prefix, and each process got a
//!   metrics port of its own.
//! - A process SIGKILLed mid-run: its peers exit by themselves with status 4 naming it
//!   (`cluster::PEER_LOST_EXIT`, instead of hanging or a worker panic's 101) and the launcher
//!   exits with the killed process's status (137).
//! - SIGTERM to the launcher reaches every process once (each stops reading and flushes; a
//!   bounded run stopped early exits 1), and the launcher exits with that status.
//! - With `--supervise` and checkpoints, the same kill restarts every process from the last
//!   committed checkpoint, and the job's output equals the uninterrupted run's (rows after the
//!   checkpoint may appear twice: at-least-once file sink).
//!
//! Run: `cargo test -p weir --test launch` (needs the ONNX Runtime library from
//! scripts/setup.sh; no broker).

mod launch_support;

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use launch_support::{
    dead_letter_counts, input_files, job_file, log_tail, same_records, score_counts, second_commit,
    started_pid, wait_for,
};
use weir_checkpoint::LocalDirStore;
use weir_testkit::files::Scratch;

const RUN_LIMIT: Duration = Duration::from_secs(180);
/// Records per input file of the killed runs (enough that a kill after the second
/// checkpoint comes mid-input).
const EVENTS_PER_FILE: u64 = 100_000;

/// `weir <args>` with stdout and stderr into `log`.
fn weir(args: &[&str], log: &Path) -> Result<Child> {
    let out = fs::File::create(log)?;
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        // The launcher picks each process's metrics port unless this chooses one (cargo's
        // config sets it `off` for the processes it starts).
        .env_remove("WEIR_METRICS_ADDR")
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("cannot start the weir binary")
}

/// Runs `weir <args>` to the end; fails unless it exits 0.
fn run_ok(args: &[String], log: &Path) -> Result<()> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let status = wait_for(&mut weir(&args, log)?, RUN_LIMIT, log)?;
    ensure!(status.success(), "weir exited {status}: {}", log_tail(log));
    Ok(())
}

/// `weir run <job> --workers <workers>`, one process, to the end. Without a metrics server:
/// [`weir`] lets such a run take the default port, which another test's reference run may
/// hold at the same moment.
fn run_one_process(job: &Path, workers: usize, log: &Path) -> Result<()> {
    let (job, workers) = (job.display().to_string(), workers.to_string());
    let args = ["run", &job, "--workers", &workers, "--metrics-addr", "off"];
    run_ok(&args.map(str::to_owned), log)
}

#[test]
fn three_launched_processes_write_what_one_process_with_three_workers_writes() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("launch-equal");
    let dir = scratch.path();
    let inputs = input_files(dir, 3, 20_000)?;
    let one = dir.join("one-process.jsonl");
    let job = job_file(dir, "one", &inputs, &one, None)?;
    run_one_process(&job, 3, &dir.join("one.log"))?;

    let three = dir.join("three-processes.jsonl");
    let job = job_file(dir, "three", &inputs, &three, None)?;
    let log = dir.join("three.log");
    let args = [
        vec!["launch".to_owned(), job.display().to_string()],
        vec!["-n".to_owned(), "3".to_owned()],
        vec!["--workers".to_owned(), "1".to_owned()],
    ]
    .concat();
    run_ok(&args, &log)?;

    let expected = score_counts(&one)?;
    ensure!(expected.len() > 500, "too few scores: {}", expected.len());
    let got = score_counts(&three)?;
    same_records("scores of 3 processes × 1 worker", &expected, &got)?;
    ensure!(
        got.values().all(|&n| n == 1) && expected.values().all(|&n| n == 1),
        "a score was written twice by a run without restarts"
    );
    let expected_dead = dead_letter_counts(&one)?;
    ensure!(expected_dead.len() > 100, "too few dead letters");
    same_records(
        "dead letters of 3 processes × 1 worker",
        &expected_dead,
        &dead_letter_counts(&three)?,
    )?;

    let text = fs::read_to_string(&log)?;
    for process in 0..3 {
        ensure!(
            text.contains(&format!("[p{process}] cluster total:")),
            "no `[p{process}] cluster total:` line: {}",
            log_tail(&log)
        );
    }
    ensure!(
        (0..3).all(|p| text.contains(&format!("p{p} serves metrics at http://127.0.0.1:"))),
        "the launcher did not give each process its own metrics port: {}",
        log_tail(&log)
    );
    ensure!(
        text.contains("every process finished"),
        "{}",
        log_tail(&log)
    );
    scratch.passed();
    Ok(())
}

/// Starts `weir launch -n 2` of a job that checkpoints into `checkpoints`, waits for its
/// second commit, SIGKILLs p1; returns the launcher.
fn launch_and_kill_p1(job: &Path, extra: &[&str], checkpoints: &Path, log: &Path) -> Result<Child> {
    let job = job.display().to_string();
    let args = [&["launch", &job, "-n", "2"][..], extra, &["--workers", "1"]].concat();
    let mut launcher = weir(&args, log)?;
    let started = Instant::now();
    loop {
        if LocalDirStore::open(checkpoints)
            .ok()
            .and_then(|store| second_commit(&store))
            .is_some()
        {
            break;
        }
        ensure!(
            launcher.try_wait()?.is_none(),
            "the launcher ended before a checkpoint: {}",
            log_tail(log)
        );
        ensure!(
            started.elapsed() < RUN_LIMIT,
            "no checkpoint: {}",
            log_tail(log)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = started_pid(log, "p1", 0).context("the launcher logged no pid for p1")?;
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -KILL {pid} failed");
    Ok(launcher)
}

#[test]
fn a_killed_process_stops_the_cluster_and_its_peer_exits_naming_it() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("launch-kill");
    let dir = scratch.path();
    let inputs = input_files(dir, 2, EVENTS_PER_FILE)?;
    let checkpoints = dir.join("ckpt");
    let location = checkpoints.display().to_string();
    let output = dir.join("out.jsonl");
    let job = job_file(dir, "job", &inputs, &output, Some((&location, "300ms")))?;
    let log = dir.join("launch.log");
    let mut launcher = launch_and_kill_p1(&job, &[], &checkpoints, &log)?;
    let status = wait_for(&mut launcher, RUN_LIMIT, &log)?;
    ensure!(
        status.code() == Some(137),
        "the launcher exited {status}, not 137 (128 + SIGKILL, p1's end): {}",
        log_tail(&log)
    );
    let text = fs::read_to_string(&log)?;
    ensure!(
        text.contains("[p0] error: lost peer process 1 at 127.0.0.1:")
            && text.contains("p0 exited: exit status 4")
            && text.contains("p1 exited: killed by signal 9 (SIGKILL)"),
        "p0 did not exit 4 naming p1: {}",
        log_tail(&log)
    );
    ensure!(!text.contains("restart 1"), "restarted without --supervise");
    scratch.passed();
    Ok(())
}

#[test]
fn with_supervise_a_killed_process_restarts_the_cluster_from_the_last_checkpoint() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("launch-supervise");
    let dir = scratch.path();
    let inputs = input_files(dir, 2, EVENTS_PER_FILE)?;
    let reference = dir.join("reference.jsonl");
    let job = job_file(dir, "reference", &inputs, &reference, None)?;
    run_one_process(&job, 2, &dir.join("reference.log"))?;

    let checkpoints = dir.join("ckpt");
    let location = checkpoints.display().to_string();
    let output = dir.join("supervised.jsonl");
    let job = job_file(
        dir,
        "supervised",
        &inputs,
        &output,
        Some((&location, "300ms")),
    )?;
    let log = dir.join("launch.log");
    // Launch options before the run flags (the first run flag starts them).
    let supervise = ["--supervise", "--backoff", "200ms", "--max-restarts", "2"];
    let mut launcher = launch_and_kill_p1(&job, &supervise, &checkpoints, &log)?;
    let status = wait_for(&mut launcher, RUN_LIMIT, &log)?;
    ensure!(
        status.success(),
        "the supervised launch exited {status}: {}",
        log_tail(&log)
    );
    let text = fs::read_to_string(&log)?;
    ensure!(
        text.contains("p1 failed (killed by signal 9 (SIGKILL)); restart 1 of at most 2")
            && text.contains("p0 exited: exit status 4")
            && text.contains("every process finished"),
        "no restart after the kill: {}",
        log_tail(&log)
    );
    for process in 0..2 {
        ensure!(
            text.contains(&format!("[p{process}] "))
                && started_pid(&log, &format!("p{process}"), 1).is_some(),
            "p{process} was not started again: {}",
            log_tail(&log)
        );
    }
    ensure!(
        text.matches("restoring from checkpoint").count() >= 2,
        "the restarted processes did not both restore: {}",
        log_tail(&log)
    );
    let read = launch_support::records_read_at_end(&log).context("no cluster total")?;
    ensure!(
        read < 2 * EVENTS_PER_FILE,
        "the restarted cluster read all {read} records: it did not resume mid-input"
    );
    same_records(
        "scores after a supervised restart",
        &score_counts(&reference)?,
        &score_counts(&output)?,
    )?;
    same_records(
        "dead letters after a supervised restart",
        &dead_letter_counts(&reference)?,
        &dead_letter_counts(&output)?,
    )?;
    scratch.passed();
    Ok(())
}

#[test]
fn a_stop_signal_to_the_launcher_reaches_every_process_once() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("launch-signal");
    let dir = scratch.path();
    let inputs = input_files(dir, 2, EVENTS_PER_FILE)?;
    let output = dir.join("out.jsonl");
    let job = job_file(dir, "job", &inputs, &output, None)?;
    let log = dir.join("launch.log");
    let job = job.display().to_string();
    let mut launcher = weir(&["launch", &job, "-n", "2", "--workers", "1"], &log)?;
    // `weir run` installs its signal handler right after logging this; the launcher's
    // forward comes at least a poll later.
    let loaded = |text: &str, p: usize| {
        let prefix = format!("[p{p}] ");
        text.lines()
            .any(|l| l.starts_with(&prefix) && l.contains("ONNX Runtime loaded"))
    };
    let started = Instant::now();
    while !(0..2).all(|p| fs::read_to_string(&log).is_ok_and(|t| loaded(&t, p))) {
        ensure!(
            launcher.try_wait()?.is_none() && started.elapsed() < RUN_LIMIT,
            "the processes did not start: {}",
            log_tail(&log)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = Command::new("kill")
        .args(["-TERM", &launcher.id().to_string()])
        .status()?;
    ensure!(status.success(), "kill -TERM failed");
    let status = wait_for(&mut launcher, RUN_LIMIT, &log)?;
    let text = fs::read_to_string(&log)?;
    ensure!(
        status.code() == Some(1),
        "the launcher exited {status}, not 1 (a bounded run stopped early): {}",
        log_tail(&log)
    );
    for p in 0..2 {
        ensure!(
            text.contains(&format!("[p{p}] stop signal: the sources stop reading"))
                && text.contains(&format!("p{p} exited: exit status 1")),
            "p{p} did not stop on the forwarded signal: {}",
            log_tail(&log)
        );
    }
    ensure!(
        !text.contains("second stop signal"),
        "a process got the signal twice: {}",
        log_tail(&log)
    );
    scratch.passed();
    Ok(())
}
