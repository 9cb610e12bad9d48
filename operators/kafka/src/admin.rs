//! Topic administration through the standard Admin API: used by `weir topics`, the quick
//! start and the tests (which create a fresh topic per test); and [`TopicMetadata`], the
//! topic checks `weir run` makes before its workers start. Those checks are the job's first
//! contact with the brokers, so they also tell a failed authentication or TLS handshake
//! (wrong password, missing CA) from a broker that is down: librdkafka only retries those,
//! and the job would otherwise wait for metadata that never comes.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::{KafkaEdgeError, Result};
use crate::properties::client_config;

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    futures_executor::block_on(future)
}

/// Creates `topic` with `partitions` partitions and one replica; an existing topic is left as
/// it is.
pub fn ensure_topic(
    properties: &BTreeMap<String, String>,
    topic: &str,
    partitions: i32,
) -> Result<()> {
    ensure_replicated_topic(properties, topic, partitions, 1)
}

/// Creates `topic` with `partitions` partitions of `replication_factor` replicas each (the
/// broker refuses more replicas than it has brokers, and says so); an existing topic is left
/// as it is, whatever its replication.
pub fn ensure_replicated_topic(
    properties: &BTreeMap<String, String>,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(properties, &[])
        .create()
        .map_err(|source| KafkaEdgeError::Client {
            role: "admin",
            source,
        })?;
    let new_topic = NewTopic::new(
        topic,
        partitions,
        TopicReplication::Fixed(replication_factor),
    );
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics([&new_topic], &options)).map_err(|source| {
        KafkaEdgeError::Request {
            what: format!("create topic {topic}"),
            source,
        }
    })?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(KafkaEdgeError::Request {
                    what: format!("create topic {name}"),
                    source: rdkafka::error::KafkaError::AdminOp(code),
                })
            }
        }
    }
    // Wait until the metadata shows the topic with its partitions.
    let consumer: BaseConsumer =
        client_config(properties, &[])
            .create()
            .map_err(|source| KafkaEdgeError::Client {
                role: "consumer",
                source,
            })?;
    for _ in 0..100 {
        if partition_count(&consumer, topic).is_ok_and(|n| n > 0) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(KafkaEdgeError::Topic {
        topic: topic.to_owned(),
        brokers: crate::properties::brokers(properties),
        detail: "created but not visible in metadata after 10 s".to_owned(),
    })
}

/// A metadata client for checking a job's topics before it starts.
pub struct TopicMetadata {
    consumer: BaseConsumer<ConnectionLog>,
    brokers: String,
}

/// How long each metadata request of [`TopicMetadata::partitions`] waits (35 s in all): short
/// at first, so a failed authentication or handshake, reported between attempts, stops the
/// check within a second or two; longer later, for a busy broker.
const METADATA_ATTEMPTS: [Duration; 6] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(10),
    Duration::from_secs(10),
];

impl TopicMetadata {
    /// A client with the job's properties (`bootstrap.servers` at least).
    pub fn connect(properties: &BTreeMap<String, String>) -> Result<Self> {
        let consumer = client_config(properties, &[])
            .create_with_context(ConnectionLog::default())
            .map_err(|source| KafkaEdgeError::Client {
                role: "metadata",
                source,
            })?;
        Ok(TopicMetadata {
            consumer,
            brokers: crate::properties::brokers(properties),
        })
    }

    /// Number of partitions of `topic`; [`KafkaEdgeError::Authentication`] or
    /// [`KafkaEdgeError::Tls`] when the brokers refuse the client's credentials or TLS
    /// handshake, [`KafkaEdgeError::Topic`] when the broker does not list the topic (its
    /// `detail` says why).
    pub fn partitions(&self, topic: &str) -> Result<usize> {
        let mut last_error = String::new();
        for (attempt, timeout) in METADATA_ATTEMPTS.iter().enumerate() {
            match self.consumer.fetch_metadata(Some(topic), *timeout) {
                Ok(metadata) => {
                    return topic_partitions(&metadata, topic)
                        .map_err(|detail| self.topic_error(topic, detail))
                }
                Err(error) => {
                    self.refused_connection()?;
                    tracing::debug!(%error, topic, attempt, "metadata request failed; retrying");
                    last_error = error.to_string();
                }
            }
        }
        Err(self.topic_error(topic, last_error))
    }

    fn topic_error(&self, topic: &str, detail: String) -> KafkaEdgeError {
        KafkaEdgeError::Topic {
            topic: topic.to_owned(),
            brokers: self.brokers.clone(),
            detail,
        }
    }

    /// Serves the events librdkafka queued since the last call (its log lines and error
    /// events reach the context only from `poll`): a refused authentication or TLS handshake
    /// is returned with librdkafka's reason; other connection errors are left to the retries.
    fn refused_connection(&self) -> Result<()> {
        while let Some(event) = self.consumer.poll(Duration::ZERO) {
            if let Err(error) = event {
                self.consumer
                    .context()
                    .error_event(&error, &error.to_string());
            }
        }
        let brokers = self.brokers.clone();
        match self.consumer.context().refusal() {
            Some((Refusal::Authentication, detail)) => {
                Err(KafkaEdgeError::Authentication { brokers, detail })
            }
            Some((Refusal::Tls, detail)) => Err(KafkaEdgeError::Tls { brokers, detail }),
            None => Ok(()),
        }
    }
}

/// Why the brokers refused a client: no retry helps, the job's settings must change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// SASL: wrong user, password or mechanism.
    Authentication,
    /// The TLS handshake failed (an unverifiable certificate, a plaintext listener).
    Tls,
}

impl Refusal {
    /// The refusal a librdkafka connection-failure message reports, in librdkafka's wording
    /// (`rdkafka_broker.c`, `rdkafka_request.c`, `rdkafka_transport.c`, `rdkafka_ssl.c`;
    /// retries end in "(after N ms in state <state>)"). A failed handshake's first log line
    /// arrives with the failed metadata request; the error event with its code can come
    /// seconds later, so the log line decides.
    fn of_message(message: &str) -> Option<Refusal> {
        const AUTHENTICATION: [&str; 4] = [
            "SASL authentication error",
            "SASL authentication failure",
            "mechanism handshake failed",
            "Failed to initialize SASL authentication",
        ];
        // A retried handshake's line has OpenSSL's error but not the first line's prefix; a
        // bare disconnect during the handshake (a broker going down) is neither.
        let tls = message.contains("SSL handshake failed")
            || (message.contains("in state SSL_HANDSHAKE") && message.contains("SSL routines"));
        if AUTHENTICATION.iter().any(|words| message.contains(words)) {
            Some(Refusal::Authentication)
        } else if tls {
            Some(Refusal::Tls)
        } else {
            None
        }
    }

    /// The refusal an error event's code reports.
    fn of_code(code: RDKafkaErrorCode) -> Option<Refusal> {
        match code {
            RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => {
                Some(Refusal::Authentication)
            }
            RDKafkaErrorCode::SSL => Some(Refusal::Tls),
            _ => None,
        }
    }
}

/// A client context that forwards librdkafka's log lines to `tracing` (target `librdkafka`,
/// as rdkafka's default context does through `log`) and keeps the first refusal it sees in
/// a log line or an error event, with librdkafka's message.
#[derive(Default)]
struct ConnectionLog {
    refusal: Mutex<Option<(Refusal, String)>>,
}

impl ConnectionLog {
    fn refusal(&self) -> Option<(Refusal, String)> {
        self.refusal.lock().ok().and_then(|first| first.clone())
    }

    fn refused(&self, refusal: Refusal, message: &str) {
        if let Ok(mut first) = self.refusal.lock() {
            first.get_or_insert_with(|| (refusal, message.to_owned()));
        }
    }

    fn error_event(&self, error: &KafkaError, reason: &str) {
        tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
        let refusal = error.rdkafka_error_code().and_then(Refusal::of_code);
        if let Some(refusal) = refusal.or_else(|| Refusal::of_message(reason)) {
            self.refused(refusal, reason);
        }
    }
}

impl ClientContext for ConnectionLog {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {log_message}");
                if let Some(refusal) = Refusal::of_message(log_message) {
                    self.refused(refusal, log_message);
                }
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", "librdkafka: {fac} {log_message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {fac} {log_message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", "librdkafka: {fac} {log_message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.error_event(&error, reason);
    }
}

impl ConsumerContext for ConnectionLog {}

/// Number of partitions of `topic`, per the broker's metadata; the error is the detail of a
/// [`KafkaEdgeError::Topic`], which callers complete with the topic and brokers
/// ([`TopicMetadata::partitions`], the source).
pub(crate) fn partition_count<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
) -> std::result::Result<usize, String> {
    // A busy broker can time out one metadata request; three attempts of 10 s each.
    let mut attempt = 0;
    let metadata = loop {
        attempt += 1;
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) {
            Ok(metadata) => break metadata,
            Err(error) if attempt < 3 => {
                tracing::warn!(%error, topic, attempt, "metadata request failed; retrying");
            }
            Err(error) => return Err(error.to_string()),
        }
    };
    topic_partitions(&metadata, topic)
}

/// Number of partitions of `topic` in `metadata`, or why the topic is not usable.
fn topic_partitions(
    metadata: &rdkafka::metadata::Metadata,
    topic: &str,
) -> std::result::Result<usize, String> {
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err("not in metadata".to_owned());
    };
    if let Some(err) = found.error() {
        return Err(format!("{:?}", RDKafkaErrorCode::from(err)));
    }
    Ok(found.partitions().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafka_connection_failures_are_told_apart() {
        let cases = [
            ("sasl_plaintext://127.0.0.1:9092/bootstrap: SASL authentication error: SASL SCRAM authentication failed: broker responded with invalid-proof (after 22ms in state AUTH_REQ)", Some(Refusal::Authentication)),
            ("sasl_ssl://b:9096/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's supported mechanisms: PLAIN", Some(Refusal::Authentication)),
            ("ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured or root CA certificates are installed (install ca-certificates package) (after 3ms in state SSL_HANDSHAKE)", Some(Refusal::Tls)),
            ("ssl://127.0.0.1:9093/bootstrap: error:0A000086:SSL routines::certificate verify failed (after 6ms in state SSL_HANDSHAKE)", Some(Refusal::Tls)),
            // A broker that is down or restarting is retried, not refused.
            ("127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)", None),
            ("ssl://127.0.0.1:9093/bootstrap: Disconnected (after 2ms in state SSL_HANDSHAKE)", None),
            ("sasl_plaintext://127.0.0.1:9092/bootstrap: Disconnected (after 5ms in state AUTH_REQ)", None),
            ("127.0.0.1:9092/bootstrap: Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration (connecting to a SSL listener?) or broker version is < 0.10 (see api.version.request) (after 1ms in state APIVERSION_QUERY)", None),
        ];
        for (message, refusal) in cases {
            assert_eq!(Refusal::of_message(message), refusal, "{message}");
        }
        assert_eq!(
            Refusal::of_code(RDKafkaErrorCode::Authentication),
            Some(Refusal::Authentication)
        );
        assert_eq!(Refusal::of_code(RDKafkaErrorCode::SSL), Some(Refusal::Tls));
        assert_eq!(
            Refusal::of_code(RDKafkaErrorCode::BrokerTransportFailure),
            None
        );
    }

    #[test]
    fn the_first_refusal_is_kept() {
        let log = ConnectionLog::default();
        assert_eq!(log.refusal(), None);
        log.log(
            RDKafkaLogLevel::Warning,
            "FAIL",
            "SSL handshake failed: not an error line",
        );
        assert_eq!(log.refusal(), None);
        log.log(
            RDKafkaLogLevel::Error,
            "FAIL",
            "b:1/bootstrap: SASL authentication error: bad proof",
        );
        log.error(
            KafkaError::Global(RDKafkaErrorCode::SSL),
            "b:1/bootstrap: SSL handshake failed: later",
        );
        assert_eq!(
            log.refusal(),
            Some((
                Refusal::Authentication,
                "b:1/bootstrap: SASL authentication error: bad proof".to_owned()
            ))
        );
    }
}
