//! Consumer-group offsets after each committed checkpoint (DESIGN.md §5): Weir restores from
//! its own manifests, never from the group, but committing the manifest's offsets to the
//! job's consumer group lets the usual lag tools (`kafka-consumer-groups`, Burrow, exporters)
//! see how far behind the job is.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use weir_checkpoint::SourceOffset;

use crate::error::{KafkaEdgeError, Result};
use crate::properties::client_config;

/// Commits offsets of one topic for the consumer group named in `group.id`.
pub struct GroupOffsets {
    consumer: BaseConsumer,
    topic: String,
}

impl GroupOffsets {
    /// A client for `topic` with the job's consumer properties (`group.id` included).
    pub fn new(properties: &BTreeMap<String, String>, topic: &str) -> Result<Self> {
        let consumer = client_config(properties, &[("enable.auto.commit", "false")])
            .create()
            .map_err(|source| KafkaEdgeError::Client {
                role: "offset committer",
                source,
            })?;
        Ok(GroupOffsets {
            consumer,
            topic: topic.to_owned(),
        })
    }

    /// The group's committed offsets of `partitions` (partitions without one are left out),
    /// asked of the broker (lag checks, tests).
    pub fn committed(
        &self,
        partitions: impl IntoIterator<Item = i32>,
    ) -> Result<BTreeMap<i32, i64>> {
        let mut list = TopicPartitionList::new();
        for partition in partitions {
            list.add_partition(&self.topic, partition);
        }
        let committed = self
            .consumer
            .committed_offsets(list, Duration::from_secs(10))
            .map_err(|source| KafkaEdgeError::Request {
                what: format!("committed offsets of topic {}", self.topic),
                source,
            })?;
        Ok(committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(n) => Some((e.partition(), n)),
                _ => None,
            })
            .collect())
    }

    /// Commits `next_offset` of every partition without waiting for the broker (the worker must
    /// not stall on it); failures to send are logged (lag visibility only).
    pub fn commit(&self, partitions: &BTreeMap<i32, SourceOffset>) {
        if partitions.is_empty() {
            return;
        }
        let mut list = TopicPartitionList::new();
        for (&partition, position) in partitions {
            let added = list.add_partition_offset(
                &self.topic,
                partition,
                Offset::Offset(position.next_offset),
            );
            if let Err(error) = added {
                tracing::warn!(%error, partition, "cannot list an offset to commit");
            }
        }
        if let Err(error) = self.consumer.commit(&list, CommitMode::Async) {
            tracing::warn!(%error, topic = %self.topic, "committing consumer-group offsets failed (lag visibility only)");
        }
    }
}
