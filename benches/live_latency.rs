//! Benchmark L (issue #18): live latency over Kafka on the dev broker, at 50 % and 80 % of
//! the job's maximum rate measured in the same run, against a same-run baseline of a raw
//! rdkafka producer's send → acknowledged latency at the same rate with the sink's settings.
//!
//! Run: `scripts/broker.sh start`, `WEIR_ORT_LIB=…` (scripts/setup.sh), then
//! `cargo bench --bench live_latency` (or `scripts/bench.sh L`, which writes its section of
//! BENCHMARKS.md). Optional: `WEIR_BENCH_L_SECONDS` (each live run's length, default 30),
//! `WEIR_BENCH_L_MAX_EVENTS` (the maximum-rate run's input, default 100 000),
//! `WEIR_BENCH_L_SHARES` (default `0.5,0.8`), `WEIR_BENCH_L_SINK` (`name=value,…` librdkafka
//! properties for the job's score producer and the baseline's, e.g. `linger.ms=0`),
//! `WEIR_BENCH_L_SOURCE` (the same for the job's consumers, e.g. `fetch.wait.max.ms=10`),
//! `WEIR_BENCH_L_TICK_MS` (the job's `[runtime] tick`, default 100 as in the job file: windows
//! fire and scores are batched per tick), `WEIR_BENCH_L_OUT` (the markdown table, default `<target dir>/bench-results/L.md`),
//! `WEIR_TEST_BROKERS` (default 127.0.0.1:9092).
//!
//! The job is `jobs/clickstream.toml` (8 features, its XGBoost model, 2 workers) with session
//! windows of gap 2 s and `max_out_of_orderness = "0s"`: each user's window closes on its own
//! once event time passes its last event by 2 s, so closes are spread over time as records
//! arrive (tumbling windows close every key's window at the same watermark, and that burst
//! would be what a percentile measured). Input: clickstream-shaped JSON over 20 000 users, in
//! event-time order, 2 partitions.
//!
//! 1. Maximum rate: a bounded run over `MAX_EVENTS` records produced beforehand (untimed);
//!    events / wall time.
//! 2. For each share: a paced producer writes records stamped with the wall clock (`ts` =
//!    now) at share × maximum for `SECONDS`, while the job runs unbounded from the topic's
//!    start; the job is then stopped. Its summary gives the HDR percentiles of live scores
//!    (scores acknowledged while a source was behind its partitions' ends are catch-up and
//!    left out): window close (the watermark passing the window's end) → score acknowledged
//!    by the broker, and ingest (the source's read of the window's latest record, ms
//!    resolution) → score produced, which includes the 2 s gap the window waits for by
//!    definition. The baseline then sends as many records as the job scored, at the rate it
//!    scored them, of the score records' mean size, with the job sink's producer settings (`acks=all`, `linger.ms=5`,
//!    idempotence), and measures send → acknowledged: the broker's part of close → acked.

#[path = "results/mod.rs"]
mod results;

#[path = "case_process/mod.rs"]
mod case_process;

// The tests' broker, topic and naming helpers (this benchmark leaves their produce and read
// helpers unused).
#[path = "../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use case_process::{clickstream_job, env_or};
use kafka::{brokers, fresh_topic, properties, properties_from_env, unique_topic};
use weir::{JobFile, RunSummary};
use weir_kafka::topic_reader::read_topic;
use weir_operators::clock::unix_ms;
use weir_operators::metrics::LatencySummary;

const USERS: u32 = 20_000;
const WINDOW: &str = "kind = \"session\"\ngap = \"2s\"\nmax_length = \"1h\"";

/// The job's `[runtime] tick` in ms: `WEIR_BENCH_L_TICK_MS`, default the job file's (100).
fn tick_ms() -> i64 {
    env_or("WEIR_BENCH_L_TICK_MS", 100)
}

/// One clickstream-shaped event of a random user at event time `ts`: its key and payload.
fn event(rng: &mut StdRng, ts: i64) -> (String, String) {
    let user = format!("u{:05}", rng.random_range(0..USERS));
    let kind = ["view", "view", "view", "click", "purchase"][rng.random_range(0..5)];
    let dwell = rng.random_range(100.0..9000.0f64);
    let amount = if kind == "purchase" {
        format!("{:.2}", rng.random_range(5.0..300.0f64))
    } else {
        "null".to_owned()
    };
    let payload = format!(
        r#"{{"user":"{user}","ts":{ts},"type":"{kind}","dwell_ms":{dwell:.1},"amount":{amount}}}"#
    );
    (user, payload)
}

/// Send → acknowledged times of a producer's records, µs, in an HDR histogram.
struct AckTimes {
    hdr: Mutex<Histogram<u64>>,
    failed: std::sync::atomic::AtomicU64,
}

impl ClientContext for AckTimes {}

impl ProducerContext for AckTimes {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Instant>) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let micros = sent.elapsed().as_micros() as u64;
        let mut hdr = self.hdr.lock().unwrap_or_else(PoisonError::into_inner);
        hdr.saturating_record(micros.max(1));
    }
}

type PacedProducer = ThreadedProducer<AckTimes>;

/// A producer with the job sink's defaults (`acks=all`, `linger.ms=5`, idempotence) and
/// `extra` on top.
fn producer(extra: &[(String, String)]) -> Result<PacedProducer> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers())
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("enable.idempotence", "true");
    for (k, v) in extra {
        config.set(k, v);
    }
    Ok(config.create_with_context(AckTimes {
        hdr: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3)?),
        failed: Default::default(),
    })?)
}

fn send(producer: &PacedProducer, topic: &str, key: &str, payload: &[u8]) {
    let mut record = BaseRecord::with_opaque_to(topic, Box::new(Instant::now()))
        .key(key)
        .payload(payload);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Calls `send(i)` for `i` in 0.. at `rate` per second for `seconds`; returns how many.
fn paced(rate: f64, seconds: f64, mut send: impl FnMut(u64)) -> u64 {
    let started = Instant::now();
    let mut sent = 0u64;
    loop {
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed >= seconds {
            return sent;
        }
        let due = (elapsed * rate) as u64;
        while sent < due {
            send(sent);
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// The benchmark's job over `input`, scores to a fresh topic (returned).
fn job(input: &str, bounded: bool) -> Result<(JobFile, String)> {
    let scores = fresh_topic("bench-l-scores", 2)?;
    let mut job = clickstream_job(WINDOW)?;
    job.watermark.max_out_of_orderness = 0;
    job.runtime.tick = tick_ms();
    job.kafka = properties();
    job.source.topic = input.to_owned();
    job.source.bounded = bounded;
    job.sink.topic = scores.clone();
    job.sink.dead_letter_topic = fresh_topic("bench-l-dlq", 1)?;
    job.sink
        .kafka
        .extend(properties_from_env("WEIR_BENCH_L_SINK"));
    job.source
        .kafka
        .extend(properties_from_env("WEIR_BENCH_L_SOURCE"));
    Ok((job, scores))
}

fn run(job: JobFile, stop: Arc<AtomicBool>) -> Result<RunSummary> {
    let summary = weir::run_job(job.compile()?, stop)?;
    ensure!(summary.delivery_failures == 0, "delivery failures");
    ensure!(
        summary.dead_letters_total() == 0,
        "dead letters: {:?}",
        summary.dead_letters
    );
    Ok(summary)
}

/// The maximum rate: a bounded run over `events` records produced beforehand; events/s.
fn max_rate(events: u64) -> Result<f64> {
    let input = fresh_topic("bench-l-max-in", 2)?;
    let producer = producer(&[])?;
    let mut rng = StdRng::seed_from_u64(42);
    let t0 = unix_ms() as i64 - 86_400_000;
    for i in 0..events {
        let (key, payload) = event(&mut rng, t0 + i as i64 / 4);
        send(&producer, &input, &key, payload.as_bytes());
    }
    producer.flush(Duration::from_secs(120))?;
    let (job, _) = job(&input, true)?;
    let started = Instant::now();
    let summary = run(job, Arc::new(AtomicBool::new(false)))?;
    ensure!(
        summary.events_in == events,
        "read {} of {events}",
        summary.events_in
    );
    Ok(events as f64 / started.elapsed().as_secs_f64())
}

/// One live run at `rate` for `seconds`: the job's summary, the records produced and the mean
/// size of the score records.
fn live(rate: f64, seconds: f64) -> Result<(RunSummary, u64, usize)> {
    let input = fresh_topic("bench-l-live-in", 2)?;
    let (job, scores) = job(&input, false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || run(job, stop))
    };
    let producer = producer(&[])?;
    let mut rng = StdRng::seed_from_u64(7);
    let produced = paced(rate, seconds, |_| {
        let (key, payload) = event(&mut rng, unix_ms() as i64);
        send(&producer, &input, &key, payload.as_bytes());
    });
    producer.flush(Duration::from_secs(60))?;
    // The last records' reads and the windows they close.
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let summary = running
        .join()
        .map_err(|_| anyhow::anyhow!("the job's thread panicked"))??;
    ensure!(
        summary.events_in == produced,
        "the job read {} of {produced} records",
        summary.events_in
    );
    let mut reader = properties();
    reader.insert("group.id".to_owned(), unique_topic("bench-l-reader"));
    let records = read_topic(&reader, &scores, Duration::from_secs(300))?;
    let size = records.iter().map(|r| r.payload.len()).sum::<usize>() / records.len().max(1);
    Ok((summary, produced, size))
}

/// The baseline: `records` records of `size` bytes at `rate`; send → acknowledged.
fn raw_produce(rate: f64, records: u64, size: usize) -> Result<LatencySummary> {
    let output = fresh_topic("bench-l-raw-out", 2)?;
    let producer = producer(&properties_from_env("WEIR_BENCH_L_SINK"))?;
    let payload = vec![b'x'; size];
    paced(rate, records as f64 / rate, |i| {
        send(&producer, &output, &format!("k{i}"), &payload);
    });
    producer.flush(Duration::from_secs(60))?;
    let context = producer.context();
    ensure!(
        context.failed.load(Ordering::Relaxed) == 0,
        "raw deliveries failed"
    );
    let hdr = context.hdr.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(LatencySummary::of_hdr(&hdr))
}

fn ms(us: Option<u64>) -> String {
    us.map_or("–".to_owned(), |us| format!("{:.1}", us as f64 / 1e3))
}

fn row(table: &mut String, what: &str, count: u64, l: LatencySummary) -> Result<()> {
    Ok(writeln!(
        table,
        "| {what} | {count} | {} | {} | {} |",
        ms(l.p50_us),
        ms(l.p99_us),
        ms(l.p999_us)
    )?)
}

fn main() -> Result<()> {
    let seconds: f64 = env_or("WEIR_BENCH_L_SECONDS", 30.0);
    let max_events: u64 = env_or("WEIR_BENCH_L_MAX_EVENTS", 100_000);
    let shares: Vec<f64> = std::env::var("WEIR_BENCH_L_SHARES")
        .unwrap_or_else(|_| "0.5,0.8".to_owned())
        .split(',')
        .map(|s| s.trim().parse().context("WEIR_BENCH_L_SHARES"))
        .collect::<Result<_>>()?;
    let max = max_rate(max_events)?;
    let mut table = String::new();
    writeln!(
        table,
        "Tick {} ms. Maximum rate: {:.1} k events/s (a bounded run over {max_events} records). \
         Live runs of {seconds:.0} s each; latencies in ms, of live scores (HDR histograms).\n",
        tick_ms(),
        max / 1e3
    )?;
    writeln!(
        table,
        "| load | latency | scores | p50 ms | p99 ms | p99.9 ms |"
    )?;
    writeln!(table, "|---|---|---|---|---|---|")?;
    for share in shares {
        let rate = max * share;
        let (summary, produced, size) = live(rate, seconds)?;
        // As many records as the job scored, at the rate it scored them.
        let scored = summary.scores_delivered.max(1000);
        let raw = raw_produce(scored as f64 / seconds, scored, size)?;
        eprintln!("{share}: {produced} records, {summary:?}");
        let load = format!(
            "{:.0} % ({:.1} k events/s, {produced} records)",
            share * 100.0,
            rate / 1e3
        );
        let mut rows = String::new();
        let close = summary.latency_live;
        let ingest = summary.ingest_to_score_live;
        row(
            &mut rows,
            "window close → score acknowledged (job)",
            close.count,
            close,
        )?;
        row(
            &mut rows,
            "baseline: raw producer send → acknowledged",
            raw.count,
            raw,
        )?;
        row(
            &mut rows,
            "ingest → score produced (job; includes the 2 s gap)",
            ingest.count,
            ingest,
        )?;
        for line in rows.lines() {
            writeln!(table, "| {load} {line}")?;
        }
    }
    results::write_table("WEIR_BENCH_L_OUT", "L", &table)?;
    Ok(())
}
