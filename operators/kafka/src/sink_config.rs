//! What a Kafka sink instance is configured with: its topics, producer properties, placement,
//! epochs and delivery guarantee. A leaf shared by the sink operators ([`crate::sink`]) and
//! the producer that delivers their records ([`crate::delivery`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_operators::epochs::EpochClock;
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::Placement;

/// Configuration of a sink stage.
#[derive(Clone, Debug)]
pub struct KafkaSinkConfig {
    /// Output topic.
    pub topic: String,
    /// The job's dead-letter topic: where records the broker refuses go (for the
    /// dead-letter sink, its own topic).
    pub dead_letter_topic: String,
    /// librdkafka properties.
    pub properties: BTreeMap<String, String>,
    /// Number of sink instances.
    pub parallelism: usize,
    /// Worker layout.
    pub placement: Placement,
    /// Key groups of the job (scores are routed by key group).
    pub key_groups: u32,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Checkpoint epochs (the producer is flushed before each one passes).
    pub epochs: EpochClock,
    /// At-least-once or one transaction per checkpoint epoch.
    pub delivery: DeliveryGuarantee,
    /// The job's name (the first part of a transactional sink's `transactional.id`).
    pub job: String,
}

/// What a Kafka sink guarantees (`[sink] delivery`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryGuarantee {
    /// Every record acknowledged before its epoch passes; the idempotent producer; a restart
    /// may write a record again (with the same deterministic score id).
    #[default]
    AtLeastOnce,
    /// One Kafka transaction per sink instance per checkpoint epoch: a `read_committed`
    /// consumer sees only the output of epochs the sink committed.
    ExactlyOnce,
}
