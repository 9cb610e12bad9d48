//! # weir-kafka
//!
//! The Kafka edge of a Weir job, and the only crate that links librdkafka: the partition-
//! assigned source with per-partition watermarks ([`source`]), the score and dead-letter sinks
//! ([`sink`]), topic administration and checks ([`admin`]) and a plain keyed-record producer
//! for feeding a topic outside a dataflow ([`record_producer`], used by `weir gen`), and a
//! whole-topic reader for replay checks and tests ([`topic_reader`]). Only
//! standard Kafka protocol features are used, so jobs run unchanged against Apache Kafka,
//! Redpanda or tansu.

pub mod admin;
pub mod dead_letter_fit;
mod delivery;
pub mod delivery_error;
pub mod dlq_replay;
pub mod error;
pub mod group_offsets;
pub mod headers;
pub mod mock_broker;
mod partition_metrics;
pub mod partition_watch;
pub mod properties;
pub mod record_producer;
pub mod sink;
pub mod sink_config;
pub mod source;
pub mod start_offsets;
pub mod topic_reader;
mod transaction_bounds;
pub mod transaction_fence;

pub use delivery::{transactional_id, SINK_FAILED_EXIT, SINK_PRODUCER_DEFAULTS};
pub use error::{KafkaEdgeError, Result};
pub use sink::{KafkaDeadLetterSink, KafkaScoreSink};
pub use sink_config::{DeliveryGuarantee, KafkaSinkConfig};
pub use source::{kafka_source, KafkaSourceConfig, StartFrom};
pub use weir_operators::source::SourceStreams;
