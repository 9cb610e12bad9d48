//! Where `weir gen` writes: a JSON Lines file (or stdout) or a Kafka topic.
//!
//! The Kafka sink keys each record by user and uses librdkafka's `murmur2_random` partitioner,
//! so a key lands on the partition a Java client would choose. Deliveries are tracked in the
//! producer context; any failed delivery fails the run with the broker's error.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use super::clickstream::GeneratedEvent;

/// A destination for generated records.
pub(crate) trait EventSink {
    /// Writes (or enqueues) one record.
    fn send(&mut self, event: &GeneratedEvent) -> Result<()>;
    /// Flushes everything and reports any failure.
    fn finish(&mut self) -> Result<()>;
}

/// One payload per line; `-` means stdout.
pub(crate) struct JsonlSink {
    out: BufWriter<Box<dyn Write>>,
}

impl JsonlSink {
    pub(crate) fn create(path: &Path) -> Result<Self> {
        let inner: Box<dyn Write> = if path.as_os_str() == "-" {
            Box::new(io::stdout().lock())
        } else {
            Box::new(
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
            )
        };
        Ok(Self {
            out: BufWriter::with_capacity(1 << 20, inner),
        })
    }
}

impl EventSink for JsonlSink {
    fn send(&mut self, event: &GeneratedEvent) -> Result<()> {
        self.out.write_all(&event.payload)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.out.flush().context("flushing generator output")
    }
}

/// Counts delivery reports and keeps the first error.
#[derive(Default)]
struct DeliveryTracker {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for DeliveryTracker {}

impl ProducerContext for DeliveryTracker {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first_error.lock() {
                first.get_or_insert_with(|| error.to_string());
            }
        }
    }
}

impl DeliveryTracker {
    fn check(&self) -> Result<()> {
        let failed = self.failed.load(Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first = self
            .first_error
            .lock()
            .ok()
            .and_then(|e| e.clone())
            .unwrap_or_default();
        bail!("{failed} record(s) could not be delivered to Kafka; first error: {first}")
    }
}

/// Produces keyed records to one topic.
pub(crate) struct KafkaSink {
    producer: BaseProducer<DeliveryTracker>,
    topic: String,
    brokers: String,
    sent: u64,
}

impl KafkaSink {
    /// A producer for `topic` at `brokers`; `props` override the defaults.
    pub(crate) fn create(brokers: &str, topic: &str, props: &[(String, String)]) -> Result<Self> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("partitioner", "murmur2_random")
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "20")
            .set("batch.num.messages", "10000")
            .set("message.timeout.ms", "30000");
        for (key, value) in props {
            config.set(key, value);
        }
        let producer = config
            .create_with_context(DeliveryTracker::default())
            .with_context(|| format!("cannot create a Kafka producer for {brokers}"))?;
        Ok(Self {
            producer,
            topic: topic.to_owned(),
            brokers: brokers.to_owned(),
            sent: 0,
        })
    }
}

impl EventSink for KafkaSink {
    fn send(&mut self, event: &GeneratedEvent) -> Result<()> {
        let mut record = BaseRecord::to(&self.topic)
            .key(&event.key)
            .payload(&event.payload);
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.producer.poll(Duration::from_millis(100));
                }
                Err((error, _)) => {
                    return Err(anyhow!(error).context(format!("producing to topic {}", self.topic)))
                }
            }
        }
        self.sent += 1;
        if self.sent.is_multiple_of(1024) {
            self.producer.poll(Duration::ZERO);
            self.producer
                .context()
                .check()
                .with_context(|| self.hint())?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.producer
            .flush(Duration::from_secs(60))
            .with_context(|| format!("flushing {} records to topic {}", self.sent, self.topic))?;
        self.producer.context().check().with_context(|| self.hint())
    }
}

impl KafkaSink {
    fn hint(&self) -> String {
        format!(
            "producing to topic `{}` at {} (is the broker reachable and does the topic exist?)",
            self.topic, self.brokers
        )
    }
}
