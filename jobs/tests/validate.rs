//! `weir validate` on broken job files (issue #16): each planted error is reported on the
//! line of its check, every check runs even after one fails (a file with three planted errors
//! lists all three), and the exit status is non-zero exactly when a check failed. Runs against
//! the real broker (topics created here) and the real ONNX Runtime.

#[path = "../../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Result};

use weir::checkpointing::topology_hash;
use weir::config::JobFile;
use weir_checkpoint::{LocalDirStore, Manifest, SnapshotStore};
use weir_features::vocab::Epoch;
use weir_testkit::clickstream::{self, Topics};
use weir_testkit::files::Scratch;

/// `weir validate` on `job`: exit success and stdout.
fn validate(job: &Path) -> Result<(bool, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("validate")
        .arg(job)
        .env("RUST_LOG", "warn")
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), text))
}

/// The clickstream job on real topics of the dev broker (created once per test).
fn good_job_text() -> Result<String> {
    let [input, scores, dlq] =
        ["validate-clicks", "validate-scores", "validate-dlq"].map(kafka::unique_topic);
    for topic in [&input, &scores, &dlq] {
        kafka::create_topic(topic, 2)?;
    }
    let topics = Topics {
        input: &input,
        scores: &scores,
        dead_letters: &dlq,
    };
    Ok(clickstream::kafka_job_text(&kafka::brokers(), &topics))
}

/// `text` with `from` replaced by `to` (which must be there: the job file changed otherwise).
fn plant(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the clickstream job lacks `{from}`");
    text.replacen(from, to, 1)
}

fn write(scratch: &Scratch, name: &str, text: &str) -> Result<PathBuf> {
    let path = scratch.path().join(name);
    fs::write(&path, text)?;
    Ok(path)
}

/// A checkpoint directory holding a committed checkpoint of another job (another topology).
fn foreign_checkpoint(dir: &Path) -> Result<()> {
    let job = JobFile::load(&clickstream::job_path())?;
    let mut manifest = Manifest::new(Epoch(17_000_000_000), job.runtime.key_groups);
    manifest.topology_hash = topology_hash(&job) ^ 1;
    manifest.tick_ms = job.runtime.tick as u64;
    LocalDirStore::open(dir)?.commit_manifest(&manifest)?;
    Ok(())
}

/// Whether `line` opens a check's report (`FAILED   models   …`), and of which check.
fn opens_check<'a>(line: &'a str, check: &str) -> Option<&'a str> {
    let (status, rest) = line.split_once(' ')?;
    let known = ["ok", "warning", "FAILED", "skipped"].contains(&status);
    (known && rest.trim_start().starts_with(check)).then_some(status)
}

/// What `report` says under `check`: its line and the lines of its message that follow (a
/// TOML error quotes the file), up to the next check's line.
fn block_of(report: &str, check: &str) -> (String, String) {
    let mut lines = report
        .lines()
        .skip_while(|line| opens_check(line, check).is_none());
    let Some(first) = lines.next() else {
        return (String::new(), String::new());
    };
    let status = opens_check(first, check).unwrap_or_default().to_owned();
    let rest: Vec<&str> = lines
        .take_while(|line| opens_check(line, "").is_none())
        .collect();
    (status, format!("{first}\n{}", rest.join("\n")))
}

fn expect_line(report: &str, check: &str, status: &str, containing: &str) -> Result<()> {
    let (seen, block) = block_of(report, check);
    ensure!(
        seen == status && block.contains(containing),
        "expected `{status} {check} …{containing}…`, got `{block}` in:\n{report}"
    );
    Ok(())
}

#[test]
fn a_valid_job_passes_every_check() -> Result<()> {
    let scratch = Scratch::new("validate-good");
    let job = write(&scratch, "job.toml", &good_job_text()?)?;
    let (ok, report) = validate(&job)?;
    ensure!(ok, "a valid job failed validation:\n{report}");
    for check in [
        "job file",
        "settings",
        "brokers and topics",
        "ONNX Runtime",
        "models",
    ] {
        expect_line(&report, check, "ok", "")?;
    }
    expect_line(&report, "models", "ok", "purchase_propensity")?;
    ensure!(report.contains("the job file is valid"), "{report}");
    Ok(())
}

#[test]
fn each_planted_error_is_reported_on_its_check() -> Result<()> {
    let scratch = Scratch::new("validate-each");
    let good = good_job_text()?;
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "toml",
            plant(&good, "[window]", "[window"),
            "job file",
            "invalid job file",
        ),
        (
            "unknown-aggregate",
            plant(&good, "agg = \"count\"", "agg = \"countt\""),
            "job file",
            "countt",
        ),
        (
            "parallelism",
            plant(&good, "# [parallelism]", "[parallelism]\nscore = 5\n"),
            "settings",
            "parallelism score=5 is invalid",
        ),
        (
            "cpu-budget",
            plant(
                &good,
                "intra_threads = 1",
                "intra_threads = 1\ncores = [900, 901]",
            ),
            "settings",
            "core 900, which this process may not run on",
        ),
        (
            "model-features",
            plant(&good, "name = \"dwell_max\"", "name = \"dwell_longest\""),
            "models",
            "job computes feature `dwell_longest` that manifest.json does not list",
        ),
        (
            "missing-topic",
            plant(
                &good,
                "topic = \"validate-clicks",
                "topic = \"no-such-topic-validate-clicks",
            ),
            "brokers and topics",
            "no-such-topic-validate-clicks",
        ),
    ];
    for (name, text, check, containing) in cases {
        let job = write(&scratch, &format!("{name}.toml"), &text)?;
        let (ok, report) = validate(&job)?;
        ensure!(!ok, "`{name}` passed validation:\n{report}");
        expect_line(&report, check, "FAILED", containing)
            .map_err(|e| e.context(format!("case `{name}`")))?;
        ensure!(
            report.contains("1 problem(s) found"),
            "case `{name}`: one planted error, not one problem:\n{report}"
        );
    }
    Ok(())
}

#[test]
fn every_problem_of_one_file_is_listed() -> Result<()> {
    let scratch = Scratch::new("validate-all");
    let checkpoints = scratch.path().join("ckpt");
    foreign_checkpoint(&checkpoints)?;
    let text = plant(
        &good_job_text()?,
        "topic = \"validate-clicks",
        "topic = \"no-such-topic-validate-clicks",
    );
    let text = format!(
        "{}\n[checkpoint]\ndir = \"{}\"\ninterval = \"1s\"\n",
        plant(&text, "name = \"dwell_max\"", "name = \"dwell_longest\""),
        checkpoints.display()
    );
    // The features changed, so the checkpoint's topology is another job's either way; here
    // it differs from both.
    let job = write(&scratch, "job.toml", &text)?;
    let (ok, report) = validate(&job)?;
    ensure!(!ok, "passed validation:\n{report}");
    expect_line(&report, "brokers and topics", "FAILED", "no-such-topic")?;
    expect_line(&report, "models", "FAILED", "dwell")?;
    expect_line(&report, "checkpoints", "FAILED", "")?;
    expect_line(&report, "settings", "ok", "")?;
    ensure!(report.contains("3 problem(s) found"), "{report}");
    Ok(())
}

#[test]
fn a_missing_input_file_is_reported() -> Result<()> {
    let scratch = Scratch::new("validate-input");
    let missing = scratch.path().join("missing.jsonl");
    let text = plant(
        &clickstream::job_text(),
        "[source]\n",
        &format!(
            "[source]\nkind = \"file\"\npaths = [\"{}\"]\n",
            missing.display()
        ),
    );
    let text = plant(
        &text,
        "[sink]\n",
        &format!(
            "[sink]\nkind = \"file\"\npath = \"{}\"\n",
            scratch.path().join("out.jsonl").display()
        ),
    );
    let job = write(&scratch, "job.toml", &text)?;
    let (ok, report) = validate(&job)?;
    ensure!(!ok, "passed validation:\n{report}");
    expect_line(&report, "input files", "FAILED", "missing.jsonl")?;
    expect_line(&report, "brokers and topics", "skipped", "no Kafka")?;
    Ok(())
}
