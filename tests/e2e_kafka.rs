//! End-to-end on the real broker: generated clickstream (fixed seed, with malformed records)
//! → `weir` job (bounded) → score and dead-letter topics. The score topic must hold exactly
//! one record per (user, window) that the naive oracle expects, with its feature values and
//! with the score a raw ONNX Runtime session gives those features; every malformed record
//! must be in the dead-letter topic; and the output must be the same with 1 and 2 workers and
//! 1 and 4 partitions.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use support::kafka::{create_topic, produce, read_all, unique_topic, ReadRecord};
use support::oracle::{expected_windows, raw_ort_scores, WINDOW_MS};
use weir::gen::{Clickstream, ClickstreamConfig, GeneratedEvent};
use weir::JobFile;
use weir_testkit::clickstream;

const FEATURES: usize = 8;

fn generated() -> Result<Vec<GeneratedEvent>> {
    let config = ClickstreamConfig {
        seed: 7,
        events: 6_000,
        users: 150,
        malformed_fraction: 0.02,
        ..ClickstreamConfig::default()
    };
    Ok(Clickstream::new(config)?.collect())
}

/// Runs the clickstream job over a fresh input topic; returns (scores, dead letters).
fn run_once(
    events: &[GeneratedEvent],
    workers: usize,
    partitions: i32,
) -> Result<(Vec<ReadRecord>, Vec<ReadRecord>)> {
    let input = unique_topic("clicks");
    let scores = unique_topic("scores");
    let dlq = unique_topic("dlq");
    create_topic(&input, partitions)?;
    create_topic(&scores, 2)?;
    create_topic(&dlq, 1)?;
    let records: Vec<(String, Vec<u8>)> = events
        .iter()
        .map(|e| (e.key.clone(), e.payload.clone()))
        .collect();
    produce(&input, &records)?;

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.runtime.workers = workers;
    job.source.topic = input;
    job.source.bounded = true;
    job.sink.topic = scores.clone();
    job.sink.dead_letter_topic = dlq.clone();
    let summary = weir::run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    eprintln!(
        "workers={workers} partitions={partitions}\n{}",
        summary.render()
    );
    ensure!(summary.delivery_failures == 0, "delivery failures");
    Ok((read_all(&scores)?, read_all(&dlq)?))
}

fn window_of(record: &ReadRecord) -> Result<((String, i64), Value)> {
    let value: Value = serde_json::from_slice(&record.payload)?;
    let key = value["key"].as_str().context("key")?.to_owned();
    let start = value["window_start"].as_i64().context("window_start")?;
    Ok(((key, start), value))
}

fn feature_values(value: &Value) -> Result<Vec<f64>> {
    let features = value["features"].as_object().context("features")?;
    let names = [
        "events",
        "views",
        "clicks",
        "purchases",
        "dwell_mean",
        "dwell_max",
        "amount_sum",
        "amount_max",
    ];
    names
        .iter()
        .map(|n| {
            features
                .get(*n)
                .map(|v| v.as_f64().unwrap_or(f64::NAN))
                .context("feature missing")
        })
        .collect()
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// The comparable part of a score record: everything but inference time and source positions.
fn comparable(record: &ReadRecord) -> Result<String> {
    let mut value: Value = serde_json::from_slice(&record.payload)?;
    let object = value.as_object_mut().context("object")?;
    object.remove("inference_ts");
    object.remove("source");
    Ok(value.to_string())
}

/// The whole check, bounded in time: a broker that stops answering fails the test instead of
/// hanging it (the job itself, like any Kafka consumer, would wait for the broker forever).
#[test]
fn kafka_job_matches_the_oracle_and_is_independent_of_workers_and_partitions() -> Result<()> {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(check_all_configurations()));
    match finished.recv_timeout(std::time::Duration::from_secs(600)) {
        Ok(result) => result,
        Err(_) => anyhow::bail!(
            "no result after 10 minutes: is the broker at {} answering? (scripts/broker.sh status)",
            support::kafka::brokers()
        ),
    }
}

fn check_all_configurations() -> Result<()> {
    let events = generated()?;
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| e.payload.clone()).collect();
    let expected = expected_windows(&payloads);
    let malformed: BTreeSet<Vec<u8>> = events
        .iter()
        .filter(|e| e.malformed.is_some())
        .map(|e| e.payload.clone())
        .collect();
    ensure!(
        malformed.len() > 50,
        "the test input must contain malformed records"
    );

    let mut outputs = Vec::new();
    for (workers, partitions) in [(1, 1), (2, 4), (1, 4), (2, 1)] {
        let (scores, dead) = run_once(&events, workers, partitions)?;

        // Exactly one score record per expected (key, window), with the oracle's features.
        let mut seen = BTreeMap::new();
        for record in &scores {
            let (window, value) = window_of(record)?;
            ensure!(
                seen.insert(window.clone(), value).is_none(),
                "duplicate score for {window:?}"
            );
        }
        let expected_keys: BTreeSet<_> = expected.keys().cloned().collect();
        let seen_keys: BTreeSet<_> = seen.keys().cloned().collect();
        ensure!(
            expected_keys == seen_keys,
            "windows differ: {} expected, {} scored; first missing {:?}, first extra {:?}",
            expected_keys.len(),
            seen_keys.len(),
            expected_keys.difference(&seen_keys).next(),
            seen_keys.difference(&expected_keys).next()
        );
        let mut rows = Vec::new();
        for (window, value) in &seen {
            let got = feature_values(value)?;
            let want = &expected[window].features;
            ensure!(
                got.len() == FEATURES && got.iter().zip(want).all(|(a, b)| same(*a, *b)),
                "features of {window:?}: got {got:?}, want {want:?}"
            );
            ensure!(
                value["window_end"].as_i64() == Some(window.1 + WINDOW_MS),
                "window_end of {window:?}"
            );
            ensure!(
                value["revision"].as_u64() == Some(0),
                "revision of {window:?}"
            );
            rows.push(want.clone());
        }

        // Scores equal a raw ORT session on the oracle's features.
        let raw = raw_ort_scores(Path::new("tests/fixtures/model"), &rows)?;
        for ((window, value), want) in seen.iter().zip(raw) {
            let got = value["score"]
                .as_f64()
                .with_context(|| format!("no score for {window:?}: {value}"))?;
            ensure!(
                got == want,
                "score of {window:?}: got {got}, raw ORT {want}"
            );
        }
        // DESIGN.md §6: the model, the inference time, the window's bounds and the source
        // range are headers too, equal to the payload's.
        for record in &scores {
            let payload: Value = serde_json::from_slice(&record.payload)?;
            let header_of_payload = [
                ("weir.score_id", &payload["score_id"]),
                ("weir.model.name", &payload["model"]["name"]),
                ("weir.model.version", &payload["model"]["version"]),
                ("weir.inference_ts", &payload["inference_ts"]),
                ("weir.window_start", &payload["window_start"]),
                ("weir.window_end", &payload["window_end"]),
                ("weir.source.topic", &payload["source"]["topic"]),
                (
                    "weir.source.first.partition",
                    &payload["source"]["first"]["partition"],
                ),
                (
                    "weir.source.first.offset",
                    &payload["source"]["first"]["offset"],
                ),
                (
                    "weir.source.last.partition",
                    &payload["source"]["last"]["partition"],
                ),
                (
                    "weir.source.last.offset",
                    &payload["source"]["last"]["offset"],
                ),
            ];
            for (header, field) in header_of_payload {
                let want = match field {
                    Value::String(text) => text.clone(),
                    Value::Number(n) => n.to_string(),
                    other => anyhow::bail!("{header}'s payload field is {other}"),
                };
                ensure!(
                    record.headers.get(header) == Some(&want),
                    "header {header} is {:?}, payload says {want}",
                    record.headers.get(header)
                );
            }
        }

        // Every malformed record is in the dead-letter topic, with a reason and its position.
        let dead_payloads: BTreeSet<Vec<u8>> = dead.iter().map(|r| r.payload.clone()).collect();
        ensure!(
            dead.len() == malformed.len(),
            "{} dead letters for {} malformed records",
            dead.len(),
            malformed.len()
        );
        ensure!(
            dead_payloads == malformed,
            "dead-letter payloads differ from the malformed records"
        );
        for record in &dead {
            for header in [
                "weir.dlq.reason",
                "weir.dlq.error",
                "weir.dlq.topic",
                "weir.dlq.partition",
                "weir.dlq.offset",
            ] {
                ensure!(
                    record.headers.contains_key(header),
                    "dead letter without {header}"
                );
            }
        }

        let mut comparable: Vec<String> = scores.iter().map(comparable).collect::<Result<_>>()?;
        comparable.sort();
        outputs.push(((workers, partitions), comparable));
    }
    let (first_config, first) = &outputs[0];
    for (config, output) in &outputs[1..] {
        ensure!(
            output == first,
            "output with (workers, partitions) = {config:?} differs from {first_config:?}"
        );
    }
    Ok(())
}
