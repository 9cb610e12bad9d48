//! The Kafka topics `weir run` checks before its workers start (they must exist; a source
//! with more instances than partitions is warned about).

use std::collections::BTreeMap;

/// The topics to check and the client properties to check them with.
#[derive(Clone, Debug)]
pub struct TopicCheck {
    /// `[kafka]` then `[source.kafka]`.
    pub properties: BTreeMap<String, String>,
    /// The source topic (a Kafka source), then the score and dead-letter topics (a Kafka
    /// sink).
    pub topics: Vec<String>,
}
