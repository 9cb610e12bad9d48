//! Topic administration through the standard Admin API: used by `weir topics`, the quick
//! start and the tests (which create a fresh topic per test); and [`TopicMetadata`], the
//! topic checks `weir run` makes before its workers start.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;

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
    consumer: BaseConsumer,
    brokers: String,
}

impl TopicMetadata {
    /// A client with the job's properties (`bootstrap.servers` at least).
    pub fn connect(properties: &BTreeMap<String, String>) -> Result<Self> {
        let consumer =
            client_config(properties, &[])
                .create()
                .map_err(|source| KafkaEdgeError::Client {
                    role: "metadata",
                    source,
                })?;
        Ok(TopicMetadata {
            consumer,
            brokers: crate::properties::brokers(properties),
        })
    }

    /// Number of partitions of `topic`; [`KafkaEdgeError::Topic`] when the broker does not
    /// list it (its `detail` says why).
    pub fn partitions(&self, topic: &str) -> Result<usize> {
        partition_count(&self.consumer, topic).map_err(|detail| KafkaEdgeError::Topic {
            topic: topic.to_owned(),
            brokers: self.brokers.clone(),
            detail,
        })
    }
}

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
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err("not in metadata".to_owned());
    };
    if let Some(err) = found.error() {
        return Err(format!("{:?}", RDKafkaErrorCode::from(err)));
    }
    Ok(found.partitions().len())
}
