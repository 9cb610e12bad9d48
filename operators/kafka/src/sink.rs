//! The Kafka sinks: score records (one per row of the scoring stage's scored batches, encoded
//! straight from the batch: JSON payload keyed by entity; model name/version, score id,
//! inference time, window bounds and source range also as headers) and dead letters (the
//! original bytes as payload, the reason, error and source position as headers, as Kafka
//! Connect's DLQ does; a letter over `message.max.bytes` is cut to fit and says so, see
//! [`crate::dead_letter_fit`]). Delivery is at-least-once: before a checkpoint epoch passes,
//! every record sent so far must be acknowledged (checked without blocking the worker); before
//! the job ends the producer is flushed ([`weir_operators::epoch_sink`]). A record the broker
//! refuses becomes an `undeliverable` dead letter, a transient failure is sent again, and only
//! a topic that cannot be written stops the job ([`crate::delivery`]).
//!
//! With `[sink] delivery = "exactly_once"` ([`crate::sink_config::DeliveryGuarantee::ExactlyOnce`]) each sink
//! instance (score sink and dead-letter sink alike) writes one Kafka transaction per checkpoint
//! epoch, `transactional.id = weir.<job>.<sink>.<instance>`
//! ([`crate::delivery::transactional_id`]): the records of ticks up to and including epoch `E`
//! (records of later ticks that arrive earlier are kept back), committed once all of them are
//! acknowledged and *before* the sink lets `E` pass, so the manifest of `E` is written after
//! every sink's commit. On restore, `init_transactions` with the same id fences the killed
//! run's producer and aborts the transaction it left open; the restored run replays that
//! output from the checkpoint. A restore with fewer sink instances first fences the ids of the
//! instances it removes ([`crate::transaction_fence`]). Why not commit after the manifest, as
//! Flink's two-phase commit does: Flink commits the pending transaction on recovery, and librdkafka cannot resume
//! another producer's transaction — `init_transactions` aborts it — so a crash between a
//! manifest and its commits would lose that epoch's output for good. Committing first turns
//! the same window (between the sinks' commits and the manifest's rename) into a replay of one
//! epoch whose outputs a `read_committed` consumer then sees twice, with the same score ids.
//! Closing it needs the restored sinks to skip what was already committed (read back, with
//! `read_committed`, the records written after the restored epoch and drop those replayed with
//! the same identity); not built yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::Stream;

use weir_features::dead_letter::DeadLetter;
use weir_features::row::FeatureRow;
use weir_features::score_json::ScoreJson;
use weir_features::scored::{ScoreView, ScoredBatch};
use weir_features::vocab::Tick;
use weir_operators::epoch_sink::{epoch_sink, SinkWriter};
use weir_operators::epochs::{CheckpointStream, EpochClock};
use weir_operators::placement::KeyGroupRoutes;

use crate::delivery::{Delivery, DEAD_LETTER_SINK, SCORE_SINK};
use crate::error::Result;
use crate::headers::headers_of;
use crate::sink_config::KafkaSinkConfig;
use crate::transaction_bounds::TransactionBounds;

/// How a sink turns its input into Kafka records (scores, dead letters).
trait KafkaRecords<T> {
    /// Sends the records of `item` through `out`.
    fn send(&self, item: &T, out: &Delivery);
}

/// A Kafka sink's writer on one instance: its records, sent through its producer. With
/// exactly-once delivery the open transaction takes the records its [`TransactionBounds`]
/// admit; records of later ticks are kept back until the transaction is committed, once
/// everything in it is acknowledged, and the next begun.
struct KafkaWriter<T, R> {
    out: Delivery,
    records: R,
    bounds: TransactionBounds,
    /// Records of later ticks, kept for the transactions after the open one.
    kept: BTreeMap<Tick, Vec<T>>,
    /// The last transaction is committed (the input has ended).
    finished: bool,
}

impl<T, R> KafkaWriter<T, R> {
    fn new(out: Delivery, records: R, epochs: EpochClock) -> Self {
        KafkaWriter {
            out,
            records,
            bounds: TransactionBounds::new(epochs),
            kept: BTreeMap::new(),
            finished: false,
        }
    }
}

impl<T: 'static, R: KafkaRecords<T> + 'static> KafkaWriter<T, R> {
    /// Sends the kept records of ticks before `bound`.
    fn send_kept_below(&mut self, bound: Tick) {
        let later = self.kept.split_off(&bound);
        for (_, batch) in std::mem::replace(&mut self.kept, later) {
            for item in &batch {
                self.records.send(item, &self.out);
            }
        }
    }

    /// Sends the kept records the open transaction admits.
    fn send_admitted(&mut self) {
        if let Some(bound) = self.bounds.open_below() {
            self.send_kept_below(bound);
        }
    }
}

impl<T: 'static, R: KafkaRecords<T> + 'static> SinkWriter<T> for KafkaWriter<T, R> {
    fn write(&mut self, batch: &mut Vec<T>) {
        for item in batch.drain(..) {
            self.records.send(&item, &self.out);
        }
    }

    fn write_at(&mut self, tick: Tick, batch: &mut Vec<T>) {
        if !self.out.transactional() || self.bounds.admits(tick) {
            self.write(batch);
        } else {
            self.kept.entry(tick).or_default().append(batch);
        }
    }

    fn input_passed(&mut self, frontier: Tick) {
        if self.out.transactional() {
            self.bounds.input_passed(frontier);
            self.send_admitted();
        }
    }

    fn flush(&mut self, end_of_input: bool) -> bool {
        if !(end_of_input && self.out.transactional() && !self.finished) {
            return self.out.flush(end_of_input);
        }
        self.send_kept_below(Tick::MAX);
        let flushed = self.out.flush(true);
        if flushed {
            self.out.commit_transaction(true);
            self.finished = true;
        }
        flushed
    }

    fn mark(&mut self) -> u64 {
        self.out.mark()
    }

    fn durable_through(&mut self, mark: u64) -> Option<bool> {
        let durable = self.out.durable_through(mark);
        if durable == Some(true) && self.out.transactional() && !self.finished {
            // Everything of the passed epochs is acknowledged: commit them before the sink lets
            // the checkpoint pass (the manifest is written after every sink's commit).
            self.out.commit_transaction(false);
            self.bounds.committed();
            self.send_admitted();
        }
        durable
    }
}

/// Score records: one per scored row.
struct ScoreRecords {
    json: ScoreJson,
    /// The topic the rows were read from, the `weir.source.topic` header.
    source_topic: String,
}

/// The headers of a score record that hold numbers, in the order of
/// [`ScoreRecords::header_numbers`]: the inference time, the window's bounds and the source
/// range's first and last records (DESIGN.md §6: every score carries them in its payload and
/// in Kafka headers). Numbers are written in decimal, as the dead letters' positions are.
const SCORE_NUMBER_HEADERS: [&str; 7] = [
    "weir.inference_ts",
    "weir.window_start",
    "weir.window_end",
    "weir.source.first.partition",
    "weir.source.first.offset",
    "weir.source.last.partition",
    "weir.source.last.offset",
];

impl KafkaRecords<ScoredBatch> for ScoreRecords {
    fn send(&self, batch: &ScoredBatch, out: &Delivery) {
        for scored in batch.views() {
            self.send_one(&scored, out);
        }
    }
}

impl ScoreRecords {
    /// The values of [`SCORE_NUMBER_HEADERS`] for `scored`.
    fn header_numbers(scored: &ScoreView<'_>) -> [i64; SCORE_NUMBER_HEADERS.len()] {
        let row = scored.row;
        [
            scored.inference_ts_ms,
            row.window_start,
            row.window_end,
            row.first.partition.into(),
            row.first.offset,
            row.last.partition.into(),
            row.last.offset,
        ]
    }

    /// Sends one row's score record.
    fn send_one(&self, scored: &ScoreView<'_>, out: &Delivery) {
        // Room for most of a record (the clickstream's are ~530 bytes).
        let mut payload = Vec::with_capacity(512);
        let id = self.json.write(scored, &mut payload);
        let texts: [(&str, &[u8]); 4] = [
            ("weir.score_id", &id[..]),
            ("weir.model.name", scored.model.name.as_bytes()),
            ("weir.model.version", scored.model.version.as_bytes()),
            ("weir.source.topic", self.source_topic.as_bytes()),
        ];
        let mut numbers = [itoa::Buffer::new(); SCORE_NUMBER_HEADERS.len()];
        let numbers = numbers
            .iter_mut()
            .zip(Self::header_numbers(scored))
            .map(|(text, n)| text.format(n).as_bytes());
        let headers = headers_of(
            texts
                .into_iter()
                .chain(SCORE_NUMBER_HEADERS.into_iter().zip(numbers)),
        );
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
        let out = Delivery::on_worker(&config, SCORE_SINK, &source_topic, self.scope().index())?;
        let routes = KeyGroupRoutes::new(config.placement, config.key_groups, config.parallelism);
        // Every row goes to the worker of its key group's instance (each instance has a worker
        // of its own): a batch whose rows span several is split first (a score instance's rows
        // usually fall in one), and each part goes where its first row's route says.
        let worker = {
            let routes = routes.clone();
            move |row: &FeatureRow| routes.route(row.key_group) as usize
        };
        let parts = self.flat_map(move |batch| batch.split_by(&worker).into_iter().map(|(_, b)| b));
        let route =
            move |b: &ScoredBatch| b.rows.first().map_or(0, |row| routes.route(row.key_group));
        let epochs = config.epochs;
        let records = ScoreRecords {
            json: ScoreJson::new(&feature_names, &source_topic),
            source_topic,
        };
        let writer = out.map(|out| KafkaWriter::new(out, records, epochs));
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
        let out = Delivery::on_worker(&config, DEAD_LETTER_SINK, "", self.scope().index())?;
        let (placement, parallelism) = (config.placement, config.parallelism);
        let route =
            move |d: &DeadLetter| placement.partition_route(d.position.partition, parallelism);
        let epochs = config.epochs;
        let writer = out.map(|out| KafkaWriter::new(out, DeadLetterRecords, epochs));
        Ok(epoch_sink(
            self,
            Exchange::new(route),
            "KafkaDeadLetterSink",
            epochs,
            writer,
        ))
    }
}
