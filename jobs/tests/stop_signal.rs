//! SIGTERM (what Kubernetes and systemd send to stop a pod or service) stops `weir run` like
//! Ctrl-C: the sources stop reading, the sinks flush, the summary is printed and the process
//! exits 0. Without a handler the process died at once with nothing flushed. Needs the test
//! broker (`scripts/test.sh` starts it). A bounded run stopped that way did not finish: it
//! prints its summary and exits non-zero, so a backfill script does not take it for done.

#[path = "../../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::fs;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use kafka::{create_topic, produce, unique_topic};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir_testkit::clickstream::{self, Topics};
use weir_testkit::files::{scratch_dir, write_lines};

#[test]
fn sigterm_stops_the_job_cleanly() -> Result<()> {
    let dir = scratch_dir("sigterm");
    let (input, scores, dlq) = (
        unique_topic("term-clicks"),
        unique_topic("term-scores"),
        unique_topic("term-dlq"),
    );
    create_topic(&input, 2)?;
    create_topic(&scores, 1)?;
    create_topic(&dlq, 1)?;
    let events: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 9,
        events: 500,
        users: 20,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    produce(&input, &events)?;
    let topics = Topics {
        input: &input,
        scores: &scores,
        dead_letters: &dlq,
    };
    let text = clickstream::kafka_job_text(&kafka::brokers(), &topics);
    let job = dir.join("job.toml");
    fs::write(&job, text)?;
    let log = dir.join("run.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&job)
        .env("RUST_LOG", "info,librdkafka=warn")
        .stdout(fs::File::create(&log)?)
        .stderr(fs::File::create(dir.join("stderr.log"))?)
        .spawn()
        .context("cannot start weir")?;

    // Unbounded: it runs until stopped. Wait until it has read the input.
    let deadline = Instant::now() + Duration::from_secs(60);
    let stderr = dir.join("stderr.log");
    while !fs::read_to_string(&stderr)?.contains("source instance assigned") {
        ensure!(
            Instant::now() < deadline && child.try_wait()?.is_none(),
            "the job did not start: {}",
            stderr.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let exit = terminate(&mut child)?;
    let printed = fs::read_to_string(&log)?;
    ensure!(
        exit.success(),
        "weir exited with {exit} after SIGTERM: {}",
        stderr.display()
    );
    ensure!(
        printed.contains("events in:"),
        "no summary printed after SIGTERM: {printed}"
    );
    fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Sends SIGTERM to `child` and waits (60 s at most) for it to exit.
fn terminate(child: &mut Child) -> Result<ExitStatus> {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    ensure!(status.success(), "kill -TERM failed");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(exit) = child.try_wait()? {
            return Ok(exit);
        }
        ensure!(Instant::now() < deadline, "weir did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_bounded_run_stopped_before_its_end_fails() -> Result<()> {
    let dir = scratch_dir("sigterm-bounded");
    // Far more than a debug build reads before the signal (~50 k records/s).
    let events = Clickstream::new(ClickstreamConfig {
        seed: 11,
        events: 1_000_000,
        users: 500,
        ..ClickstreamConfig::default()
    })?;
    let input = dir.join("events.jsonl");
    write_lines(&input, events.map(|e| e.payload))?;
    let (scores, stderr) = (dir.join("scores.jsonl"), dir.join("stderr.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(clickstream::job_path())
        .arg("--input-file")
        .arg(&input)
        .arg("--output-file")
        .arg(&scores)
        .arg("--dead-letter-file")
        .arg(dir.join("dead.jsonl"))
        .stdout(fs::File::create(dir.join("run.log"))?)
        .stderr(fs::File::create(&stderr)?)
        .spawn()
        .context("cannot start weir")?;
    // Running: windows have closed and been scored.
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs::metadata(&scores).map_or(0, |m| m.len()) == 0 {
        ensure!(
            Instant::now() < deadline && child.try_wait()?.is_none(),
            "the job wrote no scores: {}",
            stderr.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let exit = terminate(&mut child)?;
    let printed = fs::read_to_string(dir.join("run.log"))?;
    let errors = fs::read_to_string(&stderr)?;
    ensure!(
        !exit.success(),
        "a bounded run stopped half-way exited 0:\n{printed}"
    );
    ensure!(
        printed.contains("events in:"),
        "no summary printed: {printed}"
    );
    ensure!(
        errors.contains("stopped by a signal before the end of the bounded input"),
        "the error does not say the run is incomplete: {}",
        stderr.display()
    );
    fs::remove_dir_all(&dir)?;
    Ok(())
}
