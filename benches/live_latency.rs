//! Benchmark L (issue #18): live latency over Kafka on the dev broker, at 50 % and 80 % of
//! the job's maximum rate measured in the same run, against a same-run baseline of a raw
//! rdkafka producer's send → acknowledged latency at the same rate with the sink's settings.
//!
//! Run: `scripts/broker.sh start`, `WEIR_ORT_LIB=…` (scripts/setup.sh), then
//! `cargo bench --bench live_latency` (or `scripts/bench.sh L`, which writes its section of
//! BENCHMARKS.md). Optional: `WEIR_BENCH_L_SECONDS` (each live run's length, default 30),
//! `WEIR_BENCH_L_MAX_EVENTS` (the maximum-rate run's input, default 100 000),
//! `WEIR_BENCH_L_SHARES` (default `0.5,0.8`), `WEIR_BENCH_L_RATE` (events/s taken as the
//! maximum rate instead of measuring it: the same load for runs that compare settings),
//! `WEIR_BENCH_L_SINK` (`name=value,…` librdkafka properties for the job's score producer
//! and the baseline's, e.g. `linger.ms=0`),
//! `WEIR_BENCH_L_SOURCE` (the same for the job's consumers, e.g. `fetch.wait.max.ms=10`),
//! `WEIR_BENCH_L_INPUT` (the same for the producer of the job's input, which is not
//! idempotent unless told: `input_properties`),
//! `WEIR_BENCH_L_TICK_MS` (the job's `[runtime] tick`, default 100 as in the job file: windows
//! fire and scores are batched per tick), `WEIR_BENCH_L_BATCH_DELAY_MS` (the job's `[model]
//! max_batch_delay`, default the job file's 2 ms; 0 sends each activation's rows at once),
//! `WEIR_BENCH_L_OUT` (the markdown table, default `<target dir>/bench-results/L.md`),
//! `WEIR_BENCH_L_USERS` (default 20 000), `WEIR_BENCH_L_METRICS` (`host:port`: the job serves
//! `/metrics` there during each run, for its latency histograms by stage),
//! `WEIR_TEST_BROKERS` (default 127.0.0.1:9092), `WEIR_BENCH_L_BROKER=mock` (every topic on
//! librdkafka's mock cluster, started in this process, instead of the dev broker: a broker
//! that keeps its logs in memory and is not the bottleneck, so the job's own latency shows;
//! the table says which broker it was measured on).
//!
//! The job is `jobs/clickstream.toml` (8 features, its XGBoost model, 2 workers) with session
//! windows of gap 2 s and `max_out_of_orderness = "0s"`: each user's window closes on its own
//! once event time passes its last event by 2 s, so closes are spread over time as records
//! arrive (tumbling windows close every key's window at the same watermark, and that burst
//! would be what a percentile measured). Input: clickstream-shaped JSON over 20 000 users
//! (`WEIR_BENCH_L_USERS`), in event-time order, 2 partitions.
//!
//! 1. Maximum rate: a bounded run over `MAX_EVENTS` records produced beforehand (untimed);
//!    events / wall time.
//! 2. For each share: a paced producer writes records stamped with the wall clock (`ts` =
//!    now) at share × maximum for `SECONDS`, while the job runs unbounded from the topic's
//!    start; once it has read every record (its `/metrics`, up to 2 min: a job behind the
//!    producer catches up first) it is stopped. Its summary gives the HDR percentiles of live
//!    scores (scores acknowledged while a source was behind its partitions' ends are catch-up
//!    and left out): window close (the watermark passing the window's end) → score
//!    acknowledged by the broker, and ingest (the source's read of the window's latest
//!    record, ms resolution) → score produced, which includes the 2 s gap the window waits
//!    for by definition. The baseline then sends as many records as the job scored, at the rate it
//!    scored them, shaped as the score records (their mean payload size, the same headers
//!    with values of their mean sizes: `score_records`), with the job sink's producer settings
//!    (`acks=all`, `linger.ms=5`, idempotence), and measures send → acknowledged: the broker's
//!    part of close → acked.

#[path = "results/mod.rs"]
mod results;

#[path = "case_process/mod.rs"]
mod case_process;

#[path = "score_records/mod.rs"]
mod score_records;

// The tests' broker, topic and naming helpers (this benchmark leaves their produce and read
// helpers unused).
#[path = "../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use case_process::{clickstream_job, env_or};
use kafka::{fresh_topic, properties_from_env, unique_topic};
use weir::{JobFile, RunSummary};
use weir_kafka::mock_broker::MockBroker;
use weir_kafka::properties::client_config;
use weir_kafka::topic_reader::read_topic;
use weir_kafka::SINK_PRODUCER_DEFAULTS;
use weir_operators::clock::unix_ms;
use weir_operators::metrics::LatencySummary;
use weir_testkit::cluster::free_port;
use weir_testkit::scrape;

use score_records::ScoreRecordShape;

/// Users the events are spread over: `WEIR_BENCH_L_USERS`, default 20 000. A session closes
/// when its user is silent for the 2 s gap, so at a higher rate (a faster broker) the same
/// share of closing windows needs proportionally more users.
fn users() -> u32 {
    static USERS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *USERS.get_or_init(|| env_or("WEIR_BENCH_L_USERS", 20_000))
}
const WINDOW: &str = "kind = \"session\"\ngap = \"2s\"\nmax_length = \"1h\"";

/// The cluster the benchmark's topics are on: the dev broker (`WEIR_TEST_BROKERS`), or
/// librdkafka's mock cluster in this process (`WEIR_BENCH_L_BROKER=mock`).
struct Cluster {
    bootstrap: String,
    /// The mock cluster, up while this lives; `None`: the dev broker.
    mock: Option<MockBroker>,
}

impl Cluster {
    fn from_env() -> Result<Cluster> {
        match std::env::var("WEIR_BENCH_L_BROKER").as_deref() {
            Ok("mock") => {
                let mock = MockBroker::start(1)?;
                Ok(Cluster {
                    bootstrap: mock.bootstrap_servers(),
                    mock: Some(mock),
                })
            }
            Ok("dev") | Err(_) => Ok(Cluster {
                bootstrap: kafka::brokers(),
                mock: None,
            }),
            Ok(other) => anyhow::bail!("WEIR_BENCH_L_BROKER is `mock` or `dev`, not `{other}`"),
        }
    }

    /// What the table says it ran on.
    fn describe(&self) -> String {
        match self.mock {
            Some(_) => {
                "librdkafka's mock cluster (1 broker, in the benchmark's process, logs in memory)"
                    .to_owned()
            }
            None => format!("the dev broker at {}", self.bootstrap),
        }
    }

    /// Client properties for it.
    fn properties(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("bootstrap.servers".to_owned(), self.bootstrap.clone())])
    }

    /// A fresh topic of `partitions` partitions, named after `prefix`.
    fn topic(&self, prefix: &str, partitions: i32) -> Result<String> {
        match &self.mock {
            Some(mock) => {
                let name = unique_topic(prefix);
                mock.create_topic(&name, partitions)?;
                Ok(name)
            }
            None => fresh_topic(prefix, partitions),
        }
    }
}

/// The job's `[runtime] tick` in ms: `WEIR_BENCH_L_TICK_MS`, default the job file's (100).
fn tick_ms() -> i64 {
    env_or("WEIR_BENCH_L_TICK_MS", 100)
}

/// One clickstream-shaped event of a random user at event time `ts`: its key and payload.
fn event(rng: &mut StdRng, ts: i64) -> (String, String) {
    let user = format!("u{:05}", rng.random_range(0..users()));
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

/// A producer with the job sink's defaults (`weir_kafka::SINK_PRODUCER_DEFAULTS`: `acks=all`,
/// `linger.ms=5`, idempotence) and `extra` on top.
fn producer(cluster: &Cluster, extra: &[(String, String)]) -> Result<PacedProducer> {
    let mut properties = cluster.properties();
    properties.extend(extra.iter().cloned());
    Ok(
        client_config(&properties, SINK_PRODUCER_DEFAULTS).create_with_context(AckTimes {
            hdr: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3)?),
            failed: Default::default(),
        })?,
    )
}

/// The settings of the producer that writes the job's input, on top of the sink's: not
/// idempotent. It is the load, not what is measured, and an idempotent producer has one
/// request of a partition in flight at a time (BENCHMARKS.md, P). Before the librdkafka fix
/// (`vendor/README.md`) it also polled without sleeping while it waited: on the dev broker it
/// took most of a core of this 2-core machine, and the job fell behind at 80 % of its maximum
/// rate. `WEIR_BENCH_L_INPUT` (`name=value,…`) is set over them.
fn input_properties() -> Vec<(String, String)> {
    let mut properties = vec![("enable.idempotence".to_owned(), "false".to_owned())];
    properties.extend(properties_from_env("WEIR_BENCH_L_INPUT"));
    properties
}

/// Sends `payload` under `key`, with `headers` when given; the record's opaque is its send
/// time, from which its acknowledgement's latency is measured.
fn send(
    producer: &PacedProducer,
    topic: &str,
    key: &str,
    payload: &[u8],
    headers: Option<OwnedHeaders>,
) {
    let mut record = BaseRecord::with_opaque_to(topic, Box::new(Instant::now()))
        .key(key)
        .payload(payload);
    record.headers = headers;
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
fn job(cluster: &Cluster, input: &str, bounded: bool) -> Result<(JobFile, String)> {
    let scores = cluster.topic("bench-l-scores", 2)?;
    let mut job = clickstream_job(WINDOW)?;
    job.watermark.max_out_of_orderness = 0;
    job.runtime.tick = tick_ms();
    if let Ok(ms) = std::env::var("WEIR_BENCH_L_BATCH_DELAY_MS") {
        job.model
            .as_mut()
            .context("clickstream.toml has a [model]")?
            .max_batch_delay = ms.parse().context("WEIR_BENCH_L_BATCH_DELAY_MS")?;
    }
    job.kafka = cluster.properties();
    job.source.topic = input.to_owned();
    job.source.bounded = bounded;
    job.sink.topic = scores.clone();
    job.sink.dead_letter_topic = cluster.topic("bench-l-dlq", 1)?;
    job.sink
        .kafka
        .extend(properties_from_env("WEIR_BENCH_L_SINK"));
    job.source
        .kafka
        .extend(properties_from_env("WEIR_BENCH_L_SOURCE"));
    Ok((job, scores))
}

/// Where a run serves `/metrics`: `WEIR_BENCH_L_METRICS`, when set.
fn metrics_addr_from_env() -> Result<Option<SocketAddr>> {
    std::env::var("WEIR_BENCH_L_METRICS")
        .ok()
        .map(|addr| addr.parse())
        .transpose()
        .context("WEIR_BENCH_L_METRICS is host:port")
}

/// The records the job's sources have read, summed from its `/metrics` on `addr` (`None`
/// before the server answers).
fn records_read(addr: SocketAddr) -> Option<u64> {
    let (200, body) = scrape::get(addr, "/metrics").ok()? else {
        return None;
    };
    let samples = scrape::Samples::parse(&body).ok()?;
    Some(samples.sum("weir_records_in_total", &[("operator", "source")]) as u64)
}

/// Waits until the job serving `/metrics` on `addr` has read `records`, or `limit` has passed
/// (the caller's check of the job's summary then says by how much it fell short).
fn wait_until_read(addr: SocketAddr, records: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && records_read(addr).is_none_or(|read| read < records) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(job: JobFile, stop: Arc<AtomicBool>, metrics: Option<SocketAddr>) -> Result<RunSummary> {
    let options = weir::run::RunOptions {
        metrics_addr: metrics,
        ..Default::default()
    };
    let summary =
        weir::run::run_job_with(job.compile()?, weir::pipeline::Mode::Score, stop, &options)?;
    ensure!(summary.delivery_failures == 0, "delivery failures");
    ensure!(
        summary.dead_letters_total() == 0,
        "dead letters: {:?}",
        summary.dead_letters
    );
    Ok(summary)
}

/// The maximum rate: a bounded run over `events` records produced beforehand; events/s.
fn max_rate(cluster: &Cluster, events: u64) -> Result<f64> {
    let input = cluster.topic("bench-l-max-in", 2)?;
    let producer = producer(cluster, &input_properties())?;
    let mut rng = StdRng::seed_from_u64(42);
    let t0 = unix_ms() as i64 - 86_400_000;
    for i in 0..events {
        let (key, payload) = event(&mut rng, t0 + i as i64 / 4);
        send(&producer, &input, &key, payload.as_bytes(), None);
    }
    producer.flush(Duration::from_secs(120))?;
    let (job, _) = job(cluster, &input, true)?;
    let started = Instant::now();
    let summary = run(
        job,
        Arc::new(AtomicBool::new(false)),
        metrics_addr_from_env()?,
    )?;
    ensure!(
        summary.events_in == events,
        "read {} of {events}",
        summary.events_in
    );
    Ok(events as f64 / started.elapsed().as_secs_f64())
}

/// One live run at `rate` for `seconds`: the job's summary, the records produced and the
/// shape of the score records (mean payload size, headers).
fn live(cluster: &Cluster, rate: f64, seconds: f64) -> Result<(RunSummary, u64, ScoreRecordShape)> {
    let input = cluster.topic("bench-l-live-in", 2)?;
    let (job, scores) = job(cluster, &input, false)?;
    // The job serves `/metrics` for the wait below to read how far it got.
    let metrics = match metrics_addr_from_env()? {
        Some(addr) => addr,
        None => SocketAddr::from(([127, 0, 0, 1], free_port()?)),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || run(job, stop, Some(metrics)))
    };
    let producer = producer(cluster, &input_properties())?;
    let mut rng = StdRng::seed_from_u64(7);
    let produced = paced(rate, seconds, |_| {
        let (key, payload) = event(&mut rng, unix_ms() as i64);
        send(&producer, &input, &key, payload.as_bytes(), None);
    });
    producer.flush(Duration::from_secs(60))?;
    // A job behind the producer (a broker that slows as it fills) reads the rest first; its
    // scores read then are catch-up, not live, and left out of the percentiles.
    wait_until_read(metrics, produced, Duration::from_secs(120));
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
    let mut reader = cluster.properties();
    reader.insert("group.id".to_owned(), unique_topic("bench-l-reader"));
    let records = read_topic(&reader, &scores, Duration::from_secs(300))?;
    Ok((summary, produced, ScoreRecordShape::of(&records)))
}

/// The baseline: `records` records shaped as the job's scores (`shape`: payload size and
/// headers) at `rate`; send → acknowledged.
fn raw_produce(
    cluster: &Cluster,
    rate: f64,
    records: u64,
    shape: &ScoreRecordShape,
) -> Result<LatencySummary> {
    let output = cluster.topic("bench-l-raw-out", 2)?;
    let producer = producer(cluster, &properties_from_env("WEIR_BENCH_L_SINK"))?;
    let (payload, header_values) = (shape.payload(), shape.header_values());
    paced(rate, records as f64 / rate, |i| {
        let headers = ScoreRecordShape::headers_of(&header_values);
        send(
            &producer,
            &output,
            &format!("k{i}"),
            &payload,
            Some(headers),
        );
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
    let cluster = Cluster::from_env()?;
    let (max, measured_by) = match std::env::var("WEIR_BENCH_L_RATE") {
        Ok(rate) => (
            rate.parse().context("WEIR_BENCH_L_RATE")?,
            "given by `WEIR_BENCH_L_RATE`".to_owned(),
        ),
        Err(_) => (
            max_rate(&cluster, max_events)?,
            format!("a bounded run over {max_events} records"),
        ),
    };
    let mut table = String::new();
    writeln!(
        table,
        "Broker: {}. Tick {} ms. Maximum rate: {:.1} k events/s ({measured_by}). \
         Live runs of {seconds:.0} s each; latencies in ms, of live scores (HDR histograms).\n",
        cluster.describe(),
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
        let (summary, produced, shape) = live(&cluster, rate, seconds)?;
        // As many records as the job scored, at the rate it scored them.
        let scored = summary.scores_delivered.max(1000);
        let raw = raw_produce(&cluster, scored as f64 / seconds, scored, &shape)?;
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
