//! `weir replay-dlq` on the real broker: a job dead-letters records of three reasons; the
//! replay re-sends exactly the letters of the chosen reasons, with the original raw key and
//! payload bytes, and counts the others as skipped; a dry run counts the same and sends
//! nothing.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{ensure, Result};

use support::kafka::{create_topic, produce, read_all, unique_topic};
use weir::JobFile;
use weir_features::dead_letter::DeadLetterReason;
use weir_kafka::dlq_replay::{replay_dead_letters, ReplayRequest};
use weir_testkit::clickstream;

fn bad_records() -> Vec<(String, Vec<u8>)> {
    let mut records = Vec::new();
    for i in 0..4 {
        records.push((format!("m{i}"), format!("not json {i}\u{1}").into_bytes()));
        records.push((
            format!("w{i}"),
            format!(r#"{{"user":"w{i}","ts":"yesterday","type":"view","dwell_ms":1}}"#)
                .into_bytes(),
        ));
    }
    for i in 0..3 {
        records.push((
            format!("f{i}"),
            format!(r#"{{"user":"f{i}"}}"#).into_bytes(),
        ));
    }
    records
}

fn sorted(mut records: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    records.sort();
    records
}

#[test]
fn replay_resends_exactly_the_chosen_reasons_raw_bytes() -> Result<()> {
    let input = unique_topic("replay-in");
    let scores = unique_topic("replay-scores");
    let dlq = unique_topic("replay-dlq");
    let target = unique_topic("replay-target");
    for topic in [&input, &scores, &dlq, &target] {
        create_topic(topic, 2)?;
    }
    let records = bad_records();
    produce(&input, &records)?;
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.source.topic = input;
    job.source.bounded = true;
    job.sink.topic = scores;
    job.sink.dead_letter_topic = dlq.clone();
    weir::run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    ensure!(
        read_all(&dlq)?.len() == records.len(),
        "every record is a dead letter"
    );

    let mut request = ReplayRequest {
        properties: support::kafka::properties(),
        dead_letter_topic: dlq.clone(),
        to_topic: target.clone(),
        reasons: HashSet::from([DeadLetterReason::Malformed, DeadLetterReason::MissingField]),
        dry_run: true,
    };
    let want_counts = |resent: &[(&str, u64)], skipped: &[(&str, u64)]| {
        let map = |items: &[(&str, u64)]| -> BTreeMap<String, u64> {
            items.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        (map(resent), map(skipped))
    };
    let dry = replay_dead_letters(&request)?;
    let want = want_counts(
        &[("malformed", 4), ("missing_field", 3)],
        &[("wrong_type", 4)],
    );
    ensure!(
        (dry.resent.clone(), dry.skipped.clone()) == want,
        "dry run: {dry:?}"
    );
    ensure!(read_all(&target)?.is_empty(), "a dry run sent records");

    request.dry_run = false;
    let report = replay_dead_letters(&request)?;
    ensure!(report == dry, "{report:?} differs from the dry run {dry:?}");
    let got = sorted(
        read_all(&target)?
            .into_iter()
            .map(|r| (r.key.unwrap_or_default(), r.payload))
            .collect(),
    );
    let want = sorted(
        records
            .iter()
            .filter(|(key, _)| !key.starts_with('w'))
            .map(|(key, payload)| (key.clone().into_bytes(), payload.clone()))
            .collect(),
    );
    ensure!(got == want, "re-sent {got:?}");
    // Replaying writes nothing to the dead-letter topic.
    ensure!(read_all(&dlq)?.len() == records.len());
    Ok(())
}
