//! Reading a whole topic back, from the beginning of every partition to the end offsets seen
//! when the read starts: what a replay check or an end-to-end test compares with the job's
//! input. Not a source: it reads on the calling thread and keeps every record.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::admin::TopicMetadata;
use crate::error::{KafkaEdgeError, Result};
use crate::properties::client_config;

/// One record read back from a topic.
#[derive(Clone, Debug)]
pub struct TopicRecord {
    /// Partition.
    pub partition: i32,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// Headers as (name, value) strings.
    pub headers: BTreeMap<String, String>,
}

impl TopicRecord {
    /// The record of a consumed message (header values read as UTF-8, lossily).
    pub fn of(message: &impl Message) -> Self {
        let headers = message
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        let value = String::from_utf8_lossy(h.value.unwrap_or_default());
                        (h.key.to_owned(), value.into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        TopicRecord {
            partition: message.partition(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().unwrap_or_default().to_vec(),
            headers,
        }
    }
}

/// Reads every record of `topic` up to the end offsets at the start of the read; fails if
/// that takes longer than `timeout`. `properties` need `bootstrap.servers`; nothing is
/// committed (a `group.id`, if given, only names the client).
pub fn read_topic(
    properties: &BTreeMap<String, String>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<TopicRecord>> {
    let request = |what: &str, source| KafkaEdgeError::Request {
        what: format!("{what} of topic {topic}"),
        source,
    };
    let partitions = TopicMetadata::connect(properties)?.partitions(topic)?;
    let consumer: BaseConsumer = client_config(
        properties,
        &[
            ("group.id", "weir-topic-reader"),
            ("enable.auto.commit", "false"),
        ],
    )
    .set("enable.partition.eof", "true")
    .create()
    .map_err(|source| KafkaEdgeError::Client {
        role: "consumer",
        source,
    })?;
    let mut assignment = TopicPartitionList::new();
    let mut remaining = BTreeMap::new();
    for p in 0..partitions as i32 {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .map_err(|e| request("watermarks", e))?;
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| request("assignment", e))?;
        if high > low {
            remaining.insert(p, high);
        }
    }
    consumer
        .assign(&assignment)
        .map_err(|e| request("assignment", e))?;
    let mut records = Vec::new();
    let deadline = Instant::now() + timeout;
    while !remaining.is_empty() {
        if Instant::now() > deadline {
            return Err(KafkaEdgeError::Topic {
                topic: topic.to_owned(),
                brokers: crate::properties::brokers(properties),
                detail: format!(
                    "timed out reading: partitions {remaining:?} not at their end after {timeout:?}"
                ),
            });
        }
        match consumer.poll(Duration::from_millis(100)) {
            None | Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => return Err(request("read", e)),
            Some(Ok(m)) => {
                records.push(TopicRecord::of(&m));
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
