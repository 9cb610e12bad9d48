//! librdkafka's mock cluster as a broker for tests of what the dev broker (tansu) lacks:
//! transactions, and reading with `isolation.level = read_committed`. The mock brokers are
//! real TCP listeners inside the process that holds the [`MockBroker`], so a `weir` child
//! process can be pointed at [`MockBroker::bootstrap_servers`] like at any cluster.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::{Offset, TopicPartitionList};

use crate::admin::TopicMetadata;
use crate::error::{KafkaEdgeError, Result};
use crate::properties::client_config;
use crate::topic_reader::TopicRecord;

/// A mock Kafka cluster, up while this value lives.
pub struct MockBroker {
    cluster: MockCluster<'static, DefaultProducerContext>,
}

impl MockBroker {
    /// Starts a mock cluster of `brokers` brokers.
    pub fn start(brokers: i32) -> Result<MockBroker> {
        let cluster = MockCluster::new(brokers).map_err(|source| KafkaEdgeError::Request {
            what: "start a librdkafka mock cluster".to_owned(),
            source,
        })?;
        Ok(MockBroker { cluster })
    }

    /// Its `bootstrap.servers`.
    pub fn bootstrap_servers(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    /// Creates `topic` with `partitions` partitions (the mock has no CreateTopics request).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        self.cluster
            .create_topic(topic, partitions, 1)
            .map_err(|source| KafkaEdgeError::Request {
                what: format!("create mock topic {topic}"),
                source,
            })
    }
}

/// Every record of `topic`, read from the beginning until each partition reports its end
/// (fails after `timeout`): committed ones only (`isolation.level = read_committed`, where a
/// transaction still open holds the end back) unless `properties` set `isolation.level =
/// read_uncommitted`. Unlike [`crate::topic_reader::read_topic`] it does not wait for the
/// high watermark, which transaction markers keep out of reach.
pub fn read_to_end(
    properties: &BTreeMap<String, String>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<TopicRecord>> {
    let request = |what: &str, source| KafkaEdgeError::Request {
        what: format!("{what} of topic {topic}"),
        source,
    };
    let partitions = TopicMetadata::connect(properties)?.partitions(topic)? as i32;
    let consumer: BaseConsumer = client_config(
        properties,
        &[
            ("group.id", "weir-read-committed"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
            ("enable.partition.eof", "true"),
        ],
    )
    .create()
    .map_err(|source| KafkaEdgeError::Client {
        role: "consumer",
        source,
    })?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| request("assignment", e))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| request("assignment", e))?;
    let mut at_end = vec![false; partitions as usize];
    let mut records = Vec::new();
    let deadline = Instant::now() + timeout;
    while at_end.iter().any(|end| !end) {
        if Instant::now() > deadline {
            return Err(KafkaEdgeError::Topic {
                topic: topic.to_owned(),
                brokers: crate::properties::brokers(properties),
                detail: format!("timed out reading committed records after {timeout:?}"),
            });
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                if let Some(end) = at_end.get_mut(p as usize) {
                    *end = true;
                }
            }
            Some(Err(e)) => return Err(request("read", e)),
            Some(Ok(m)) => records.push(TopicRecord::of(&m)),
        }
    }
    Ok(records)
}
