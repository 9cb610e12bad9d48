//! Errors of the Kafka edge, each saying what to check.

/// A Kafka setup or delivery problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaEdgeError {
    /// A client could not be created from the configured properties.
    #[error("cannot create the Kafka {role} client (check [kafka] properties in the job file): {source}")]
    Client {
        /// "consumer", "producer" or "admin".
        role: &'static str,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
    /// Metadata for the topic could not be fetched or the topic does not exist.
    #[error("topic `{topic}` is not available on {brokers}: {detail}. Is the broker running (scripts/broker.sh status) and the topic created?")]
    Topic {
        /// Topic name.
        topic: String,
        /// Configured bootstrap servers.
        brokers: String,
        /// What went wrong.
        detail: String,
    },
    /// Some other broker request failed.
    #[error("Kafka request `{what}` failed: {source}")]
    Request {
        /// The request.
        what: String,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
    /// A helper thread (partition discovery) could not be started.
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        /// The thread's job.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, KafkaEdgeError>;
