//! Kafka helpers for tests: a random topic per test, producing keyed records, reading a whole
//! topic back (until every partition reports EOF), all through `weir-kafka` (the `weir`
//! crate's tests include this file and do not link rdkafka themselves).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_kafka::record_producer::RecordProducer;
use weir_kafka::topic_reader::read_topic;

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

/// A fresh topic of `partitions` partitions, named after `prefix` ([`unique_topic`]).
pub fn fresh_topic(prefix: &str, partitions: i32) -> Result<String> {
    let name = unique_topic(prefix);
    create_topic(&name, partitions)?;
    Ok(name)
}

/// librdkafka properties from the environment variable `var`: `name=value` pairs,
/// comma-separated (the benchmarks' settings to try).
pub fn properties_from_env(var: &str) -> Vec<(String, String)> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
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
    let linger = [("linger.ms".to_owned(), "5".to_owned())];
    let mut producer = RecordProducer::create(&brokers(), topic, &linger)?;
    for (key, payload) in records {
        producer.send_to(partition, key.as_bytes(), payload)?;
    }
    producer.finish()?;
    Ok(())
}

/// One record read back from a topic.
pub type ReadRecord = weir_kafka::topic_reader::TopicRecord;

/// Reads every record of `topic` from the beginning until all partitions are at their end.
pub fn read_all(topic: &str) -> Result<Vec<ReadRecord>> {
    let mut properties = properties();
    properties.insert("group.id".to_owned(), unique_topic("weir-test-reader"));
    Ok(read_topic(&properties, topic, Duration::from_secs(120))?)
}
