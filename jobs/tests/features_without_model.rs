//! A features-only job file (issue #16): `weir features` needs neither `[model]` nor `[sink]`,
//! which it never uses, and writes the same rows as the full job file; it logs nothing about a
//! scoring stage. `weir run` on such a file fails at once, naming the missing section.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use anyhow::{ensure, Result};

use weir_testkit::clickstream;
use weir_testkit::files::{write_lines, Scratch};

/// The clickstream job file without its `[model]` and `[sink]` sections.
fn features_only_job() -> String {
    let text = clickstream::job_text();
    let mut kept = Vec::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with('[') {
            skipping = line == "[model]" || line == "[sink]";
        }
        if !skipping {
            kept.push(line);
        }
    }
    kept.join("\n") + "\n"
}

fn weir(args: &[&Path]) -> Result<Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("RUST_LOG", "info")
        .output()?)
}

fn rows(path: &Path) -> Result<Vec<String>> {
    let mut rows: Vec<String> = fs::read_to_string(path)?
        .lines()
        .map(str::to_owned)
        .collect();
    rows.sort();
    Ok(rows)
}

#[test]
fn features_need_no_model_or_sink_section_and_run_names_the_missing_model() -> Result<()> {
    let scratch = Scratch::new("features-only");
    let dir = scratch.path();
    let text = features_only_job();
    ensure!(
        !text.contains("[model]") && !text.contains("[sink]") && text.contains("[[features]]"),
        "the clickstream job changed:\n{text}"
    );
    let (only, full) = (dir.join("features-only.toml"), dir.join("full.toml"));
    fs::write(&only, &text)?;
    fs::write(&full, clickstream::job_text())?;
    let events = (0..3_000).map(|i| {
        format!(
            "{{\"user\":\"u{}\",\"ts\":{},\"type\":\"view\",\"dwell_ms\":{}.5}}",
            i % 37,
            1_700_000_000_000_i64 + i * 97,
            i % 400
        )
    });
    let input = dir.join("events.jsonl");
    write_lines(&input, events)?;

    let mut outputs = Vec::new();
    for job in [&only, &full] {
        let out = dir.join(format!("rows-{}.jsonl", outputs.len()));
        let run = weir(&[
            Path::new("features"),
            job,
            Path::new("--input"),
            &input,
            Path::new("--output"),
            &out,
        ])?;
        let log = String::from_utf8_lossy(&run.stderr).into_owned();
        ensure!(
            run.status.success(),
            "weir features {} failed:\n{log}",
            job.display()
        );
        ensure!(
            !log.contains("scoring stage"),
            "a features run logged about scoring:\n{log}"
        );
        outputs.push(rows(&out)?);
    }
    ensure!(!outputs[0].is_empty(), "no rows written");
    ensure!(
        outputs[0] == outputs[1],
        "the features-only file computed other rows than the full job file"
    );

    let scores = dir.join("scores.jsonl");
    let run = weir(&[
        Path::new("run"),
        &only,
        Path::new("--input-file"),
        &input,
        Path::new("--output-file"),
        &scores,
    ])?;
    let log = String::from_utf8_lossy(&run.stderr).into_owned();
    ensure!(
        !run.status.success(),
        "weir run scored without a model:\n{log}"
    );
    ensure!(
        log.contains("has no [model] section") && log.contains("weir features"),
        "weir run does not name the missing [model]:\n{log}"
    );
    Ok(())
}
