//! Benchmark P: the CPU a Kafka sink producer costs per record while its broker is slow to
//! acknowledge, with the sink's settings (`weir_kafka::SINK_PRODUCER_DEFAULTS`: `acks=all`,
//! `linger.ms=5`, idempotence) against a same-run baseline of the same producer without
//! idempotence, and beside a third that keeps each partition's order without idempotence
//! (one request in flight per connection).
//!
//! Why: librdkafka's idempotent producer (2.12.1, rdkafka-sys 4.10) keeps at most 5 messages
//! of a partition in flight, so a produce request of 5 records or more is the partition's only
//! one until it is answered; meanwhile the records queued behind it are past `linger.ms`. As
//! published, that set its broker thread's next wake-up to "now" and it polled its sockets
//! without sleeping until the answer came (`rd_kafka_toppar_producer_serve` in
//! `rdkafka_broker.c`): against a broker taking tens or hundreds of ms to answer (acks from
//! slow replicas, a loaded or distant cluster, the dev broker), most of a core per producer.
//! The copy Weir builds is patched (`vendor/README.md`); this benchmark shows the producer's
//! CPU and acknowledgement times with whichever librdkafka is linked.
//!
//! Run: `cargo bench --bench producer_cpu` (or `scripts/bench.sh P`, which writes its section
//! of BENCHMARKS.md). Optional: `WEIR_BENCH_P_RATE` (records/s, default 3 000),
//! `WEIR_BENCH_P_SECONDS` (per case, default 5), `WEIR_BENCH_P_OUT` (the markdown table,
//! default `<target dir>/bench-results/P.md`).
//!
//! Each case: librdkafka's mock cluster (one broker, in this process) with a round-trip time
//! of 1, 20 or 200 ms, a topic of 2 partitions, and a producer sending 500-byte records under
//! 20 000 keys, paced at the rate for the case's seconds. Measured: the CPU time of the
//! producer's own threads (those librdkafka starts for it, read from `/proc/self/task`; the
//! mock broker's threads, started before, are not counted) while it sends, as a share of
//! one core and per record, and send → acknowledged p50 / p99 from its delivery reports.

#[path = "results/mod.rs"]
mod results;

#[path = "case_process/mod.rs"]
mod case_process;

#[path = "thread_cpu/mod.rs"]
mod thread_cpu;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use weir_kafka::properties::client_config;
use weir_kafka::SINK_PRODUCER_DEFAULTS;

use case_process::env_or;

const ROUND_TRIPS_MS: [u64; 3] = [1, 20, 200];
const PARTITIONS: i32 = 2;
const KEYS: u64 = 20_000;
const PAYLOAD_BYTES: usize = 500;
/// Settings that keep each partition's order without idempotence: one produce request in
/// flight per broker connection (a retried record may still be written twice).
const ORDERED_WITHOUT_IDEMPOTENCE: &[(&str, &str)] = &[
    ("enable.idempotence", "false"),
    ("max.in.flight.requests.per.connection", "1"),
];
/// The mock cluster's one broker.
const BROKER: i32 = 1;

/// Send → acknowledged times, µs.
struct AckTimes(Mutex<Histogram<u64>>);

impl ClientContext for AckTimes {}

impl ProducerContext for AckTimes {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Instant>) {
        if result.is_ok() {
            let micros = sent.elapsed().as_micros() as u64;
            lock(&self.0).saturating_record(micros.max(1));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one case measured.
struct Case {
    records: u64,
    /// CPU seconds of the producer's threads while it sent.
    cpu_s: f64,
    seconds: f64,
    acked: Histogram<u64>,
}

impl Case {
    fn core_percent(&self) -> f64 {
        100.0 * self.cpu_s / self.seconds
    }

    fn micros_per_record(&self) -> f64 {
        1e6 * self.cpu_s / self.records as f64
    }

    fn acked_ms(&self, quantile: f64) -> f64 {
        self.acked.value_at_quantile(quantile) as f64 / 1e3
    }
}

/// CPU seconds of this process's threads not in `before`.
fn new_threads_cpu(before: &BTreeSet<u32>) -> f64 {
    thread_cpu::threads("self")
        .into_iter()
        .filter(|thread| !before.contains(&thread.tid))
        .map(|thread| thread.cpu.as_secs_f64())
        .sum()
}

/// One producer with `settings` over the sink's, sending at `rate` for `seconds` to a mock
/// broker answering after `round_trip`.
fn case(round_trip: Duration, settings: &[(&str, &str)], rate: f64, seconds: f64) -> Result<Case> {
    let mock = MockCluster::new(1)?;
    mock.create_topic("p", PARTITIONS, 1)?;
    mock.broker_round_trip_time(BROKER, round_trip)?;
    let existing: BTreeSet<u32> = thread_cpu::threads("self")
        .into_iter()
        .map(|thread| thread.tid)
        .collect();
    let mut properties =
        BTreeMap::from([("bootstrap.servers".to_owned(), mock.bootstrap_servers())]);
    properties.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = client_config(&properties, SINK_PRODUCER_DEFAULTS);
    let hdr = Histogram::new_with_bounds(1, 3_600_000_000, 3)?;
    let producer: ThreadedProducer<AckTimes> =
        config.create_with_context(AckTimes(Mutex::new(hdr)))?;
    // Connected and, when idempotent, with its producer id before the clock starts: one
    // record sent and acknowledged, its time then forgotten.
    let payload = vec![b'x'; PAYLOAD_BYTES];
    let first = BaseRecord::with_opaque_to("p", Box::new(Instant::now()))
        .key("warm-up")
        .payload(&payload);
    producer.send(first).map_err(|(e, _)| e)?;
    producer
        .flush(Duration::from_secs(30))
        .context("the warm-up record")?;
    lock(&producer.context().0).reset();
    let cpu_before = new_threads_cpu(&existing);
    let started = Instant::now();
    let mut sent = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        let due = (started.elapsed().as_secs_f64() * rate) as u64;
        while sent < due {
            let key = format!("u{:05}", (sent * 7_919) % KEYS);
            let mut record = BaseRecord::with_opaque_to("p", Box::new(Instant::now()))
                .key(&key)
                .payload(&payload);
            while let Err((_, back)) = producer.send(record) {
                record = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let cpu_s = new_threads_cpu(&existing) - cpu_before;
    let seconds = started.elapsed().as_secs_f64();
    producer.flush(Duration::from_secs(60))?;
    let acked = lock(&producer.context().0).clone();
    anyhow::ensure!(
        acked.len() == sent,
        "{} of {sent} records acknowledged",
        acked.len()
    );
    Ok(Case {
        records: sent,
        cpu_s,
        seconds,
        acked,
    })
}

fn main() -> Result<()> {
    let rate = env_or("WEIR_BENCH_P_RATE", 3_000.0);
    let seconds = env_or("WEIR_BENCH_P_SECONDS", 5.0);
    let mut table = format!(
        "{rate:.0} records/s of {PAYLOAD_BYTES} bytes for {seconds:.0} s per case, {PARTITIONS} partitions, one mock broker; CPU of the producer's own threads while it sent.\n\n\
         | broker round trip | producer | CPU % of a core | CPU µs per record | / baseline | acked p50 ms | acked p99 ms |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for round_trip_ms in ROUND_TRIPS_MS {
        let round_trip = Duration::from_millis(round_trip_ms);
        let baseline = case(
            round_trip,
            &[("enable.idempotence", "false")],
            rate,
            seconds,
        )?;
        let sink = case(round_trip, &[], rate, seconds)?;
        let ordered = case(round_trip, ORDERED_WITHOUT_IDEMPOTENCE, rate, seconds)?;
        for (name, c) in [
            ("baseline: the sink's settings, not idempotent", &baseline),
            ("the sink's settings (idempotent)", &sink),
            ("not idempotent, one request in flight", &ordered),
        ] {
            table.push_str(&format!(
                "| {round_trip_ms} ms | {name} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                c.core_percent(),
                c.micros_per_record(),
                c.cpu_s / baseline.cpu_s,
                c.acked_ms(0.5),
                c.acked_ms(0.99),
            ));
        }
    }
    results::write_table("WEIR_BENCH_P_OUT", "P", &table)?;
    Ok(())
}
