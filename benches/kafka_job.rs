//! Benchmark K (issue #18): Kafka → features → Kafka on the dev broker, as a bounded `weir run`
//! of `jobs/clickstream.toml` (1-minute tumbling windows, 8 features, its tiny XGBoost model:
//! the score stage is in the path but cheap), with and without checkpoints, against a same-run
//! baseline of raw rdkafka (Rust): a consumer reading the same input topic to its end plus a
//! producer writing records like the job's: as many as its score topic got, of their mean
//! payload size, with their headers (the same keys, values of their mean sizes). A second raw
//! run writes the same records without headers: on the dev broker (tansu, SQLite) each header
//! costs about as much as a record, so that run shows what the headers cost.
//!
//! Run: `scripts/broker.sh start`, `WEIR_ORT_LIB=…` (scripts/setup.sh), then
//! `cargo bench --bench kafka_job` (or `scripts/bench.sh K`, which writes its section of
//! BENCHMARKS.md). Optional: `WEIR_BENCH_K_EVENTS` (default 200 000), `WEIR_BENCH_K_REPEATS`
//! (default 2), `WEIR_BENCH_K_OUT` (the markdown table, default `<target dir>/bench-results/K.md`),
//! `WEIR_TEST_BROKERS` (default 127.0.0.1:9092), `WEIR_BENCH_K_SINK` / `WEIR_BENCH_K_SOURCE`
//! (`name=value,…` librdkafka properties added to the job's `[sink.kafka]` / `[source.kafka]`,
//! to try settings).
//!
//! The input (`weir gen`'s clickstream, seed 42, 20 000 users) is produced once to a fresh
//! topic of 2 partitions, untimed. Each repeat runs the job, the job with checkpoints (local
//! directory, every second), the job with one sink instance (`[parallelism] sink = 1`: one
//! score producer instead of one per worker), the baseline and the raw run without headers,
//! in that order, so load from elsewhere spreads over all of them; the best wall time of each
//! is shown (on a shared machine noise only adds time). Ratios are throughputs: baseline time /
//! job time.

#[path = "results/mod.rs"]
mod results;

#[path = "score_records/mod.rs"]
mod score_records;

use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

// The tests' broker, topic and naming helpers (this benchmark leaves their produce and read
// helpers unused).
#[path = "../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use kafka::{brokers, fresh_topic, properties, properties_from_env, unique_topic};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir::JobFile;
use weir_kafka::record_producer::RecordProducer;
use weir_kafka::topic_reader::read_topic;
use weir_testkit::clickstream;
use weir_testkit::files::Scratch;

use score_records::ScoreRecordShape;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The baseline: reads `input` to its end with a plain consumer, then produces as many records
/// as `outputs` describes, of its payload size and (`with_headers`) with its headers, to a
/// fresh topic and waits for every acknowledgement.
fn raw_consume_produce(
    input: &str,
    events: usize,
    outputs: &ScoreRecordShape,
    with_headers: bool,
) -> Result<Duration> {
    let output = fresh_topic("bench-k-raw-out", 2)?;
    let started = Instant::now();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique_topic("bench-k-raw"))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..2 {
        assignment.add_partition_offset(input, p, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let (mut read, mut bytes) = (0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(600);
    while read < events {
        ensure!(
            Instant::now() < deadline,
            "raw consumer read {read} of {events}"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            bytes += message?.payload().map_or(0, <[u8]>::len);
            read += 1;
        }
    }
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .create()?;
    let payload = outputs.payload();
    let values = outputs.header_values();
    for i in 0..outputs.records {
        let key = format!("k{i}");
        let mut record = BaseRecord::<_, _>::to(&output).key(&key).payload(&payload);
        if with_headers {
            record = record.headers(ScoreRecordShape::headers_of(&values));
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120))?;
    ensure!(bytes > 0, "the raw consumer read no bytes");
    Ok(started.elapsed())
}

/// One bounded `weir run` of the clickstream job over `input`, with `[parallelism] sink` set to
/// `sinks` when given; returns its wall time and what it wrote.
fn job(
    input: &str,
    checkpoints: Option<&Scratch>,
    sinks: Option<usize>,
) -> Result<(Duration, ScoreRecordShape)> {
    let scores = fresh_topic("bench-k-scores", 2)?;
    let dlq = fresh_topic("bench-k-dlq", 1)?;
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = properties();
    job.runtime.workers = 2;
    job.parallelism.sink = sinks;
    job.source.topic = input.to_owned();
    job.source.bounded = true;
    job.sink.topic = scores.clone();
    job.sink.dead_letter_topic = dlq;
    job.sink
        .kafka
        .extend(properties_from_env("WEIR_BENCH_K_SINK"));
    job.source
        .kafka
        .extend(properties_from_env("WEIR_BENCH_K_SOURCE"));
    if let Some(dir) = checkpoints {
        let text = format!(
            "{}\n",
            weir_testkit::files::checkpoint_toml(dir.path(), "1s")
        );
        job.checkpoint = Some(toml::from_str(&text)?);
    }
    let started = Instant::now();
    let summary = weir::run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    let took = started.elapsed();
    ensure!(summary.delivery_failures == 0, "delivery failures");
    if checkpoints.is_some() {
        ensure!(summary.checkpoints_committed > 0, "no checkpoint committed");
    }
    let mut reader = properties();
    reader.insert("group.id".to_owned(), unique_topic("bench-k-reader"));
    let records = read_topic(&reader, &scores, Duration::from_secs(300))?;
    ensure!(
        records.len() as u64 == summary.scores_delivered,
        "{} score records for {} delivered",
        records.len(),
        summary.scores_delivered
    );
    Ok((took, ScoreRecordShape::of(&records)))
}

fn main() -> Result<()> {
    let events = env_usize("WEIR_BENCH_K_EVENTS", 200_000);
    let repeats = env_usize("WEIR_BENCH_K_REPEATS", 2);
    let config = ClickstreamConfig {
        seed: 42,
        events: events as u64,
        users: 20_000,
        ..ClickstreamConfig::default()
    };
    let input = fresh_topic("bench-k-clicks", 2)?;
    let mut producer = RecordProducer::create(&brokers(), &input, &[])?;
    for event in Clickstream::new(config)? {
        producer.send(event.key.as_bytes(), &event.payload)?;
    }
    producer.finish()?;
    let mut best = [Duration::MAX; 5];
    let mut outputs = ScoreRecordShape::default();
    for _ in 0..repeats {
        let plain;
        (plain, outputs) = job(&input, None, None)?;
        let dir = Scratch::new("bench-k-ckpt");
        let (with_checkpoints, _) = job(&input, Some(&dir), None)?;
        let (one_sink, _) = job(&input, None, Some(1))?;
        let raw = raw_consume_produce(&input, events, &outputs, true)?;
        let raw_bare = raw_consume_produce(&input, events, &outputs, false)?;
        let runs = [raw, raw_bare, plain, with_checkpoints, one_sink];
        for (slot, took) in best.iter_mut().zip(runs) {
            *slot = (*slot).min(took);
        }
    }
    let [raw, raw_bare, plain, with_checkpoints, one_sink] = best;
    let (records, size) = (outputs.records, outputs.payload_bytes);
    let headers: Vec<String> = outputs
        .headers
        .iter()
        .map(|(key, len)| format!("`{key}` ({len} B)"))
        .collect();
    let rate = |d: Duration| events as f64 / d.as_secs_f64() / 1e3;
    let mut table = String::new();
    writeln!(
        table,
        "Input: {events} events in 2 partitions; output: {records} score records, payloads of {size} bytes and headers {} on average. Best of {repeats}; k events/s.\n",
        headers.join(", ")
    )?;
    writeln!(
        table,
        "| case | wall s | k events/s | / baseline | / raw without headers |"
    )?;
    writeln!(table, "|---|---|---|---|---|")?;
    let cases = [
        (
            format!("baseline: raw rdkafka consume + produce of {records} records like the job's"),
            raw,
        ),
        (
            "raw rdkafka consume + produce, the same records without headers".to_owned(),
            raw_bare,
        ),
        ("job".to_owned(), plain),
        ("job, checkpoints every 1 s".to_owned(), with_checkpoints),
        (
            "job, `[parallelism] sink = 1` (one producer)".to_owned(),
            one_sink,
        ),
    ];
    for (name, took) in cases {
        let secs = took.as_secs_f64();
        writeln!(
            table,
            "| {name} | {secs:.2} | {:.1} | {:.2} | {:.2} |",
            rate(took),
            raw.as_secs_f64() / secs,
            raw_bare.as_secs_f64() / secs
        )?;
    }
    results::write_table("WEIR_BENCH_K_OUT", "K", &table)?;
    Ok(())
}
