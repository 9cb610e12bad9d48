//! One Kafka sink instance's producer and what becomes of every record it sends (DESIGN.md §7:
//! nothing is dropped without a counter and a dead letter, nothing stalls checkpoints).
//!
//! Every record gets a sequence number; it stays *in flight* until the broker acknowledges it
//! or its stand-in (below). An epoch passes once no record numbered before its mark is in
//! flight ([`Delivery::durable_through`]), so records acknowledged out of order (several
//! partitions) never let an epoch pass early. A record librdkafka does not deliver, at `send`
//! or in its delivery report, is handled on the worker by its class
//! ([`crate::delivery_error`]):
//!
//! - retriable: sent again unchanged under the same number (a timed-out record too: at-least-
//!   once output with deterministic score ids tolerates the duplicate, losing it would not);
//! - refused: a score becomes an `undeliverable` dead letter (the broker's error, the score
//!   record's key and payload as raw bytes cut to fit `message.max.bytes`, the position of its
//!   window's last input record) written to the dead-letter topic under the score's number, so
//!   the epoch waits for the letter's acknowledgement; a refused dead letter is resent once as
//!   `undeliverable`, cut to [`REFIT_BYTES`]; both are counted as `undeliverable` dead letters;
//! - unwritable (the topic or the producer), or a dead letter refused again after its refit:
//!   the job stops ([`stop_job`], exit status [`SINK_FAILED_EXIT`]). The record is still in
//!   flight, so its epoch never passed: no later checkpoint was committed and a restart
//!   resumes from the last one.
//!
//! An exactly-once sink ([`crate::sink`]) writes through a transactional producer: one record
//! the broker reports undelivered fails the open transaction, which can then only be aborted,
//! so any such report stops the job (the restart's `init_transactions` aborts it and replays
//! from the last checkpoint); refusals at `send` (librdkafka's own checks, e.g. its
//! `message.max.bytes`) never enter the transaction and become dead letters as above.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message};

use weir_features::dead_letter::{DeadLetter, DeadLetterReason};
use weir_features::vocab::SourcePosition;
use weir_operators::clock::unix_nanos;
use weir_operators::metrics::{JobMetrics, Operator, SinkFlow};

use crate::dead_letter_fit::{
    fit, headers_size, message_max_bytes, KEY_TRUNCATED_HEADER, LETTER_HEADERS,
    PAYLOAD_TRUNCATED_HEADER,
};
use crate::delivery_error::{classify, DeliveryClass};
use crate::error::{KafkaEdgeError, Result};
use crate::headers::headers_of;
use crate::properties::client_config;
use crate::sink_config::{DeliveryGuarantee, KafkaSinkConfig};

/// Exit status of a job stopped because a sink cannot write its topic.
pub const SINK_FAILED_EXIT: i32 = 3;

/// The size a refused dead letter is cut to before its one resend: its headers and the start
/// of the record (the whole record stays at its source position while the topic retains it).
pub const REFIT_BYTES: usize = 16 * 1024;

/// How long a flush waits for every record to be acknowledged (resends included).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the transaction requests (init, commit) may take.
pub(crate) const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// The score sink's name in its `transactional.id`.
pub(crate) const SCORE_SINK: &str = "scores";
/// The dead-letter sink's name in its `transactional.id`.
pub(crate) const DEAD_LETTER_SINK: &str = "dead-letters";
/// Every Kafka sink of a job, by the name in its `transactional.id`.
pub(crate) const SINK_NAMES: [&str; 2] = [SCORE_SINK, DEAD_LETTER_SINK];

/// The `transactional.id` of a sink instance: the job, the sink and the instance — never a
/// worker index, so the instance of a restarted (or rescaled onto other workers) job fences
/// the producer of the run before it.
pub fn transactional_id(job: &str, sink: &str, instance: usize) -> String {
    format!("weir.{job}.{sink}.{instance}")
}

/// Which try of a record this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// A score record, to the score topic.
    Score,
    /// A dead letter (also one standing in for a refused score), cut to `message.max.bytes`.
    Letter,
    /// A refused dead letter resent as `undeliverable`, cut to [`REFIT_BYTES`]: the last try.
    Refit,
}

/// What a sent record came from: enough to build its dead letter if it is refused.
enum Origin {
    /// A score: when its window fired (for the latency histogram) and where the window's last
    /// input record is.
    Score {
        fired_at_ns: u64,
        position: SourcePosition,
    },
    /// A dead letter without its bytes (those travel in the record), and their lengths before
    /// any cut.
    Letter {
        letter: Box<DeadLetter>,
        key_len: usize,
        payload_len: usize,
    },
}

impl Origin {
    /// The source record the output is about: a score's window's last input record, or the
    /// dead letter's own record.
    fn position(&self) -> SourcePosition {
        match self {
            Origin::Score { position, .. } => *position,
            Origin::Letter { letter, .. } => letter.position,
        }
    }
}

/// The metrics' operator of the sink named `sink` in its `transactional.id`.
fn sink_operator(sink: &str) -> Operator {
    if sink == SCORE_SINK {
        Operator::ScoreSink
    } else {
        Operator::DeadLetterSink
    }
}

/// The `score_id` of a score record's JSON payload, for a log line about it (`?` if the
/// payload has none).
fn score_id_of(payload: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct WithId {
        score_id: String,
    }
    serde_json::from_slice::<WithId>(payload).map_or_else(|_| "?".to_owned(), |r| r.score_id)
}

/// The delivery opaque of every record.
struct Sent {
    seq: u64,
    attempt: Attempt,
    origin: Origin,
}

/// A record librdkafka did not deliver, for the worker to resend, replace or stop on.
struct Undelivered {
    sent: Box<Sent>,
    topic: String,
    key: Option<Vec<u8>>,
    payload: Vec<u8>,
    headers: Option<OwnedHeaders>,
    error: KafkaError,
    /// Reported by the broker (it was part of the open transaction), not refused at `send`.
    reported: bool,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts acknowledgements and hands undelivered records to the worker.
struct DeliveryContext {
    metrics: Arc<JobMetrics>,
    /// Numbers of the records sent and not yet acknowledged (or stood in for).
    in_flight: Mutex<BTreeSet<u64>>,
    /// Records reported undelivered, oldest first.
    undelivered: Mutex<Vec<Undelivered>>,
    /// This sink instance's records written and acknowledged, and their bytes.
    flow: SinkFlow,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Sent>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Sent>) {
        match result {
            Ok(message) => {
                let bytes =
                    message.payload().map_or(0, <[u8]>::len) + message.key().map_or(0, <[u8]>::len);
                self.flow.acknowledged(1, bytes);
                match sent.origin {
                    Origin::Score { fired_at_ns, .. } if sent.attempt == Attempt::Score => {
                        JobMetrics::add(&self.metrics.scores_delivered, 1);
                        let waited = unix_nanos().saturating_sub(fired_at_ns);
                        self.metrics.record_latency_us(waited / 1_000);
                    }
                    _ => JobMetrics::add(&self.metrics.dead_letters_delivered, 1),
                }
                locked(&self.in_flight).remove(&sent.seq);
            }
            Err((error, message)) => {
                let undelivered = Undelivered {
                    topic: message.topic().to_owned(),
                    key: message.key().map(<[u8]>::to_vec),
                    payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                    headers: message.headers().map(|h| h.detach()),
                    error: error.clone(),
                    reported: true,
                    sent,
                };
                locked(&self.undelivered).push(undelivered);
            }
        }
    }
}

type SinkProducer = ThreadedProducer<DeliveryContext>;

/// One sink instance's producer and where it writes.
pub(crate) struct Delivery {
    producer: SinkProducer,
    /// The topic this sink writes (scores or dead letters).
    topic: String,
    /// The dead-letter topic (refused records go there).
    dead_letter_topic: String,
    /// The source topic (the `topic` of a refused score's dead letter).
    source_topic: String,
    /// The producer's `message.max.bytes`: dead letters are cut to fit.
    max_bytes: usize,
    metrics: Arc<JobMetrics>,
    /// The next record's number.
    next_seq: Cell<u64>,
    /// `transactional.id` when the sink writes one transaction per checkpoint epoch.
    transactional: Option<String>,
}

/// The librdkafka settings of every sink producer (a job's `[sink.kafka]` properties are set
/// over them). Idempotence: no duplicates from librdkafka's own retries, and per-partition
/// order kept. What it costs against a broker slow to acknowledge (one request of a partition
/// in flight at a time, so later acknowledgements; no CPU since the patched librdkafka,
/// `vendor/README.md`): BENCHMARKS.md, P (`benches/producer_cpu.rs`).
pub const SINK_PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("acks", "all"),
    ("linger.ms", "5"),
    ("message.timeout.ms", "60000"),
    ("enable.idempotence", "true"),
];

impl Delivery {
    /// The producer of the sink instance on `worker`, if there is one there. `sink` names the
    /// sink in its `transactional.id` (exactly-once).
    pub(crate) fn on_worker(
        config: &KafkaSinkConfig,
        sink: &str,
        source_topic: &str,
        worker: usize,
    ) -> Result<Option<Self>> {
        let Some(instance) = config.placement.instance_on(worker, config.parallelism) else {
            return Ok(None);
        };
        let transactional = (config.delivery == DeliveryGuarantee::ExactlyOnce)
            .then(|| transactional_id(&config.job, sink, instance));
        let mut defaults = SINK_PRODUCER_DEFAULTS.to_vec();
        if let Some(id) = &transactional {
            defaults.push(("transactional.id", id.as_str()));
        }
        let producer: SinkProducer = client_config(&config.properties, &defaults)
            .create_with_context(DeliveryContext {
                metrics: config.metrics.clone(),
                in_flight: Mutex::default(),
                undelivered: Mutex::default(),
                flow: config
                    .metrics
                    .sink_flow(sink_operator(sink), instance as u32),
            })
            .map_err(|source| KafkaEdgeError::Client {
                role: "producer",
                source,
            })?;
        if let Some(id) = &transactional {
            // Fences a producer of an earlier run with the same id and aborts the transaction
            // it left open: that output is replayed from the restored checkpoint.
            let request = |what: &str, source| {
                KafkaEdgeError::Request {
                what: format!("{what} for transactional.id `{id}` (exactly-once needs a broker with transactions)"),
                source,
            }
            };
            producer
                .init_transactions(TRANSACTION_TIMEOUT)
                .map_err(|e| request("init_transactions", e))?;
            producer
                .begin_transaction()
                .map_err(|e| request("begin_transaction", e))?;
            tracing::info!(
                transactional_id = id,
                topic = config.topic,
                "transactional sink ready"
            );
        }
        Ok(Some(Delivery {
            producer,
            topic: config.topic.clone(),
            dead_letter_topic: config.dead_letter_topic.clone(),
            source_topic: source_topic.to_owned(),
            max_bytes: message_max_bytes(&config.properties),
            metrics: config.metrics.clone(),
            next_seq: Cell::new(0),
            transactional,
        }))
    }

    /// Whether the sink writes transactions.
    pub(crate) fn transactional(&self) -> bool {
        self.transactional.is_some()
    }

    /// Commits the open transaction (everything sent is acknowledged) and, unless `last`,
    /// begins the next one. A transaction that cannot commit stops the job: the restart
    /// aborts it and replays from the last checkpoint.
    pub(crate) fn commit_transaction(&self, last: bool) {
        if let Err(error) = self.producer.commit_transaction(TRANSACTION_TIMEOUT) {
            stop_job(
                &self.topic,
                &error,
                "the epoch's transaction could not be committed",
            );
        }
        if !last {
            if let Err(error) = self.producer.begin_transaction() {
                stop_job(
                    &self.topic,
                    &error,
                    "the next epoch's transaction could not begin",
                );
            }
        }
    }

    fn next_seq(&self) -> u64 {
        let seq = self.next_seq.get();
        self.next_seq.set(seq + 1);
        seq
    }

    /// Sends a score record; `position` is its window's last input record.
    pub(crate) fn send_score(
        &self,
        key: &[u8],
        payload: &[u8],
        headers: OwnedHeaders,
        fired_at_ns: u64,
        position: SourcePosition,
    ) {
        let sent = Box::new(Sent {
            seq: self.next_seq(),
            attempt: Attempt::Score,
            origin: Origin::Score {
                fired_at_ns,
                position,
            },
        });
        let record = BaseRecord::with_opaque_to(self.topic.as_str(), sent)
            .key(key)
            .payload(payload)
            .headers(headers);
        self.producer.context().flow.written(1);
        self.enqueue(record);
    }

    /// Sends a dead letter to the dead-letter topic, cut to fit `message.max.bytes`.
    pub(crate) fn send_letter(&self, letter: &DeadLetter) {
        let meta = DeadLetter {
            reason: letter.reason,
            error: letter.error.clone(),
            topic: letter.topic.clone(),
            position: letter.position,
            timestamp: letter.timestamp,
            key: None,
            raw: Vec::new(),
        };
        let lengths = (letter.key.as_ref().map_or(0, Vec::len), letter.raw.len());
        let bytes = (letter.key.as_deref(), letter.raw.as_slice());
        let seq = self.next_seq();
        self.send_letter_as(seq, meta, bytes, lengths, self.max_bytes, Attempt::Letter);
    }

    /// Sends `letter` (its fields; its bytes are `bytes`, originally `lengths` long) under
    /// number `seq`, cut to `limit` bytes.
    fn send_letter_as(
        &self,
        seq: u64,
        letter: DeadLetter,
        (key, payload): (Option<&[u8]>, &[u8]),
        (key_len, payload_len): (usize, usize),
        limit: usize,
        attempt: Attempt,
    ) {
        // A new record (a dead letter, or one standing in for a refused score), not a resend.
        if attempt == Attempt::Letter {
            self.producer.context().flow.written(1);
        }
        let partition = letter.position.partition.to_string();
        let offset = letter.position.offset.to_string();
        let timestamp = letter.timestamp.map(|t| t.to_string()).unwrap_or_default();
        let values: [&[u8]; 6] = [
            letter.reason.as_str().as_bytes(),
            letter.error.as_bytes(),
            letter.topic.as_bytes(),
            partition.as_bytes(),
            offset.as_bytes(),
            timestamp.as_bytes(),
        ];
        let fields: [(&str, &[u8]); 6] = std::array::from_fn(|i| (LETTER_HEADERS[i], values[i]));
        let fitted = fit(key, payload, headers_size(fields), limit);
        let kept_key = fitted.key.map_or(0, <[u8]>::len);
        // The original lengths, when what is sent is shorter (cut now or before a refit).
        let cut = [
            (
                PAYLOAD_TRUNCATED_HEADER,
                fitted.payload.len() < payload_len,
                payload_len,
            ),
            (KEY_TRUNCATED_HEADER, kept_key < key_len, key_len),
        ]
        .map(|(name, cut, from)| (name, cut.then(|| from.to_string())));
        if fitted.payload_cut_from.is_some() || fitted.key_cut_from.is_some() {
            tracing::warn!(
                topic = letter.topic,
                partition = letter.position.partition,
                offset = letter.position.offset,
                payload = payload_len,
                key = key_len,
                max_bytes = limit,
                "dead letter larger than its size limit; sent cut, with its original length in a header"
            );
        }
        let cut_lengths = cut
            .iter()
            .filter_map(|(key, value)| Some((*key, value.as_deref()?.as_bytes())));
        let headers = headers_of(fields.into_iter().chain(cut_lengths));
        let sent = Box::new(Sent {
            seq,
            attempt,
            origin: Origin::Letter {
                letter: Box::new(letter),
                key_len,
                payload_len,
            },
        });
        let mut record = BaseRecord::with_opaque_to(self.dead_letter_topic.as_str(), sent)
            .payload(fitted.payload)
            .headers(headers);
        if let Some(key) = fitted.key {
            record = record.key(key);
        }
        self.enqueue(record);
    }

    /// Queues `record` under its number, waiting while librdkafka's queue is full
    /// (backpressure, not loss); a record librdkafka refuses at once is handled like an
    /// undelivered one.
    fn enqueue(&self, mut record: BaseRecord<'_, [u8], [u8], Box<Sent>>) {
        let seq = record.delivery_opaque.seq;
        locked(&self.producer.context().in_flight).insert(seq);
        let mut warned = false;
        loop {
            match self.producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Retried here, paced, not through `redo` (which would recurse, unpaced,
                // for as long as librdkafka keeps refusing).
                Err((error, returned)) if classify(&error) == DeliveryClass::Retriable => {
                    if !std::mem::replace(&mut warned, true) {
                        tracing::warn!(%error, topic = returned.topic, "a record could not be queued yet; trying again every 10 ms");
                    }
                    record = returned;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err((error, returned)) => {
                    let undelivered = Undelivered {
                        topic: returned.topic.to_owned(),
                        key: returned.key.map(<[u8]>::to_vec),
                        payload: returned.payload.map(<[u8]>::to_vec).unwrap_or_default(),
                        headers: returned.headers,
                        sent: returned.delivery_opaque,
                        error,
                        reported: false,
                    };
                    return self.redo(undelivered);
                }
            }
        }
    }

    /// Resends, replaces or stops on every record reported undelivered so far.
    fn settle(&self) {
        let undelivered = std::mem::take(&mut *locked(&self.producer.context().undelivered));
        for record in undelivered {
            self.redo(record);
        }
    }

    fn redo(&self, record: Undelivered) {
        let Undelivered {
            sent,
            topic,
            key,
            payload,
            headers,
            error,
            reported,
        } = record;
        if reported && self.transactional.is_some() {
            // The transaction holds a failed record: it can only be aborted. The restart's
            // init_transactions aborts it and the job replays from the last checkpoint.
            stop_job(
                &topic,
                &error,
                "a record of the epoch's transaction was not delivered, so the transaction cannot commit",
            );
        }
        match classify(&error) {
            DeliveryClass::Retriable => {
                let position = sent.origin.position();
                tracing::warn!(%error, topic, partition = position.partition, offset = position.offset,
                    "a record (for the source record at partition/offset) was not delivered in time; sending it again");
                let mut again =
                    BaseRecord::with_opaque_to(topic.as_str(), sent).payload(payload.as_slice());
                if let Some(key) = &key {
                    again = again.key(key.as_slice());
                }
                if let Some(headers) = headers {
                    again = again.headers(headers);
                }
                self.enqueue(again);
            }
            DeliveryClass::Unwritable => stop_job(&topic, &error, "the topic cannot be written"),
            DeliveryClass::Refused => {
                self.refused(*sent, &topic, (key.as_deref(), &payload), &error)
            }
        }
    }

    /// A record the broker will never take: its dead letter, or its refit, or the end.
    fn refused(&self, sent: Sent, topic: &str, bytes: (Option<&[u8]>, &[u8]), error: &KafkaError) {
        let lengths = (bytes.0.map_or(0, <[u8]>::len), bytes.1.len());
        match (sent.attempt, sent.origin) {
            (Attempt::Score, Origin::Score { position, .. }) => {
                tracing::warn!(%error, topic, score_id = score_id_of(bytes.1), partition = position.partition,
                    offset = position.offset, key_bytes = lengths.0, payload_bytes = lengths.1,
                    "a score record was refused; it goes to the dead-letter topic as undeliverable");
                let letter = DeadLetter {
                    reason: DeadLetterReason::Undeliverable,
                    error: format!("topic `{topic}` refused this score record: {error}"),
                    topic: self.source_topic.clone(),
                    position,
                    timestamp: None,
                    key: None,
                    raw: Vec::new(),
                };
                self.metrics.dead_letter(DeadLetterReason::Undeliverable);
                let limit = self.max_bytes;
                self.send_letter_as(sent.seq, letter, bytes, lengths, limit, Attempt::Letter);
            }
            (
                Attempt::Letter,
                Origin::Letter {
                    letter,
                    key_len,
                    payload_len,
                },
            ) => {
                tracing::warn!(%error, topic, reason = letter.reason.as_str(),
                    partition = letter.position.partition, offset = letter.position.offset,
                    "a dead letter was refused; resending it cut to {REFIT_BYTES} bytes as undeliverable");
                let refit = DeadLetter {
                    reason: DeadLetterReason::Undeliverable,
                    error: format!(
                        "topic `{topic}` refused this dead letter ({}: {}): {error}",
                        letter.reason.as_str(),
                        letter.error
                    ),
                    ..*letter
                };
                self.metrics.dead_letter(DeadLetterReason::Undeliverable);
                let limit = REFIT_BYTES.min(self.max_bytes);
                let lengths = (key_len, payload_len);
                self.send_letter_as(sent.seq, refit, bytes, lengths, limit, Attempt::Refit);
            }
            _ => stop_job(
                topic,
                error,
                &format!("a dead letter cut to {REFIT_BYTES} bytes was refused too"),
            ),
        }
    }

    /// A position covering every record sent so far.
    pub(crate) fn mark(&self) -> u64 {
        self.next_seq.get()
    }

    /// Whether every record numbered before `mark` is acknowledged (or stood in for by an
    /// acknowledged dead letter); `None` while some are on their way. Handles undelivered
    /// records first. Never `Some(false)`: what cannot be written stops the job instead.
    pub(crate) fn durable_through(&self, mark: u64) -> Option<bool> {
        self.settle();
        let oldest = locked(&self.producer.context().in_flight).first().copied();
        oldest.is_none_or(|seq| seq >= mark).then_some(true)
    }

    /// Waits until every record sent is acknowledged, resending and replacing undelivered
    /// ones, for up to [`FLUSH_TIMEOUT`]. At the end of the input (`end_of_input`), records
    /// still unacknowledged then are counted as delivery failures.
    pub(crate) fn flush(&self, end_of_input: bool) -> bool {
        let deadline = Instant::now() + FLUSH_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let flushed = self.producer.flush(left);
            self.settle();
            if self.durable_through(self.mark()) == Some(true) {
                return true;
            }
            if Instant::now() >= deadline {
                let pending = locked(&self.producer.context().in_flight).len() as u64;
                let topic = &self.topic;
                let error = flushed.err().map(|e| e.to_string()).unwrap_or_default();
                if end_of_input {
                    JobMetrics::add(&self.metrics.delivery_failures, pending);
                    tracing::error!(error, pending, topic, "flush at end of input failed");
                } else {
                    tracing::error!(
                        error,
                        pending,
                        topic,
                        "flush before a checkpoint failed; retrying"
                    );
                }
                return false;
            }
            if flushed.is_ok() {
                // Acknowledged, but the reports are still being counted on librdkafka's thread.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Stops the job because `topic` cannot be written: no epoch after the last committed one can
/// pass (the record is in flight), so exiting leaves the last checkpoint intact and a restart
/// resumes from it. Exits the process (status [`SINK_FAILED_EXIT`]); the other workers'
/// output after the last checkpoint is replayed by that restart.
fn stop_job(topic: &str, error: &KafkaError, what: &str) -> ! {
    let message = format!(
        "cannot write to Kafka topic `{topic}` ({what}): {error}; stopping the job (exit status \
         {SINK_FAILED_EXIT}). No checkpoint after the last committed one was written: fix the \
         topic (does it exist, may this client write it, what size does it accept?) and restart \
         to resume from that checkpoint"
    );
    tracing::error!("{message}");
    eprintln!("error: {message}");
    std::process::exit(SINK_FAILED_EXIT);
}

#[cfg(test)]
mod tests {
    use super::score_id_of;

    #[test]
    fn a_refused_score_is_logged_with_its_id() {
        let payload = br#"{"score_id":"00ab","key":"u1","features":{"x":1},"score":0.5}"#;
        assert_eq!(score_id_of(payload), "00ab");
        assert_eq!(score_id_of(b"not json"), "?");
    }
}
