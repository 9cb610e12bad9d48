//! `[source] start` on the real broker: a job started from an RFC 3339 time reads exactly the
//! records whose Kafka timestamp is at or after it (resolved per partition with the broker's
//! offsets-for-times; a partition with none starts at its end), and a job started from
//! per-partition offsets reads exactly from those offsets. Every produced record is malformed
//! JSON, so each record the job reads comes back as one dead letter with its raw bytes: the
//! dead-letter topic is the exact set of records read. (Offsets that do not fit the topic stop
//! the job before its dataflow runs, which exits the process: their messages are unit-tested
//! in `operators/kafka/src/start_offsets.rs`.)

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Result};

use support::kafka::{create_topic, produce_to, read_all, unique_topic};
use weir::JobFile;
use weir_kafka::StartFrom;
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

fn records(prefix: &str, n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            (
                format!("k{i}"),
                format!("not json {prefix}{i}").into_bytes(),
            )
        })
        .collect()
}

/// Runs the clickstream job bounded over `input` from `start`; the raw payloads it
/// dead-lettered, sorted.
fn read_from(input: &str, start: StartFrom) -> Result<Vec<String>> {
    read_from_with(input, start, None)
}

/// [`read_from`] with checkpoints in `checkpoints`, restoring the newest one there.
fn read_from_with(
    input: &str,
    start: StartFrom,
    checkpoints: Option<&Path>,
) -> Result<Vec<String>> {
    let scores = unique_topic("scores");
    let dlq = unique_topic("dlq");
    create_topic(&scores, 1)?;
    create_topic(&dlq, 1)?;
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.source.topic = input.to_owned();
    job.source.bounded = true;
    job.source.start = start;
    job.sink.topic = scores;
    job.sink.dead_letter_topic = dlq.clone();
    if let Some(dir) = checkpoints {
        job.checkpoint = Some(toml::from_str(&checkpoint_toml(dir, "100ms"))?);
    }
    let summary = weir::run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    ensure!(summary.delivery_failures == 0, "delivery failures");
    let mut raw: Vec<String> = read_all(&dlq)?
        .into_iter()
        .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
        .collect();
    raw.sort();
    Ok(raw)
}

fn payloads(records: &[(String, Vec<u8>)]) -> Vec<String> {
    let mut all: Vec<String> = records
        .iter()
        .map(|(_, p)| String::from_utf8_lossy(p).into_owned())
        .collect();
    all.sort();
    all
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[test]
fn start_from_a_time_reads_exactly_the_records_at_or_after_it() -> Result<()> {
    let input = unique_topic("start-time");
    create_topic(&input, 3)?;
    let before = records("before", 6);
    // Partition 2 only has records from before the time: it starts at its end.
    produce_to(&input, 0, &before[..2])?;
    produce_to(&input, 1, &before[2..4])?;
    produce_to(&input, 2, &before[4..])?;
    // Producer timestamps are in ms: keep the time strictly between the two batches.
    std::thread::sleep(Duration::from_millis(20));
    let time = now_ms();
    std::thread::sleep(Duration::from_millis(20));
    let after = records("after", 5);
    produce_to(&input, 0, &after[..3])?;
    produce_to(&input, 1, &after[3..])?;

    let got = read_from(&input, StartFrom::Time(time))?;
    ensure!(got == payloads(&after), "from {time}: read {got:?}");
    // The same instant written in RFC 3339, as a job file or --from gives it.
    let text = weir_features::timestamp::rfc3339_from_millis(time).unwrap_or_default();
    let parsed: StartFrom = text.parse().map_err(anyhow::Error::msg)?;
    ensure!(
        parsed == StartFrom::Time(time),
        "{text} parsed as {parsed:?}"
    );
    // Before every record: everything; after every record: nothing.
    ensure!(read_from(&input, StartFrom::Time(time - 60_000))?.len() == 11);
    ensure!(read_from(&input, StartFrom::Time(now_ms() + 60_000))?.is_empty());
    Ok(())
}

#[test]
fn start_from_offsets_reads_each_partition_from_its_offset() -> Result<()> {
    let input = unique_topic("start-offsets");
    create_topic(&input, 2)?;
    let p0 = records("p0-", 5);
    let p1 = records("p1-", 4);
    produce_to(&input, 0, &p0)?;
    produce_to(&input, 1, &p1)?;

    let offsets: StartFrom = "0:3,1:1".parse().map_err(anyhow::Error::msg)?;
    let got = read_from(&input, offsets)?;
    let mut want = payloads(&p0[3..]);
    want.extend(payloads(&p1[1..]));
    want.sort();
    ensure!(got == want, "read {got:?}");
    // A partition not listed starts at its earliest offset; the end itself is allowed.
    let got = read_from(&input, StartFrom::Offsets(BTreeMap::from([(0, 5)])))?;
    ensure!(got == payloads(&p1), "read {got:?}");
    Ok(())
}

#[test]
fn a_checkpoint_to_restore_wins_over_start() -> Result<()> {
    let input = unique_topic("start-restore");
    create_topic(&input, 1)?;
    let first = records("first", 5);
    produce_to(&input, 0, &first)?;
    let dir = scratch_dir("start-restore");
    let ckpt = dir.join("ckpt");
    let got = read_from_with(
        &input,
        "0:2".parse().map_err(anyhow::Error::msg)?,
        Some(&ckpt),
    )?;
    ensure!(got == payloads(&first[2..]), "first run read {got:?}");
    let second = records("second", 2);
    produce_to(&input, 0, &second)?;
    // `0:0` would read all seven records; the checkpoint resumes after the first run's five.
    let got = read_from_with(
        &input,
        "0:0".parse().map_err(anyhow::Error::msg)?,
        Some(&ckpt),
    )?;
    ensure!(got == payloads(&second), "restored run read {got:?}");
    Ok(())
}
