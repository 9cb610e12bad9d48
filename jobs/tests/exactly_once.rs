//! Exactly-once output (`[sink] delivery = "exactly_once"`, issue #15 item 2) through a
//! SIGKILL while the sinks' transactions are open, and a restore from the checkpoint.
//!
//! The dev broker (tansu 0.6) has no transactions (it refuses EndTxn), so this test runs on
//! librdkafka's mock cluster (`weir_kafka::mock_broker`), hosted in the test process; its
//! brokers are real TCP listeners the `weir` child processes connect to. The mock runs the
//! transactional protocol — InitProducerId with fencing, AddPartitionsToTxn, EndTxn — but
//! does not keep aborted records from readers: its EndTxn writes no transaction markers and
//! its fetch reports the last stable offset as the high watermark and no aborted
//! transactions. A `read_committed` consumer of the mock therefore also sees the records of
//! the killed run's open (aborted) transactions. What this test checks: a straight
//! exactly-once run commits each score — (key, window, revision, model version) — and each
//! dead letter once; the killed and restored run commits every one of them (nothing lost;
//! the restart's init_transactions with the same `transactional.id`s succeeds), nothing else,
//! and any output seen twice was already written by the killed run when it died (on a broker
//! with transactions, the aborted ones among those are invisible to `read_committed`). The
//! restore runs one sink instance where the killed run had two, and must fence the removed
//! instance's transactional ids (`weir_kafka::transaction_fence`; the mock answers the
//! requests but does not fence, so only that they were made is checked). That
//! each is seen exactly once by `read_committed` needs a broker with transactions (Apache
//! Kafka, Redpanda); it is not tested here.

#[path = "../../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use weir::gen::{Clickstream, ClickstreamConfig};
use weir_kafka::mock_broker::{read_to_end, MockBroker};
use weir_kafka::topic_reader::TopicRecord;
use weir_testkit::clickstream::{self, Topics};
use weir_testkit::files::{checkpoint_toml, scratch_dir};

/// A score's identity: key, window start and end, revision, model version.
type ScoreIdentity = (String, i64, i64, u64, String);
/// A dead letter's identity: reason, source partition and offset (the two runs read copies of
/// the input under different topic names).
type LetterIdentity = (String, String, String);

#[test]
fn killed_inside_a_transaction_and_restored_nothing_is_lost_and_repeats_are_the_killed_runs(
) -> Result<()> {
    let dir = scratch_dir("exactly-once");
    let mock = MockBroker::start(1)?;
    // The Kafka helpers read the broker address from here.
    std::env::set_var("WEIR_TEST_BROKERS", mock.bootstrap_servers());
    let names = ["clicks", "scores", "dlq", "straight-scores", "straight-dlq"];
    let [input, scores, dlq, straight_scores, straight_dlq] = names.map(kafka::unique_topic);
    mock.create_topic(&input, 2)?;
    for topic in [&scores, &straight_scores] {
        mock.create_topic(topic, 2)?;
    }
    for topic in [&dlq, &straight_dlq] {
        mock.create_topic(topic, 1)?;
    }
    let events: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 21,
        events: 6_000,
        users: 40,
        malformed_fraction: 0.02,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    let (first, rest) = events.split_at(2_000);

    // (a) Straight through, bounded, over the whole input.
    kafka::produce(&input, &events)?;
    let straight = Topics {
        input: &input,
        scores: &straight_scores,
        dead_letters: &straight_dlq,
    };
    let job = job_file(&dir, "straight", &straight, true)?;
    let status = run(&job, &dir.join("straight.log"), &[])?.wait()?;
    ensure!(status.success(), "the straight run failed: {status}");

    // (b) Unbounded over a second copy of the input fed while it runs, SIGKILLed with its
    // transactions open, then restored (bounded) to the end.
    let killed_input = kafka::unique_topic("clicks-killed");
    mock.create_topic(&killed_input, 2)?;
    kafka::produce(&killed_input, first)?;
    let killed = Topics {
        input: &killed_input,
        scores: &scores,
        dead_letters: &dlq,
    };
    let unbounded = job_file(&dir, "killed", &killed, false)?;
    let log = dir.join("killed.log");
    let mut child = run(&unbounded, &log, &[])?;
    wait_for_commits(&mut child, &log, 3)?;
    // Feed the rest while it runs; just after a checkpoint (an interval of 1 s), feed half an
    // interval more and kill it: the dead letters of the malformed records fed since then are
    // in open transactions.
    let mut chunks = rest.chunks(50);
    for chunk in chunks.by_ref().take(10) {
        kafka::produce(&killed_input, chunk)?;
        std::thread::sleep(Duration::from_millis(30));
    }
    let commits = fs::read_to_string(&log)?
        .matches("checkpoint committed")
        .count();
    wait_for_commits(&mut child, &log, commits + 1)?;
    let until = Instant::now() + Duration::from_millis(500);
    for chunk in chunks.by_ref() {
        kafka::produce(&killed_input, chunk)?;
        if Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    child.kill()?; // SIGKILL
    child.wait()?;
    // What the killed run wrote (on the mock, committed or not).
    let at_kill_scores = score_identities(&read(&scores)?)?;
    let at_kill_letters = letter_identities(&read(&dlq)?);
    for chunk in chunks {
        kafka::produce(&killed_input, chunk)?;
    }

    // Restored with one sink instance where the killed run had two: the restore fences the
    // removed instance's transactional ids (on the mock only the requests can be seen).
    let restored = job_file(&dir, "restored", &killed, true)?;
    let restored_log = dir.join("restored.log");
    let status = run(&restored, &restored_log, &["--parallelism", "sink=1"])?.wait()?;
    ensure!(
        status.success(),
        "the restored run failed: {status}: {}",
        restored_log.display()
    );
    let restored_text = fs::read_to_string(&restored_log)?;
    ensure!(
        restored_text.contains("restoring from checkpoint"),
        "the second run did not restore a checkpoint: {}",
        restored_log.display()
    );
    ensure!(
        restored_text.contains("fenced the removed instances' transactional ids")
            && restored_text.contains(".scores.1")
            && restored_text.contains(".dead-letters.1"),
        "the rescaled restore did not fence sink instance 1's ids: {}",
        restored_log.display()
    );

    let expected_scores = score_identities(&read(&straight_scores)?)?;
    let got_scores = score_identities(&read(&scores)?)?;
    once_each("score", &expected_scores)?;
    nothing_lost("score", &expected_scores, &got_scores, &at_kill_scores)?;
    let expected_letters = letter_identities(&read(&straight_dlq)?);
    let got_letters = letter_identities(&read(&dlq)?);
    once_each("dead letter", &expected_letters)?;
    nothing_lost(
        "dead letter",
        &expected_letters,
        &got_letters,
        &at_kill_letters,
    )?;
    drop(mock);
    fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A straight run commits each output once.
fn once_each<T: Ord + std::fmt::Debug>(what: &str, expected: &BTreeMap<T, usize>) -> Result<()> {
    ensure!(!expected.is_empty(), "the straight run wrote no {what}");
    let repeated: Vec<_> = expected.iter().filter(|(_, n)| **n != 1).take(5).collect();
    ensure!(
        repeated.is_empty(),
        "the straight run committed {what}s more than once: {repeated:?}"
    );
    Ok(())
}

/// The killed and restored run wrote every output of the straight run and nothing else; an
/// output it wrote twice had been written once by the killed run when it died.
fn nothing_lost<T: Ord + std::fmt::Debug>(
    what: &str,
    expected: &BTreeMap<T, usize>,
    got: &BTreeMap<T, usize>,
    at_kill: &BTreeMap<T, usize>,
) -> Result<()> {
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<_> = got
        .keys()
        .filter(|k| !expected.contains_key(*k))
        .take(5)
        .collect();
    ensure!(
        missing.is_empty() && extra.is_empty(),
        "{what}s differ from the straight run: {} expected, {} written; missing e.g. {missing:?}, extra e.g. {extra:?}",
        expected.len(),
        got.len()
    );
    let unexplained: Vec<_> = got
        .iter()
        .filter(|(k, n)| **n > 1 + at_kill.get(*k).copied().unwrap_or(0).min(1))
        .take(5)
        .collect();
    ensure!(
        unexplained.is_empty(),
        "{what}s written more often than once by the restored run and once by the killed run: {unexplained:?}"
    );
    let repeats = got.values().filter(|n| **n > 1).count();
    eprintln!(
        "{what}s: {} expected, all written; {repeats} also by the killed run before it died",
        expected.len()
    );
    Ok(())
}

fn score_identities(records: &[TopicRecord]) -> Result<BTreeMap<ScoreIdentity, usize>> {
    let mut counts = BTreeMap::new();
    for record in records {
        let score: serde_json::Value = serde_json::from_slice(&record.payload)?;
        let identity = (
            score["key"].as_str().context("key")?.to_owned(),
            score["window_start"].as_i64().context("window_start")?,
            score["window_end"].as_i64().context("window_end")?,
            score["revision"].as_u64().context("revision")?,
            score["model"]["version"]
                .as_str()
                .context("version")?
                .to_owned(),
        );
        *counts.entry(identity).or_insert(0) += 1;
    }
    Ok(counts)
}

fn letter_identities(records: &[TopicRecord]) -> BTreeMap<LetterIdentity, usize> {
    let mut counts = BTreeMap::new();
    for record in records {
        let header = |name: &str| record.headers.get(name).cloned().unwrap_or_default();
        let identity = (
            header("weir.dlq.reason"),
            header("weir.dlq.partition"),
            header("weir.dlq.offset"),
        );
        *counts.entry(identity).or_insert(0) += 1;
    }
    counts
}

/// Every record of `topic`, read with `isolation.level = read_committed`.
fn read(topic: &str) -> Result<Vec<TopicRecord>> {
    Ok(read_to_end(
        &kafka::properties(),
        topic,
        Duration::from_secs(60),
    )?)
}

/// The clickstream job on `topics`, exactly-once, with its own checkpoint directory per
/// input topic (the killed and the restored runs share one).
fn job_file(dir: &Path, name: &str, topics: &Topics<'_>, bounded: bool) -> Result<PathBuf> {
    let text = clickstream::kafka_job_text(&kafka::brokers(), topics);
    ensure!(
        text.contains("bounded = false"),
        "the clickstream job changed"
    );
    let text = text.replace("bounded = false", &format!("bounded = {bounded}"));
    let ckpt = dir.join(format!("ckpt-{}", topics.input));
    let text = format!(
        "{text}delivery = \"exactly_once\"\n\n[checkpoint]\n{}\n",
        checkpoint_toml(&ckpt, "1s")
    );
    let path = dir.join(format!("{name}.toml"));
    fs::write(&path, text)?;
    Ok(path)
}

fn run(job: &Path, log: &Path, flags: &[&str]) -> Result<Child> {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(job)
        .args(flags)
        .env("RUST_LOG", "info,librdkafka=warn")
        .stdout(fs::File::create(log.with_extension("out"))?)
        .stderr(fs::File::create(log)?)
        .spawn()
        .context("cannot start weir")
}

/// Waits until `log` shows `n` committed checkpoints.
fn wait_for_commits(child: &mut Child, log: &Path, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs::read_to_string(log)?
        .matches("checkpoint committed")
        .count()
        < n
    {
        ensure!(
            Instant::now() < deadline && child.try_wait()?.is_none(),
            "the job did not commit {n} checkpoints: {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
