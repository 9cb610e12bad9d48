//! The sink stage: where scores (or feature rows) and dead letters go.

use std::collections::BTreeMap;
use std::path::PathBuf;

use weir_kafka::DeliveryGuarantee;

/// `[sink]` as the sinks use it.
#[derive(Clone, Debug)]
pub enum SinkPlan {
    /// Kafka topics.
    Kafka {
        /// Topic for score records.
        scores_topic: String,
        /// Topic for dead letters.
        dead_letter_topic: String,
        /// Producer properties: `[kafka]`, then `[sink.kafka]`.
        properties: BTreeMap<String, String>,
        /// `[sink] delivery`.
        delivery: DeliveryGuarantee,
    },
    /// JSON Lines files (resolved against the job file).
    File {
        /// Score records (or feature rows).
        scores: PathBuf,
        /// Dead letters.
        dead_letters: PathBuf,
    },
}
