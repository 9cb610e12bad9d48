//! The sink's producer (idempotent, `weir_kafka::SINK_PRODUCER_DEFAULTS`) sleeps while a
//! produce request is in flight to a broker that is slow to answer.
//!
//! librdkafka 2.12.1 as published lets an idempotent producer keep at most 5 *records* of a
//! partition in flight, so a request of 5 records or more blocks the next one; the records
//! queued behind it pass `linger.ms`, which set its broker thread's next wake-up to "now",
//! and the thread polled without sleeping until the answer came: ~100 % of a core against a
//! broker answering in 200 ms (benchmark P, BENCHMARKS.md). `vendor/rdkafka-sys` carries
//! the fix (`vendor/README.md`). librdkafka counts its broker threads' poll-loop wake-ups in
//! its statistics; this test reads them while records are sent at a steady pace to a mock
//! broker with a 200 ms round trip.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{
    BaseRecord, DefaultProducerContext, DeliveryResult, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::statistics::Statistics;
use rdkafka::ClientContext;

use weir_kafka::properties::client_config;
use weir_kafka::SINK_PRODUCER_DEFAULTS;

const BROKER: i32 = 1;
const ROUND_TRIP: Duration = Duration::from_millis(200);
const SENDING: Duration = Duration::from_secs(3);
/// Records sent every 10 ms while `SENDING`: 1 000 records/s.
const RECORDS_PER_STEP: usize = 10;

/// The latest statistics report's wake-ups, summed over the producer's broker threads, and
/// the records not delivered.
#[derive(Default)]
struct Wakeups {
    reported: Mutex<Option<u64>>,
    failed: AtomicU64,
}

impl ClientContext for Wakeups {
    fn stats(&self, statistics: Statistics) {
        let total = statistics.brokers.values().filter_map(|b| b.wakeups).sum();
        *self.reported() = Some(total);
    }
}

impl ProducerContext for Wakeups {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Wakeups {
    fn reported(&self) -> MutexGuard<'_, Option<u64>> {
        self.reported.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next report's total (statistics come every 100 ms here).
    fn next_report(&self) -> u64 {
        *self.reported() = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(total) = *self.reported() {
                return total;
            }
            assert!(Instant::now() < deadline, "no statistics report in 10 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn an_idempotent_producer_does_not_poll_while_its_request_is_in_flight() {
    let mock = MockCluster::<DefaultProducerContext>::new(1).expect("a mock cluster");
    mock.create_topic("scores", 2, 1).expect("a topic");
    mock.broker_round_trip_time(BROKER, ROUND_TRIP)
        .expect("a round-trip time");
    // Built as the sink builds its producer: its defaults, the job's properties over them.
    let properties = BTreeMap::from([
        ("bootstrap.servers".to_owned(), mock.bootstrap_servers()),
        ("statistics.interval.ms".to_owned(), "100".to_owned()),
    ]);
    assert!(
        SINK_PRODUCER_DEFAULTS.contains(&("enable.idempotence", "true")),
        "this test is about the sink's idempotent producer"
    );
    let producer: ThreadedProducer<Wakeups> = client_config(&properties, SINK_PRODUCER_DEFAULTS)
        .create_with_context(Wakeups::default())
        .expect("a producer");
    // Connected, with its producer id, before counting.
    producer
        .send(BaseRecord::to("scores").key("k").payload("first"))
        .map_err(|(e, _)| e)
        .expect("the first record queued");
    producer
        .flush(Duration::from_secs(30))
        .expect("the first record acknowledged");

    let before = producer.context().next_report();
    let started = Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < SENDING {
        for _ in 0..RECORDS_PER_STEP {
            let key = format!("u{}", sent % 97);
            producer
                .send(BaseRecord::to("scores").key(&key).payload("a score"))
                .map_err(|(e, _)| e)
                .expect("a record queued");
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = producer.context().next_report();
    producer
        .flush(Duration::from_secs(30))
        .expect("every record acknowledged");
    assert_eq!(producer.context().failed.load(Ordering::Relaxed), 0);

    // Waking for batches, answers and statistics reports measured 33 wake-ups a second;
    // polling without sleeping measured 747 669.
    let per_second = (after - before) as f64 / started.elapsed().as_secs_f64();
    assert!(
        per_second < 5_000.0,
        "the producer's broker threads woke {per_second:.0} times a second while {sent} \
         records went to a broker answering in {ROUND_TRIP:?}"
    );
}
