//! Kafka helpers for tests: a random topic per test, producing keyed records, reading a whole
//! topic back (until every partition reports EOF).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// The broker the tests use: `WEIR_TEST_BROKERS`, default 127.0.0.1:9092.
pub fn brokers() -> String {
    std::env::var("WEIR_TEST_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// librdkafka properties for the test broker.
pub fn properties() -> BTreeMap<String, String> {
    BTreeMap::from([("bootstrap.servers".to_owned(), brokers())])
}

/// A topic name unique to this test run.
pub fn unique_topic(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{:x}", std::process::id(), nanos & 0xffff_ffff)
}

/// Creates a topic with `partitions` partitions.
pub fn create_topic(topic: &str, partitions: i32) -> Result<()> {
    weir_kafka::admin::ensure_topic(&properties(), topic, partitions).with_context(|| {
        format!(
            "cannot create {topic} on {}: is the broker running (scripts/broker.sh start)?",
            brokers()
        )
    })
}

/// Produces `(key, payload)` records in order and waits for every acknowledgement.
pub fn produce(topic: &str, records: &[(String, Vec<u8>)]) -> Result<()> {
    produce_keyed(topic, None, records)
}

/// Produces `(key, payload)` records in order to one partition and waits for them.
pub fn produce_to(topic: &str, partition: i32, records: &[(String, Vec<u8>)]) -> Result<()> {
    produce_keyed(topic, Some(partition), records)
}

fn produce_keyed(topic: &str, partition: Option<i32>, records: &[(String, Vec<u8>)]) -> Result<()> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("partitioner", "murmur2_random")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()?;
    for (key, payload) in records {
        let mut record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(payload.as_slice());
        record.partition = partition;
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    back,
                )) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => bail!("produce failed: {e}"),
            }
        }
    }
    producer.flush(Duration::from_secs(60))?;
    Ok(())
}

/// One record read back from a topic.
#[derive(Clone, Debug)]
pub struct ReadRecord {
    /// Partition.
    pub partition: i32,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// Headers as (name, value) strings.
    pub headers: BTreeMap<String, String>,
}

/// Reads every record of `topic` from the beginning until all partitions are at their end.
pub fn read_all(topic: &str) -> Result<Vec<ReadRecord>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique_topic("weir-test-reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()?;
    let partitions =
        weir_kafka::admin::partition_count(&consumer, topic).map_err(anyhow::Error::msg)?;
    let mut assignment = TopicPartitionList::new();
    let mut remaining = BTreeMap::new();
    for p in 0..partitions as i32 {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        assignment.add_partition_offset(topic, p, Offset::Beginning)?;
        if high > low {
            remaining.insert(p, high);
        }
    }
    consumer.assign(&assignment)?;
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !remaining.is_empty() {
        if Instant::now() > deadline {
            bail!("timed out reading {topic}: partitions {remaining:?} not at their end");
        }
        match consumer.poll(Duration::from_millis(100)) {
            None | Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => bail!("reading {topic}: {e}"),
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|hs| {
                        hs.iter()
                            .map(|h| {
                                (
                                    h.key.to_owned(),
                                    String::from_utf8_lossy(h.value.unwrap_or_default())
                                        .into_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                records.push(ReadRecord {
                    partition: m.partition(),
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().unwrap_or_default().to_vec(),
                    headers,
                });
                if remaining
                    .get(&m.partition())
                    .is_some_and(|high| m.offset() + 1 >= *high)
                {
                    remaining.remove(&m.partition());
                }
            }
        }
    }
    Ok(records)
}
