//! A plain keyed-record producer for one topic, outside any dataflow: `weir gen` feeds the
//! job's source topic with it. Keys go through librdkafka's `murmur2_random` partitioner, so
//! a key lands on the partition a Java client would choose. Deliveries are counted in the
//! producer context; a failed delivery is reported by the next check (every 1024 records and
//! at [`RecordProducer::finish`]) with the broker's first error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::error::{KafkaEdgeError, Result};

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

/// Produces keyed records to one topic, acks from all replicas, idempotently.
pub struct RecordProducer {
    producer: BaseProducer<DeliveryTracker>,
    topic: String,
    brokers: String,
    sent: u64,
}

impl RecordProducer {
    /// A producer for `topic` at `brokers`; `properties` (librdkafka's names) override the
    /// defaults.
    pub fn create(brokers: &str, topic: &str, properties: &[(String, String)]) -> Result<Self> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("partitioner", "murmur2_random")
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "20")
            .set("batch.num.messages", "10000")
            .set("message.timeout.ms", "30000");
        for (key, value) in properties {
            config.set(key, value);
        }
        let producer = config
            .create_with_context(DeliveryTracker::default())
            .map_err(|source| KafkaEdgeError::Producer {
                brokers: brokers.to_owned(),
                source,
            })?;
        Ok(RecordProducer {
            producer,
            topic: topic.to_owned(),
            brokers: brokers.to_owned(),
            sent: 0,
        })
    }

    /// Enqueues one record, waiting while librdkafka's queue is full.
    pub fn send(&mut self, key: &[u8], payload: &[u8]) -> Result<()> {
        self.send_to(None, key, payload)
    }

    /// Enqueues one record to `partition` (`None`: the partitioner's choice).
    pub fn send_to(&mut self, partition: Option<i32>, key: &[u8], payload: &[u8]) -> Result<()> {
        self.send_record(partition, Some(key), payload)
    }

    /// Enqueues one record with `key`, or none (`None`: a keyless record, as read).
    pub fn send_record(
        &mut self,
        partition: Option<i32>,
        key: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<()> {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic).payload(payload);
        record.key = key;
        record.partition = partition;
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.producer.poll(Duration::from_millis(100));
                }
                Err((source, _)) => {
                    return Err(KafkaEdgeError::Produce {
                        topic: self.topic.clone(),
                        source,
                    })
                }
            }
        }
        self.sent += 1;
        if self.sent.is_multiple_of(1024) {
            self.producer.poll(Duration::ZERO);
            self.check()?;
        }
        Ok(())
    }

    /// Flushes every enqueued record and fails if any was not delivered.
    pub fn finish(&mut self) -> Result<()> {
        self.producer
            .flush(Duration::from_secs(60))
            .map_err(|source| KafkaEdgeError::Flush {
                records: self.sent,
                topic: self.topic.clone(),
                source,
            })?;
        self.check()
    }

    fn check(&self) -> Result<()> {
        let tracker = self.producer.context();
        let failed = tracker.failed.load(Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first_error = tracker
            .first_error
            .lock()
            .ok()
            .and_then(|e| e.clone())
            .unwrap_or_default();
        Err(KafkaEdgeError::Undelivered {
            topic: self.topic.clone(),
            brokers: self.brokers.clone(),
            failed,
            first_error,
        })
    }
}
