//! `weir replay --model A --model B` (issue #16 item 5) against oracles:
//! - over files, its figures equal those computed here from two separate `weir run`s, one per
//!   model, joined by (key, window, revision);
//! - a version against itself differs by nothing;
//! - over a Kafka topic on the real broker, `--from 0:A --to 0:B` replays exactly the records
//!   at offsets `A..B` (the same figures as a replay of those lines as a file), and nothing is
//!   written to the job's score or dead-letter topics.

#[path = "../../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use weir_testkit::clickstream::{self, Topics};
use weir_testkit::files::Scratch;

const LIGHTGBM: &str = "tests/fixtures/models/lightgbm";
const XGBOOST: &str = "tests/fixtures/model";

fn workspace(path: &str) -> PathBuf {
    clickstream::workspace_dir().join(path)
}

fn weir(args: &[&str]) -> Result<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .context("cannot start weir")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "weir {args:?} failed: {}\n{text}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(text)
}

/// `count` clickstream events from the generator, as JSON Lines.
fn events(scratch: &Scratch, count: usize) -> Result<Vec<String>> {
    let path = scratch.path().join("all-events.jsonl");
    let path_text = path.display().to_string();
    weir(&[
        "gen",
        "--events",
        &count.to_string(),
        "--users",
        "300",
        "--out",
        &path_text,
    ])?;
    Ok(fs::read_to_string(&path)?
        .lines()
        .map(str::to_owned)
        .collect())
}

fn write_lines(path: &Path, lines: &[String]) -> Result<()> {
    fs::write(path, lines.join("\n") + "\n")?;
    Ok(())
}

/// The number after `label` in `report` (`"mean 0.038574"` for label `"mean "`).
fn figure(report: &str, label: &str) -> Result<f64> {
    let rest = report
        .split_once(label)
        .with_context(|| format!("`{label}` not in:\n{report}"))?
        .1;
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-')
        .collect();
    number
        .parse()
        .with_context(|| format!("no number after `{label}` in:\n{report}"))
}

/// Scores by (key, window_end, revision) from a `weir run --output-file` file.
fn scores_of(path: &Path) -> Result<BTreeMap<(String, i64, u64), f64>> {
    let mut scores = BTreeMap::new();
    for line in fs::read_to_string(path)?.lines() {
        let record: serde_json::Value = serde_json::from_str(line)?;
        let id = (
            record["key"].as_str().unwrap_or_default().to_owned(),
            record["window_end"].as_i64().unwrap_or_default(),
            record["revision"].as_u64().unwrap_or_default(),
        );
        let score = record["score"]
            .as_f64()
            .context("a score record without a score")?;
        scores.insert(id, score);
    }
    Ok(scores)
}

#[test]
fn over_files_the_figures_equal_two_separate_runs_joined() -> Result<()> {
    let scratch = Scratch::new("replay-files");
    let input = scratch.path().join("events.jsonl");
    write_lines(&input, &events(&scratch, 20_000)?)?;
    let input_text = input.display().to_string();

    // The oracle: the job run once with each model, scores joined by window.
    let mut by_model = Vec::new();
    for model in [XGBOOST, LIGHTGBM] {
        let text = clickstream::job_text().replace(
            &workspace(XGBOOST).display().to_string(),
            &workspace(model).display().to_string(),
        );
        let job = scratch.path().join(format!("job-{}.toml", by_model.len()));
        fs::write(&job, text)?;
        let output = scratch
            .path()
            .join(format!("scores-{}.jsonl", by_model.len()));
        weir(&[
            "run",
            &job.display().to_string(),
            "--input-file",
            &input_text,
            "--output-file",
            &output.display().to_string(),
        ])?;
        by_model.push(scores_of(&output)?);
    }
    let (a, b) = (&by_model[0], &by_model[1]);
    ensure!(
        a.len() == b.len() && !a.is_empty(),
        "the two runs scored other windows"
    );
    let differences: Vec<f64> = a.iter().map(|(id, s)| (s - b[id]).abs()).collect();
    let mean = differences.iter().sum::<f64>() / differences.len() as f64;
    let max = differences.iter().copied().fold(0.0, f64::max);
    let disagree = a
        .iter()
        .filter(|(id, s)| (**s >= 0.5) != (b[*id] >= 0.5))
        .count();

    let job = clickstream::job_path().display().to_string();
    let (model_a, model_b) = (workspace(XGBOOST), workspace(LIGHTGBM));
    let report = weir(&[
        "replay",
        &job,
        "--model",
        &model_a.display().to_string(),
        "--model",
        &model_b.display().to_string(),
        "--input-file",
        &input_text,
    ])?;
    ensure!(
        report.contains(&format!("compared {} window(s)", a.len())),
        "{report}"
    );
    ensure!(
        (figure(&report, "mean ")? - mean).abs() < 2e-6,
        "mean {mean}:\n{report}"
    );
    ensure!(
        (figure(&report, "max ")? - max).abs() < 2e-6,
        "max {max}:\n{report}"
    );
    let agreement = 100.0 * (1.0 - disagree as f64 / a.len() as f64);
    ensure!(
        (figure(&report, "threshold 0.5: ")? - agreement).abs() < 0.006,
        "agreement {agreement}:\n{report}"
    );
    ensure!(figure(&report, "baseline bins: ")? > 0.0, "{report}");
    ensure!(
        report.contains("not compared: A failed 0, B failed 0"),
        "{report}"
    );

    // A version against itself.
    let same = weir(&[
        "replay",
        &job,
        "--model",
        &model_a.display().to_string(),
        "--model",
        &model_a.display().to_string(),
        "--input-file",
        &input_text,
    ])?;
    ensure!(same.contains("mean 0.000000, max 0.000000"), "{same}");
    ensure!(same.contains("100.00 %"), "{same}");
    ensure!(figure(&same, "baseline bins: ")?.abs() < 1e-9, "{same}");
    Ok(())
}

#[test]
fn over_kafka_from_and_to_offsets_replay_exactly_that_range_and_write_no_topic() -> Result<()> {
    let scratch = Scratch::new("replay-kafka");
    let lines = events(&scratch, 6_000)?;
    let [input, scores, dlq] =
        ["replay-clicks", "replay-scores", "replay-dlq"].map(kafka::unique_topic);
    for topic in [&input, &scores, &dlq] {
        kafka::create_topic(topic, 1)?;
    }
    let records: Vec<(String, Vec<u8>)> = lines
        .iter()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            let key = event["user"].as_str().unwrap_or_default().to_owned();
            (key, line.clone().into_bytes())
        })
        .collect();
    kafka::produce(&input, &records)?;
    let topics = Topics {
        input: &input,
        scores: &scores,
        dead_letters: &dlq,
    };
    let job = scratch.path().join("job.toml");
    fs::write(
        &job,
        clickstream::kafka_job_text(&kafka::brokers(), &topics),
    )?;

    let (from, to) = (1_000, 4_500);
    let (model_a, model_b) = (workspace(XGBOOST), workspace(LIGHTGBM));
    let models = [
        "--model",
        &model_a.display().to_string(),
        "--model",
        &model_b.display().to_string(),
    ]
    .map(str::to_owned);
    let mut args: Vec<String> = vec!["replay".into(), job.display().to_string()];
    args.extend(models.iter().cloned());
    args.extend([
        "--from".into(),
        format!("0:{from}"),
        "--to".into(),
        format!("0:{to}"),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let over_kafka = weir(&args)?;

    let range = scratch.path().join("range.jsonl");
    write_lines(&range, &lines[from..to])?;
    let mut args: Vec<String> = vec![
        "replay".into(),
        clickstream::job_path().display().to_string(),
    ];
    args.extend(models.iter().cloned());
    args.extend(["--input-file".into(), range.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let over_file = weir(&args)?;

    let comparison = |report: &str| -> String {
        report
            .lines()
            .skip_while(|line| !line.starts_with("compared "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    ensure!(
        !comparison(&over_kafka).is_empty() && comparison(&over_kafka) == comparison(&over_file),
        "the Kafka range and the file of its lines compare differently:\n{over_kafka}\n---\n{over_file}"
    );
    ensure!(
        over_kafka.contains(&format!("{} records read", to - from)),
        "read other than offsets {from}..{to}:\n{over_kafka}"
    );
    for topic in [&scores, &dlq] {
        let written = kafka::read_all(topic)?;
        ensure!(
            written.is_empty(),
            "the replay wrote {} record(s) to {topic}",
            written.len()
        );
    }
    Ok(())
}
