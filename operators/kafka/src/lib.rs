//! # weir-kafka
//!
//! The Kafka edge of a Weir job, and the only crate that links librdkafka: the partition-
//! assigned source with per-partition watermarks ([`source`]), the score and dead-letter sinks
//! ([`sink`]) and topic administration ([`admin`]). Only standard Kafka protocol features are
//! used, so jobs run unchanged against Apache Kafka, Redpanda or tansu.

pub mod admin;
pub mod dead_letter_fit;
pub mod error;
pub mod group_offsets;
pub mod partition_watch;
pub mod properties;
pub mod sink;
pub mod source;

pub use error::{KafkaEdgeError, Result};
pub use sink::{KafkaDeadLetterSink, KafkaScoreSink, KafkaSinkConfig};
pub use source::{kafka_source, KafkaSourceConfig, StartFrom};
pub use weir_operators::source::SourceStreams;
