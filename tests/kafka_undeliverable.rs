//! A score the broker refuses does not stall the job (DESIGN.md §7, issue #15 item 3): it goes
//! to the dead-letter topic as `undeliverable` with the broker's error and the score record's
//! bytes, it is counted, and checkpoints go on committing. The refusal here is librdkafka's own
//! `MsgSizeTooLarge` at send: the job's `[sink.kafka] message.max.bytes` is set low (the dev
//! broker, tansu, takes records far larger than any broker default), and one input record's key
//! (allowed by a raised `max_key_bytes`) makes its score record larger than that. Needs the test
//! broker (`scripts/test.sh` starts it).

mod support;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};

use support::kafka::{create_topic, produce, read_all, unique_topic};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir::JobFile;
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_features::dead_letter::DeadLetterReason;
use weir_kafka::dead_letter_fit::{KEY_TRUNCATED_HEADER, PAYLOAD_TRUNCATED_HEADER};
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

/// The producer limit of the job's sinks.
const MAX_BYTES: usize = 20_000;

#[test]
fn a_score_the_broker_refuses_is_an_undeliverable_dead_letter_and_checkpoints_go_on() -> Result<()>
{
    let dir = scratch_dir("undeliverable");
    let (input, scores, dlq) = (
        unique_topic("undeliverable-clicks"),
        unique_topic("undeliverable-scores"),
        unique_topic("undeliverable-dlq"),
    );
    for topic in [&input, &scores, &dlq] {
        create_topic(topic, 1)?;
    }
    let mut records: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 9,
        events: 400,
        users: 20,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    // One event of a user whose key (12 KB) fits the raised key limit; its score record (the
    // key, and the key again in the JSON payload) is over MAX_BYTES.
    let template: serde_json::Value = serde_json::from_slice(&records[200].1)?;
    let big_user = "u".repeat(12_000);
    let big = serde_json::json!({
        "user": big_user,
        "ts": template["ts"],
        "type": "view",
        "dwell_ms": 100.0,
    });
    records.insert(200, (big_user.clone(), serde_json::to_vec(&big)?));
    produce(&input, &records)?;

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.runtime.workers = 1;
    job.source.topic = input.clone();
    job.source.bounded = true;
    job.source.max_key_bytes = 100_000;
    job.sink.topic = scores.clone();
    job.sink.dead_letter_topic = dlq.clone();
    job.sink
        .kafka
        .insert("message.max.bytes".to_owned(), MAX_BYTES.to_string());
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(
        &dir.join("ckpt"),
        "100ms",
    ))?);
    let summary = weir::run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    eprintln!("{}", summary.render());
    ensure!(
        summary.delivery_failures == 0,
        "{} records could not be delivered",
        summary.delivery_failures
    );

    // The big user's score is a dead letter, not a score; every other score was delivered.
    let letters = read_all(&dlq)?;
    ensure!(
        letters.len() == 1,
        "{} dead letters, expected the big user's score: {:?}",
        letters.len(),
        letters.iter().map(|l| &l.headers).collect::<Vec<_>>()
    );
    let letter = &letters[0];
    let header = |name: &str| letter.headers.get(name).map(String::as_str);
    ensure!(
        header("weir.dlq.reason") == Some("undeliverable"),
        "reason {:?}",
        letter.headers
    );
    let error = header("weir.dlq.error").unwrap_or_default();
    ensure!(
        error.contains(&scores) && error.to_lowercase().contains("too large"),
        "the error does not name the topic and the broker's refusal: {error}"
    );
    ensure!(
        header("weir.dlq.topic") == Some(input.as_str())
            && header("weir.dlq.offset") == Some("200"),
        "the letter does not point at the big user's record: {:?}",
        letter.headers
    );
    // The score record's bytes, cut to fit: the key first in full is not possible (12 KB key +
    // a payload with it again), so the payload is cut, from the start, and says so.
    let key = letter.key.as_deref().unwrap_or_default();
    ensure!(
        key == big_user.as_bytes() && header(KEY_TRUNCATED_HEADER).is_none(),
        "the letter's key is not the score's key ({} bytes)",
        key.len()
    );
    let cut_from: usize = header(PAYLOAD_TRUNCATED_HEADER)
        .context("the cut payload does not name its length")?
        .parse()?;
    ensure!(
        cut_from > MAX_BYTES - 12_000
            && letter.payload.starts_with(b"{")
            && letter.payload.len() < cut_from
            && String::from_utf8_lossy(&letter.payload).contains("\"features\""),
        "the payload is not the start of the score record ({} of {cut_from} bytes)",
        letter.payload.len()
    );
    let delivered = read_all(&scores)?;
    ensure!(
        delivered
            .iter()
            .all(|s| s.key.as_deref() != Some(big_user.as_bytes())),
        "the refused score is on the score topic"
    );
    ensure!(
        delivered.len() as u64 == summary.scores_delivered && summary.scores_delivered > 0,
        "{} scores on the topic, {} counted delivered",
        delivered.len(),
        summary.scores_delivered
    );
    ensure!(
        summary.dead_letters == vec![(DeadLetterReason::Undeliverable, 1)]
            && summary.dead_letters_delivered == 1,
        "dead letters counted {:?}, {} delivered",
        summary.dead_letters,
        summary.dead_letters_delivered
    );
    ensure!(
        summary.render().contains("undeliverable=1"),
        "the summary does not show the undeliverable letter"
    );

    // The newest checkpoint covers the whole input: the refusal stopped no commit.
    let manifest = LocalDirStore::open(dir.join("ckpt"))?
        .latest_valid()?
        .context("no checkpoint committed")?;
    let next = manifest
        .sources
        .get(&input)
        .and_then(|partitions| partitions.get(&0))
        .map(|at| at.next_offset);
    ensure!(
        next == Some(records.len() as i64),
        "the newest checkpoint (epoch {}) resumes at {next:?}, not after all {} records",
        manifest.epoch.0,
        records.len()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
