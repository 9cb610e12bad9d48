//! The Kafka sinks: score records (one per row of the scoring stage's scored batches, encoded
//! straight from the batch: JSON payload keyed by entity, model name/version, score id and
//! inference time also as headers) and dead letters (the original bytes as payload, the
//! reason, error and source position as headers, as Kafka Connect's DLQ does; a letter over
//! `message.max.bytes` is cut to fit and says so, see [`crate::dead_letter_fit`]). Delivery is
//! at-least-once: before a checkpoint epoch passes, every record sent so far must be
//! acknowledged (counted by the delivery callback and checked without blocking the worker);
//! before the job ends the producer is flushed ([`weir_operators::epoch_sink`]). Any failed
//! delivery is counted and keeps later epochs from being committed.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::Stream;

use weir_features::dead_letter::DeadLetter;
use weir_features::encode::score_json;
use weir_features::row::{score_id, FeatureRow};
use weir_features::scored::{ScoreView, ScoredBatch};
use weir_features::vocab::Tick;
use weir_operators::clock::unix_nanos;
use weir_operators::epoch_sink::{epoch_sink, SinkWriter};
use weir_operators::epochs::{CheckpointStream, EpochClock};
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::{instance_for_key_group, Placement};

use crate::dead_letter_fit::{
    fit, headers_size, message_max_bytes, KEY_TRUNCATED_HEADER, PAYLOAD_TRUNCATED_HEADER,
};
use crate::error::{KafkaEdgeError, Result};
use crate::properties::client_config;

/// Configuration of a sink stage.
#[derive(Clone, Debug)]
pub struct KafkaSinkConfig {
    /// Output topic.
    pub topic: String,
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
}

/// What a sink writes, for its delivery accounting.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Scores,
    DeadLetters,
}

/// Counts deliveries and records window-close → acknowledged latency.
struct DeliveryContext {
    kind: Kind,
    metrics: Arc<JobMetrics>,
    /// Records of this producer acknowledged or failed.
    settled: AtomicU64,
    /// Records of this producer that failed.
    failed: AtomicU64,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    /// Wall-clock ns at which the scored window fired (0 for dead letters).
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, fired_at_ns: Box<u64>) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.settled.fetch_add(1, Ordering::Release);
        match (result, self.kind) {
            (Ok(_), Kind::Scores) => {
                JobMetrics::add(&self.metrics.scores_delivered, 1);
                let waited = unix_nanos().saturating_sub(*fired_at_ns);
                self.metrics.record_latency_us(waited / 1_000);
            }
            (Ok(_), Kind::DeadLetters) => JobMetrics::add(&self.metrics.dead_letters_delivered, 1),
            (Err((error, _)), kind) => {
                JobMetrics::add(&self.metrics.delivery_failures, 1);
                tracing::error!(%error, ?kind, "a record could not be delivered");
            }
        }
    }
}

type Producer_ = ThreadedProducer<DeliveryContext>;

/// The sink's producer on `worker` if it hosts a sink instance (other workers write nothing).
fn instance_producer(
    config: &KafkaSinkConfig,
    kind: Kind,
    worker: usize,
) -> Result<Option<Producer_>> {
    if config
        .placement
        .instance_on(worker, config.parallelism)
        .is_none()
    {
        return Ok(None);
    }
    client_config(
        &config.properties,
        &[
            ("acks", "all"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "60000"),
        ],
    )
    .create_with_context(DeliveryContext {
        kind,
        metrics: config.metrics.clone(),
        settled: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    })
    .map(Some)
    .map_err(|source| KafkaEdgeError::Client {
        role: "producer",
        source,
    })
}

/// Sends one record, waiting while librdkafka's queue is full (backpressure, not loss);
/// returns whether it was queued.
fn send(
    producer: &Producer_,
    mut record: BaseRecord<'_, [u8], [u8], Box<u64>>,
    metrics: &JobMetrics,
) -> bool {
    loop {
        match producer.send(record) {
            Ok(()) => return true,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                record = returned;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((error, _)) => {
                JobMetrics::add(&metrics.delivery_failures, 1);
                tracing::error!(%error, "a record could not be queued for delivery");
                return false;
            }
        }
    }
}

/// One sink instance's producer and where it writes.
struct Delivery {
    producer: Producer_,
    config: KafkaSinkConfig,
    /// Records queued for delivery so far.
    sent: Cell<u64>,
    /// Records that could not even be queued (lost, counted as delivery failures).
    unqueued: Cell<u64>,
    /// The loss has been logged.
    loss_reported: Cell<bool>,
}

impl Delivery {
    fn new(producer: Producer_, config: KafkaSinkConfig) -> Self {
        Delivery {
            producer,
            config,
            sent: Cell::new(0),
            unqueued: Cell::new(0),
            loss_reported: Cell::new(false),
        }
    }

    fn send(&self, record: BaseRecord<'_, [u8], [u8], Box<u64>>) {
        let counter = if send(&self.producer, record, &self.config.metrics) {
            &self.sent
        } else {
            &self.unqueued
        };
        counter.set(counter.get() + 1);
    }

    /// Whether the first `mark` records queued are acknowledged: `None` while some are on
    /// their way, `Some(false)` once any record of this producer was lost.
    fn durable_through(&self, mark: u64) -> Option<bool> {
        let context = self.producer.context();
        // `settled` first: the callback counts a failure before it settles the record, so a
        // settled count that includes a failed record is read with that failure visible.
        let settled = context.settled.load(Ordering::Acquire);
        if self.unqueued.get() > 0 || context.failed.load(Ordering::Relaxed) > 0 {
            if !self.loss_reported.replace(true) {
                tracing::error!(
                    topic = self.config.topic,
                    "records were lost; no later checkpoint can be committed"
                );
            }
            return Some(false);
        }
        (settled >= mark).then_some(true)
    }

    /// Waits until every queued record is acknowledged (or failed). At the end of the input,
    /// records still unacknowledged count as delivery failures.
    fn flush(&self, end_of_input: bool) -> bool {
        let topic = &self.config.topic;
        match self.producer.flush(Duration::from_secs(120)) {
            Ok(()) => true,
            Err(error) => {
                let pending = self.producer.in_flight_count().max(0) as u64;
                if end_of_input {
                    JobMetrics::add(&self.config.metrics.delivery_failures, pending);
                    tracing::error!(%error, pending, topic, "flush at end of input failed");
                } else {
                    tracing::error!(%error, pending, topic, "flush before a checkpoint failed; retrying");
                }
                false
            }
        }
    }
}

/// How a sink turns its input into Kafka records (scores, dead letters).
trait KafkaRecords<T> {
    /// Sends the records of `item` through `out`.
    fn send(&self, item: &T, out: &Delivery);
}

/// A Kafka sink's writer on one instance: its records, sent through its producer.
struct KafkaWriter<R> {
    out: Delivery,
    records: R,
}

impl<T, R: KafkaRecords<T> + 'static> SinkWriter<T> for KafkaWriter<R> {
    fn write(&mut self, batch: &mut Vec<T>) {
        for item in batch.drain(..) {
            self.records.send(&item, &self.out);
        }
    }

    fn flush(&mut self, end_of_input: bool) -> bool {
        self.out.flush(end_of_input)
    }

    fn mark(&mut self) -> u64 {
        self.out.sent.get()
    }

    fn durable_through(&mut self, mark: u64) -> Option<bool> {
        self.out.durable_through(mark)
    }
}

/// Score records: one per scored row.
struct ScoreRecords {
    feature_names: Arc<[String]>,
    source_topic: String,
}

impl KafkaRecords<ScoredBatch> for ScoreRecords {
    fn send(&self, batch: &ScoredBatch, out: &Delivery) {
        for scored in batch.views() {
            self.send_one(&scored, out);
        }
    }
}

impl ScoreRecords {
    /// Sends one row's score record.
    fn send_one(&self, scored: &ScoreView<'_>, out: &Delivery) {
        let payload = score_json(scored, &self.feature_names, &self.source_topic);
        let id = score_id(
            &scored.row.key,
            scored.row.window_end,
            &scored.model.version,
        );
        let inference_ts = scored.inference_ts_ms.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "weir.score_id",
                value: Some(id.as_str()),
            })
            .insert(Header {
                key: "weir.model.name",
                value: Some(scored.model.name.as_str()),
            })
            .insert(Header {
                key: "weir.model.version",
                value: Some(scored.model.version.as_str()),
            })
            .insert(Header {
                key: "weir.inference_ts",
                value: Some(inference_ts.as_str()),
            });
        let record =
            BaseRecord::with_opaque_to(&out.config.topic, Box::new(scored.row.fired_at_ns))
                .key(scored.row.key.as_bytes())
                .payload(payload.as_slice())
                .headers(headers);
        out.send(record);
    }
}

/// Dead-letter records.
struct DeadLetterRecords {
    /// The producer's `message.max.bytes`: larger letters are cut to fit ([`fit`]).
    max_bytes: usize,
}

impl KafkaRecords<DeadLetter> for DeadLetterRecords {
    /// Sends one dead letter: its original key and bytes, with why and where as headers.
    fn send(&self, letter: &DeadLetter, out: &Delivery) {
        let partition = letter.position.partition.to_string();
        let offset = letter.position.offset.to_string();
        let timestamp = letter.timestamp.map(|t| t.to_string()).unwrap_or_default();
        let fields: [(&str, &[u8]); 6] = [
            ("weir.dlq.reason", letter.reason.as_str().as_bytes()),
            ("weir.dlq.error", letter.error.as_bytes()),
            ("weir.dlq.topic", letter.topic.as_bytes()),
            ("weir.dlq.partition", partition.as_bytes()),
            ("weir.dlq.offset", offset.as_bytes()),
            ("weir.dlq.timestamp", timestamp.as_bytes()),
        ];
        let fitted = fit(
            letter.key.as_deref(),
            &letter.raw,
            headers_size(fields),
            self.max_bytes,
        );
        let cut = [
            (PAYLOAD_TRUNCATED_HEADER, fitted.payload_cut_from),
            (KEY_TRUNCATED_HEADER, fitted.key_cut_from),
        ]
        .map(|(name, from)| (name, from.map(|n| n.to_string())));
        if fitted.payload_cut_from.is_some() || fitted.key_cut_from.is_some() {
            tracing::warn!(
                topic = letter.topic,
                partition = letter.position.partition,
                offset = letter.position.offset,
                payload = letter.raw.len(),
                key = letter.key.as_ref().map_or(0, Vec::len),
                max_bytes = self.max_bytes,
                "dead letter larger than message.max.bytes; sent cut, with its original length in a header"
            );
        }
        let mut headers = OwnedHeaders::new_with_capacity(fields.len() + 2);
        for (key, value) in fields {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        for (key, value) in &cut {
            if let Some(value) = value {
                headers = headers.insert(Header {
                    key,
                    value: Some(value.as_str()),
                });
            }
        }
        let mut record = BaseRecord::with_opaque_to(&out.config.topic, Box::new(0u64))
            .payload(fitted.payload)
            .headers(headers);
        if let Some(key) = fitted.key {
            record = record.key(key);
        }
        out.send(record);
    }
}

/// Extension trait: `scores.kafka_score_sink(config, feature_names, source_topic)`.
pub trait KafkaScoreSink<'scope> {
    /// Writes score records to Kafka; returns the sink's checkpoint stream.
    fn kafka_score_sink(
        self,
        config: KafkaSinkConfig,
        feature_names: Arc<[String]>,
        source_topic: String,
    ) -> Result<CheckpointStream<'scope>>;
}

impl<'scope> KafkaScoreSink<'scope> for Stream<'scope, Tick, Vec<ScoredBatch>> {
    fn kafka_score_sink(
        self,
        config: KafkaSinkConfig,
        feature_names: Arc<[String]>,
        source_topic: String,
    ) -> Result<CheckpointStream<'scope>> {
        let producer = instance_producer(&config, Kind::Scores, self.scope().index())?;
        let (placement, key_groups, parallelism) =
            (config.placement, config.key_groups, config.parallelism);
        let instance =
            move |row: &FeatureRow| instance_for_key_group(row.key_group, key_groups, parallelism);
        // Every row goes to the instance of its key group: a batch whose rows span several
        // instances is split first (a score instance's rows usually fall in one).
        let parts =
            self.flat_map(move |batch| batch.split_by(instance).into_iter().map(|(_, b)| b));
        let route = move |b: &ScoredBatch| {
            b.rows.first().map_or(0, |row| {
                placement.key_group_route(row.key_group, key_groups, parallelism)
            })
        };
        let epochs = config.epochs;
        let writer = producer.map(|producer| KafkaWriter {
            out: Delivery::new(producer, config),
            records: ScoreRecords {
                feature_names,
                source_topic,
            },
        });
        Ok(epoch_sink(
            parts,
            Exchange::new(route),
            "KafkaScoreSink",
            epochs,
            writer,
        ))
    }
}

/// Extension trait: `dead_letters.kafka_dead_letter_sink(config)`.
pub trait KafkaDeadLetterSink<'scope> {
    /// Writes dead letters to Kafka; returns the sink's checkpoint stream.
    fn kafka_dead_letter_sink(self, config: KafkaSinkConfig) -> Result<CheckpointStream<'scope>>;
}

impl<'scope> KafkaDeadLetterSink<'scope> for Stream<'scope, Tick, Vec<DeadLetter>> {
    fn kafka_dead_letter_sink(self, config: KafkaSinkConfig) -> Result<CheckpointStream<'scope>> {
        let producer = instance_producer(&config, Kind::DeadLetters, self.scope().index())?;
        let (placement, parallelism) = (config.placement, config.parallelism);
        let route =
            move |d: &DeadLetter| placement.partition_route(d.position.partition, parallelism);
        let epochs = config.epochs;
        let max_bytes = message_max_bytes(&config.properties);
        let writer = producer.map(|producer| KafkaWriter {
            out: Delivery::new(producer, config),
            records: DeadLetterRecords { max_bytes },
        });
        Ok(epoch_sink(
            self,
            Exchange::new(route),
            "KafkaDeadLetterSink",
            epochs,
            writer,
        ))
    }
}
