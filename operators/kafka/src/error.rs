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
    /// The brokers refused the client's credentials (SASL).
    #[error("authentication to the Kafka brokers {brokers} failed: {detail} (check sasl.username, sasl.password, sasl.mechanisms and security.protocol in [kafka])")]
    Authentication {
        /// Configured bootstrap servers.
        brokers: String,
        /// What librdkafka reported.
        detail: String,
    },
    /// The TLS handshake with the brokers failed.
    #[error("the TLS connection to the Kafka brokers {brokers} failed: {detail} (check security.protocol, ssl.ca.location (the CA that signed the brokers' certificate) and that the certificate names the host in bootstrap.servers)")]
    Tls {
        /// Configured bootstrap servers.
        brokers: String,
        /// What librdkafka reported.
        detail: String,
    },
    /// `[source] start` (or `--from`) does not fit the topic.
    #[error("cannot start reading `{topic}` where [source] start / --from says: {detail}")]
    Start {
        /// Topic name.
        topic: String,
        /// What does not fit, with the partition's offsets.
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
    /// A record producer ([`crate::record_producer`]) could not be created.
    #[error("cannot create a Kafka producer for {brokers}")]
    Producer {
        /// The bootstrap servers.
        brokers: String,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
    /// librdkafka refused to enqueue a record (other than a full queue, which is waited out).
    #[error("producing to topic {topic}")]
    Produce {
        /// The topic.
        topic: String,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
    /// Enqueued records were still not acknowledged when the flush timed out.
    #[error("flushing {records} records to topic {topic}")]
    Flush {
        /// Records sent so far.
        records: u64,
        /// The topic.
        topic: String,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
    /// The broker reported records as not delivered.
    #[error("producing to topic `{topic}` at {brokers} (is the broker reachable and does the topic exist?): {failed} record(s) could not be delivered to Kafka; first error: {first_error}")]
    Undelivered {
        /// The topic.
        topic: String,
        /// The bootstrap servers.
        brokers: String,
        /// Records reported as not delivered.
        failed: u64,
        /// The first delivery error.
        first_error: String,
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
