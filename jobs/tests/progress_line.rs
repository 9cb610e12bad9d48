//! `weir run`'s live progress line (issue #16): on a terminal (here a pseudo-terminal made by
//! util-linux `script`) stderr gets one line redrawn in place (`\r`, clear line) with events/s,
//! lag, watermark delay, outputs/s and the last checkpoint; with stderr to a file there is no
//! such line (a run shorter than the 10 s log interval writes no progress log line either).
//! Log lines to anything but a terminal are plain text, without colour codes.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{ensure, Context, Result};

use weir_testkit::clickstream;
use weir_testkit::files::{write_lines, Scratch};

fn events(count: i64) -> impl Iterator<Item = String> {
    (0..count).map(|i| {
        format!(
            "{{\"user\":\"u{}\",\"ts\":{},\"type\":\"view\",\"dwell_ms\":5.0}}",
            i % 5_000,
            1_700_000_000_000_i64 + i * 3
        )
    })
}

/// A scratch directory holding `count` events (`events.jsonl`) and the clickstream job file
/// (`job.toml`): the directory, the input and the job.
fn input_and_job(name: &str, count: i64) -> Result<(Scratch, PathBuf, PathBuf)> {
    let scratch = Scratch::new(name);
    let (input, job) = (
        scratch.path().join("events.jsonl"),
        scratch.path().join("job.toml"),
    );
    write_lines(&input, events(count))?;
    fs::write(&job, clickstream::job_text())?;
    Ok((scratch, input, job))
}

#[test]
fn a_terminal_gets_one_redrawn_progress_line_and_a_file_does_not() -> Result<()> {
    // Long enough for a few redraws (one a second) on a fast machine too: 150 000 events
    // once took 0.85 s in a debug build and drew no line.
    let (scratch, input, job) = input_and_job("progress", 600_000)?;
    let dir = scratch.path();
    let run = format!(
        "{} run {} --input-file {} --output-file {} --metrics-addr off",
        env!("CARGO_BIN_EXE_weir"),
        job.display(),
        input.display(),
        dir.join("scores.jsonl").display()
    );

    // `script -q -e -c CMD /dev/null`: CMD on a pseudo-terminal, its output on our stdout.
    let on_terminal = Command::new("script")
        .args(["-q", "-e", "-c", &run, "/dev/null"])
        .env("RUST_LOG", "warn")
        .output()
        .context("util-linux `script` is needed (Debian: bsdutils)")?;
    let shown = String::from_utf8_lossy(&on_terminal.stdout).into_owned();
    ensure!(on_terminal.status.success(), "the run failed:\n{shown}");
    let redraws = shown.matches("\r\x1b[2K").count();
    ensure!(
        redraws >= 2,
        "expected the progress line drawn and cleared, saw {redraws} redraws:\n{shown}"
    );
    for part in [
        " events/s | lag ",
        " | watermark delay ",
        " out/s | checkpoint ",
    ] {
        ensure!(shown.contains(part), "the line lacks `{part}`:\n{shown}");
    }

    let to_file = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run"])
        .arg(&job)
        .arg("--input-file")
        .arg(&input)
        .arg("--output-file")
        .arg(dir.join("scores-2.jsonl"))
        .args(["--metrics-addr", "off"])
        .env("RUST_LOG", "warn")
        .output()?;
    let logged = String::from_utf8_lossy(&to_file.stderr).into_owned();
    ensure!(to_file.status.success(), "the run failed:\n{logged}");
    ensure!(
        !logged.contains('\r') && !logged.contains("events/s |"),
        "a progress line went to a file:\n{logged}"
    );
    Ok(())
}

#[test]
fn log_lines_to_a_file_carry_no_colour_codes() -> Result<()> {
    let (scratch, input, job) = input_and_job("plain-log", 2_000)?;
    let run = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("features")
        .arg(&job)
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(scratch.path().join("rows.jsonl"))
        .env("RUST_LOG", "info")
        .output()?;
    let logged = String::from_utf8_lossy(&run.stderr).into_owned();
    ensure!(run.status.success(), "the run failed:\n{logged}");
    ensure!(
        logged.contains(" INFO ") && logged.contains("reached the end of its bounded input"),
        "expected the sources' info lines:\n{logged}"
    );
    ensure!(
        !logged.contains('\x1b'),
        "a log line to a file carries escape codes:\n{logged:?}"
    );
    Ok(())
}
