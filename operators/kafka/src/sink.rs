//! The Kafka sinks: score records (one per row of the scoring stage's scored batches, encoded
//! straight from the batch: JSON payload keyed by entity, model name/version, score id and
//! inference time also as headers) and dead letters (the original bytes as payload, the
//! reason, error and source position as headers, as Kafka Connect's DLQ does; a letter over
//! `message.max.bytes` is cut to fit and says so, see [`crate::dead_letter_fit`]). Delivery is
//! at-least-once: before a checkpoint epoch passes, every record sent so far must be
//! acknowledged (checked without blocking the worker); before the job ends the producer is
//! flushed ([`weir_operators::epoch_sink`]). A record the broker refuses becomes an
//! `undeliverable` dead letter, a transient failure is sent again, and only a topic that
//! cannot be written stops the job ([`crate::delivery`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use rdkafka::message::{Header, OwnedHeaders};
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::Stream;

use weir_features::dead_letter::DeadLetter;
use weir_features::encode::score_json;
use weir_features::row::{score_id, FeatureRow};
use weir_features::scored::{ScoreView, ScoredBatch};
use weir_features::vocab::Tick;
use weir_operators::epoch_sink::{epoch_sink, SinkWriter};
use weir_operators::epochs::{CheckpointStream, EpochClock};
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::{instance_for_key_group, Placement};

use crate::delivery::Delivery;
use crate::error::Result;

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
        self.out.mark()
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
        out.send_score(
            scored.row.key.as_bytes(),
            &payload,
            headers,
            scored.row.fired_at_ns,
            scored.row.last,
        );
    }
}

/// Dead-letter records: the original key and bytes, with why and where as headers.
struct DeadLetterRecords;

impl KafkaRecords<DeadLetter> for DeadLetterRecords {
    fn send(&self, letter: &DeadLetter, out: &Delivery) {
        out.send_letter(letter);
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
        let out = Delivery::on_worker(&config, &source_topic, self.scope().index())?;
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
        let writer = out.map(|out| KafkaWriter {
            out,
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
        let out = Delivery::on_worker(&config, "", self.scope().index())?;
        let (placement, parallelism) = (config.placement, config.parallelism);
        let route =
            move |d: &DeadLetter| placement.partition_route(d.position.partition, parallelism);
        let epochs = config.epochs;
        let writer = out.map(|out| KafkaWriter {
            out,
            records: DeadLetterRecords,
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
