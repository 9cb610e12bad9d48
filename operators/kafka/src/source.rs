//! The Kafka source (DESIGN.md §2): each source instance owns the partitions `p` with
//! `p % parallelism == instance` ([`owned_between`]), reads them with an assigned
//! `BaseConsumer`, decodes JSON into events (bad records become dead letters with their raw
//! bytes), tracks a watermark per partition and reports its progress once per tick (the shared
//! operator in `weir_operators::source_operator`). In bounded mode it stops at the high
//! watermarks captured at start and then reports the end of input, which flushes every window
//! downstream. Unbounded, it also reads partitions added to the topic while it runs
//! ([`crate::partition_watch`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::statistics::Statistics;
use rdkafka::ClientContext;
use rdkafka::{Offset, TopicPartitionList};
use timely::dataflow::Scope;

use weir_checkpoint::{SourceOffset, SourcePositions};
use weir_features::dead_letter::DeadLetter;
use weir_features::record::Event;
use weir_features::vocab::{SourcePosition, Tick};
use weir_features::watermark::{PartitionWatermarks, SourceProgress};
use weir_operators::clock::unix_ms;
use weir_operators::source::{resume_positions, RawRecord, RecordDecoder, SourceStreams};
use weir_operators::source_operator::{build_placed_source, SourceReader, SourceStage};

use crate::admin::partition_count;
use crate::error::{KafkaEdgeError, Result};
use crate::partition_metrics::{HighWatermarks, PartitionMetrics, STATISTICS_INTERVAL_MS};
use crate::partition_watch::{owned_between, NewPartition, PartitionWatch, WatchConfig};
use crate::properties::{brokers, client_config};
use crate::start_offsets::{resolve_start, resolve_stop, PartitionRange};

pub use crate::start_offsets::StartFrom;

/// Configuration of the Kafka source stage.
#[derive(Clone, Debug)]
pub struct KafkaSourceConfig {
    /// Topic to read.
    pub topic: String,
    /// librdkafka properties (`bootstrap.servers`, security, ...).
    pub properties: BTreeMap<String, String>,
    /// Start position.
    pub start: StartFrom,
    /// Stop at the high watermarks seen at start (replays, tests) instead of running forever.
    pub bounded: bool,
    /// A bounded run's end, if earlier than the high watermarks (`weir replay --to`): a time
    /// (the run stops before the first record at or after it, per partition) or offsets per
    /// partition ([`crate::start_offsets::resolve_stop`]).
    pub stop: Option<StartFrom>,
    /// Instances, tick, epochs and pacing. The pacing's `stop` flag is set on Ctrl-C: the
    /// source ends without declaring the end of input, so open windows are not flushed as if
    /// the input were complete.
    pub stage: SourceStage,
    /// Decoding of payloads into events or dead letters (the same as the file source's).
    pub decoder: RecordDecoder,
    /// Bounded out-of-orderness of event time.
    pub max_out_of_orderness_ms: i64,
    /// How long a caught-up partition must be quiet to stop holding the watermark.
    pub idle_timeout_ms: u64,
    /// Records read per activation at most (keeps ticks and other operators moving).
    pub max_batch: usize,
    /// Where to resume, per partition, from a checkpoint. Without a checkpoint partitions
    /// start at `start`; when restoring, a partition the checkpoint lacks was added to the
    /// topic after it was taken and starts at its earliest offset.
    pub resume: BTreeMap<i32, SourceOffset>,
    /// How often to look for partitions added to the topic (unbounded runs; `None` = never).
    pub partition_discovery_ms: Option<u64>,
}

/// librdkafka callbacks of the source's consumer: partition-EOF is an expected event here
/// (it marks a partition caught up), not an error worth a log line; statistics bring the
/// partitions' high watermarks (consumer lag, `crate::partition_metrics`).
struct SourceContext {
    high: HighWatermarks,
}

impl ClientContext for SourceContext {
    fn stats(&self, statistics: Statistics) {
        self.high.update(&statistics);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let end_of_partition = matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        );
        if !end_of_partition {
            tracing::warn!(%error, reason, "librdkafka consumer error (it retries)");
        }
    }
}

impl ConsumerContext for SourceContext {}

/// A running source instance: its consumer and what it knows of its partitions.
struct Reader {
    instance: u32,
    consumer: BaseConsumer<SourceContext>,
    watermarks: PartitionWatermarks,
    /// Bounded mode: first offset not to read, per partition.
    end_offsets: HashMap<i32, i64>,
    /// First offset not yet emitted, per partition that has a known position.
    next_offsets: BTreeMap<i32, i64>,
    decoder: RecordDecoder,
    /// Finds partitions added while the job runs (unbounded runs with discovery on).
    watch: Option<PartitionWatch>,
    /// Lag and watermark gauges of the partitions read.
    partition_metrics: PartitionMetrics,
    /// Discovered partitions not yet assigned (the assignment failed).
    unassigned: Vec<NewPartition>,
    /// When to retry assigning `unassigned` (ms, processing time).
    retry_assign_at_ms: u64,
    config: KafkaSourceConfig,
}

/// Builds the Kafka source on every worker; instances run on `parallelism` workers.
pub fn kafka_source<'scope>(
    scope: Scope<'scope, Tick>,
    config: KafkaSourceConfig,
) -> Result<SourceStreams<'scope>> {
    let name = format!("KafkaSource({})", config.topic);
    build_placed_source(scope, &name, config.stage.clone(), |instance| {
        Reader::open(instance, config)
    })
}

impl SourceReader for Reader {
    fn instance(&self) -> u32 {
        self.instance
    }

    fn poll(&mut self, now_ms: u64, events: &mut Vec<Event>, dead: &mut Vec<DeadLetter>) -> usize {
        self.assign_discovered(now_ms);
        // Records emitted (returned), and messages taken from the consumer (bounded by
        // `max_batch` per activation, records past a bounded end included).
        let (mut handled, mut polled, mut bytes) = (0, 0, 0);
        while polled < self.config.max_batch {
            polled += 1;
            match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    self.watermarks.set_caught_up(partition, true);
                    if self.config.bounded {
                        // Everything present at start has been read (the end offset was taken
                        // before this fetch reached the end), e.g. when the broker's high
                        // watermark counts control records that are never delivered.
                        self.watermarks.finish(partition);
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, topic = %self.config.topic, "consumer error (librdkafka retries)");
                    break;
                }
                Some(Ok(message)) => {
                    // Bounded runs drop records at or past the end offset they read to: the
                    // resume position must not move past records never emitted, and they
                    // are not counted as read.
                    let past_end = self
                        .end_offsets
                        .get(&message.partition())
                        .is_some_and(|end| message.offset() >= *end);
                    if !past_end {
                        handled += 1;
                        self.next_offsets
                            .insert(message.partition(), message.offset() + 1);
                    }
                    let partitions = (&mut self.watermarks, &self.end_offsets);
                    bytes += handle(message, now_ms, partitions, &self.decoder, events, dead);
                }
            }
        }
        self.decoder.count_bytes(bytes);
        handled
    }

    fn progress(&self, now_ms: u64) -> SourceProgress {
        // Unbounded, an instance without partitions (more source instances than partitions)
        // holds nothing back but must not end event time either: a partition may come to it
        // later, and `MAX` would let the job's watermark jump to the end as soon as the other
        // instances' partitions went idle, making every later record late.
        let offsets = (&self.next_offsets, &self.end_offsets);
        let high = &self.consumer.context().high;
        self.partition_metrics
            .publish(high, &self.watermarks, offsets, now_ms);
        if !self.config.bounded && self.next_offsets.is_empty() {
            return SourceProgress::Idle;
        }
        self.watermarks.progress(now_ms)
    }

    fn exclude_paused(&mut self, paused_ms: u64, now_ms: u64) {
        self.watermarks.exclude_paused(paused_ms, now_ms);
    }

    fn finished(&self) -> bool {
        self.config.bounded && self.watermarks.all_finished()
    }

    fn source_name(&self) -> &str {
        &self.config.topic
    }

    fn positions(&mut self) -> SourcePositions {
        let next = self.next_offsets.iter().map(|(&p, &offset)| (p, offset));
        SourcePositions::open(resume_positions(&self.watermarks, next))
    }
}

impl Reader {
    fn open(instance: u32, config: KafkaSourceConfig) -> Result<Reader> {
        let defaults = [
            ("group.id", "weir"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "true"),
            ("auto.offset.reset", "earliest"),
            ("statistics.interval.ms", STATISTICS_INTERVAL_MS),
        ];
        // Partition EOF is how a partition is known to be caught up (idleness, and the end of
        // a bounded run past control records): it cannot be turned off.
        if config
            .properties
            .get("enable.partition.eof")
            .is_some_and(|v| v.trim() != "true")
        {
            tracing::warn!(
                "ignoring enable.partition.eof = false: the source needs end-of-partition events"
            );
        }
        let consumer: BaseConsumer<SourceContext> = client_config(&config.properties, &defaults)
            .set("enable.partition.eof", "true")
            .create_with_context(SourceContext {
                high: HighWatermarks::of(&config.topic),
            })
            .map_err(|source| KafkaEdgeError::Client {
                role: "consumer",
                source,
            })?;
        let topic_error = |detail: String| KafkaEdgeError::Topic {
            topic: config.topic.clone(),
            brokers: brokers(&config.properties),
            detail,
        };
        let partitions = partition_count(&consumer, &config.topic).map_err(topic_error)?;
        let owned = owned_between(0, partitions, instance, config.stage.parallelism);
        let now = unix_ms();
        let mut watermarks =
            PartitionWatermarks::new(config.max_out_of_orderness_ms, config.idle_timeout_ms);
        let mut assignment = TopicPartitionList::new();
        let mut end_offsets = HashMap::new();
        let mut next_offsets = BTreeMap::new();
        let request = |what: String| move |source| KafkaEdgeError::Request { what, source };
        let restoring = !config.resume.is_empty();
        let start_error = |detail: String| KafkaEdgeError::Start {
            topic: config.topic.clone(),
            detail,
        };
        let at_time = if restoring {
            if config.start != StartFrom::Earliest {
                tracing::info!(
                    start = %config.start,
                    "restoring from a checkpoint: its offsets win over [source] start / --from"
                );
            }
            HashMap::new()
        } else {
            config
                .start
                .check_partitions("start", &config.topic, partitions)
                .map_err(start_error)?;
            offsets_at(&consumer, &config, &owned, &config.start)?
        };
        if let Some(stop) = &config.stop {
            stop.check_partitions("stop", &config.topic, partitions)
                .map_err(start_error)?;
        }
        let stop_at_time = match &config.stop {
            Some(stop) if config.bounded => offsets_at(&consumer, &config, &owned, stop)?,
            _ => HashMap::new(),
        };
        for &partition in &owned {
            watermarks.assign(partition, now);
            let resume = config.resume.get(&partition);
            let (low, high) = consumer
                .fetch_watermarks(&config.topic, partition, Duration::from_secs(10))
                .map_err(request(format!(
                    "list offsets of {}/{partition}",
                    config.topic
                )))?;
            consumer.context().high.listed(partition, high);
            // Every owned partition starts at a concrete offset, recorded as its resume
            // position at once: a partition that stays quiet is still in every checkpoint, so
            // a restore resumes it where this run started instead of at the then-latest end.
            let first = match resume {
                Some(resume) => {
                    watermarks.resume(partition, resume.watermark);
                    resume.next_offset
                }
                None if restoring => {
                    tracing::info!(
                        topic = config.topic,
                        partition,
                        offset = low,
                        "partition added since the checkpoint; reading it from its earliest offset"
                    );
                    low
                }
                None => {
                    let range = PartitionRange {
                        low,
                        high,
                        at_time: at_time.get(&partition).copied().flatten(),
                    };
                    resolve_start(&config.start, &config.topic, partition, range)
                        .map_err(start_error)?
                }
            };
            next_offsets.insert(partition, first);
            assignment
                .add_partition_offset(&config.topic, partition, Offset::Offset(first))
                .map_err(request("assign".to_owned()))?;
            if config.bounded {
                let end = match &config.stop {
                    Some(stop) => {
                        let at_time = stop_at_time.get(&partition).copied().flatten();
                        resolve_stop(stop, partition, PartitionRange { low, high, at_time })
                    }
                    None => high,
                };
                end_offsets.insert(partition, end);
                if first >= end {
                    watermarks.finish(partition);
                }
            }
        }
        consumer
            .assign(&assignment)
            .map_err(request("assign".to_owned()))?;
        tracing::info!(
            instance,
            ?owned,
            bounded = config.bounded,
            start = %config.start,
            resumed = ?next_offsets,
            "source instance assigned"
        );
        let decoder = config.decoder.clone();
        let mut partition_metrics = PartitionMetrics::new(&decoder.metrics, config.max_batch);
        for &partition in &owned {
            partition_metrics.assign(&decoder.metrics, partition);
        }
        let watch = match config.partition_discovery_ms {
            Some(every) if !config.bounded => Some(PartitionWatch::start(WatchConfig {
                topic: config.topic.clone(),
                properties: config.properties.clone(),
                instance,
                parallelism: config.stage.parallelism,
                known: partitions,
                every: Duration::from_millis(every),
            })?),
            _ => None,
        };
        Ok(Reader {
            instance,
            consumer,
            watermarks,
            end_offsets,
            next_offsets,
            decoder,
            watch,
            partition_metrics,
            unassigned: Vec::new(),
            retry_assign_at_ms: 0,
            config,
        })
    }

    /// Starts reading the partitions discovery found since the last poll, at their earliest
    /// offset (or, if the checkpoint restored has them, at its position: metadata at open may
    /// have been stale), recorded as their resume position at once. A new partition holds the
    /// watermark like any other until it has records or is caught up and idle. A failed
    /// assignment is retried once per discovery interval.
    fn assign_discovered(&mut self, now_ms: u64) {
        let Some(watch) = &self.watch else {
            return;
        };
        let found = watch.take();
        if found.is_empty() && (self.unassigned.is_empty() || now_ms < self.retry_assign_at_ms) {
            return;
        }
        self.unassigned.extend(found);
        // If this attempt fails, the next one waits a discovery interval.
        self.retry_assign_at_ms = now_ms + self.config.partition_discovery_ms.unwrap_or(1_000);
        let mut assignment = TopicPartitionList::new();
        let mut starts = Vec::with_capacity(self.unassigned.len());
        for new in &self.unassigned {
            let resume = self.config.resume.get(&new.partition).copied();
            let first = resume.map_or(new.first_offset, |r| r.next_offset);
            starts.push((new.partition, first, resume));
            let added = assignment.add_partition_offset(
                &self.config.topic,
                new.partition,
                Offset::Offset(first),
            );
            if let Err(error) = added {
                tracing::error!(%error, partition = new.partition, "cannot list a new partition for assignment");
                return;
            }
        }
        if let Err(error) = self.consumer.incremental_assign(&assignment) {
            tracing::warn!(%error, topic = self.config.topic, "cannot assign new partitions yet; retrying next discovery interval");
            return;
        }
        self.unassigned.clear();
        for (partition, first, resume) in starts {
            self.watermarks.assign(partition, now_ms);
            if let Some(resume) = resume {
                self.watermarks.resume(partition, resume.watermark);
            }
            self.next_offsets.insert(partition, first);
            self.partition_metrics
                .assign(&self.decoder.metrics, partition);
            tracing::info!(
                instance = self.instance,
                topic = self.config.topic,
                partition,
                offset = first,
                "reading a new partition"
            );
        }
    }
}

/// Handles one message: skips records past a bounded end, decodes, tracks the watermark.
/// Returns the bytes it read (0 past a bounded end).
fn handle(
    message: BorrowedMessage<'_>,
    now_ms: u64,
    (watermarks, end_offsets): (&mut PartitionWatermarks, &HashMap<i32, i64>),
    decoder: &RecordDecoder,
    events: &mut Vec<Event>,
    dead: &mut Vec<DeadLetter>,
) -> usize {
    let partition = message.partition();
    let offset = message.offset();
    let end = end_offsets.get(&partition).copied();
    if end.is_some_and(|end| offset >= end) {
        watermarks.finish(partition);
        return 0;
    }
    watermarks.set_caught_up(partition, false);
    let record = RawRecord {
        payload: message.payload(),
        position: SourcePosition { partition, offset },
        timestamp: message.timestamp().to_millis(),
        key: message.key(),
    };
    let bytes = record.stored_bytes();
    match decoder.push(record, now_ms, events, dead) {
        Some(ts) => watermarks.observe(partition, ts, now_ms),
        None => watermarks.touch(partition, now_ms),
    }
    if end.is_some_and(|end| offset + 1 >= end) {
        watermarks.finish(partition);
    }
    bytes
}

/// For a position that is a time ([`StartFrom::Time`]), the broker's checked offsets-for-times
/// answer for `partitions` ([`offsets_for_time`], [`checked_offsets_for_time`]); empty for any
/// other position.
fn offsets_at<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    config: &KafkaSourceConfig,
    partitions: &[i32],
    position: &StartFrom,
) -> Result<HashMap<i32, Option<i64>>> {
    let StartFrom::Time(ms) = position else {
        return Ok(HashMap::new());
    };
    let answer = offsets_for_time(consumer, &config.topic, partitions, *ms)?;
    checked_offsets_for_time(&config.properties, &config.topic, answer, *ms)
}

/// The broker's offsets-for-times answer for `partitions` at `ms`: per partition the offset of
/// the first record whose timestamp is at or after `ms`, `None` when there is none (the
/// partition then starts at its end, reading only what is produced from now on).
fn offsets_for_time<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: &[i32],
    ms: i64,
) -> Result<HashMap<i32, Option<i64>>> {
    let mut query = TopicPartitionList::new();
    for &partition in partitions {
        query
            .add_partition_offset(topic, partition, Offset::Offset(ms))
            .map_err(|source| KafkaEdgeError::Request {
                what: "offsets for times".to_owned(),
                source,
            })?;
    }
    let answer = consumer
        .offsets_for_times(query, Duration::from_secs(10))
        .map_err(|source| KafkaEdgeError::Request {
            what: format!("offsets for time {ms} ms of {topic}"),
            source,
        })?;
    let mut offsets = HashMap::new();
    for element in answer.elements() {
        element.error().map_err(|source| KafkaEdgeError::Request {
            what: format!(
                "offsets for time {ms} ms of {topic}/{}",
                element.partition()
            ),
            source,
        })?;
        let offset = match element.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        };
        offsets.insert(element.partition(), offset);
    }
    // A partition the answer leaves out is not "no record at or after the time" (that would
    // start it at its end and skip its records): refuse to guess.
    if let Some(missing) = partitions.iter().find(|p| !offsets.contains_key(p)) {
        return Err(KafkaEdgeError::Start {
            topic: topic.to_owned(),
            detail: format!(
                "the brokers' offsets-for-times answer at {ms} ms leaves out partition {missing}; cannot tell where to start it"
            ),
        });
    }
    Ok(offsets)
}

/// The broker's offsets-for-times answer, checked by reading the record it points at: some
/// brokers (tansu 0.6) answer offset 0 instead of "none" for a partition whose records are
/// all older than the time. When the record is older, the partition is read forward to the
/// first record at or after the time (or its end); a correct answer costs one fetch.
fn checked_offsets_for_time(
    properties: &BTreeMap<String, String>,
    topic: &str,
    answer: HashMap<i32, Option<i64>>,
    ms: i64,
) -> Result<HashMap<i32, Option<i64>>> {
    let request = |what: String| move |source| KafkaEdgeError::Request { what, source };
    let consumer: BaseConsumer<SourceContext> = client_config(
        properties,
        &[
            ("enable.auto.commit", "false"),
            ("group.id", "weir-start-time"),
        ],
    )
    .set("enable.partition.eof", "true")
    .create_with_context(SourceContext {
        high: HighWatermarks::of(topic),
    })
    .map_err(|source| KafkaEdgeError::Client {
        role: "consumer",
        source,
    })?;
    let mut checked = HashMap::new();
    for (partition, offset) in answer {
        let Some(offset) = offset else {
            checked.insert(partition, None);
            continue;
        };
        let mut one = TopicPartitionList::new();
        one.add_partition_offset(topic, partition, Offset::Offset(offset))
            .map_err(request("assign".to_owned()))?;
        consumer
            .assign(&one)
            .map_err(request("assign".to_owned()))?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let found = loop {
            if std::time::Instant::now() > deadline {
                // Starting at the broker's answer could read records older than the time.
                return Err(KafkaEdgeError::Start {
                    topic: topic.to_owned(),
                    detail: format!(
                        "could not check within 30 s where time {ms} ms starts in partition {partition} (the broker answered offset {offset}, which points at an older record)"
                    ),
                });
            }
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => break None,
                Some(Err(e)) => {
                    return Err(request(format!("read {topic}/{partition}"))(e));
                }
                Some(Ok(m)) if m.timestamp().to_millis().is_none_or(|t| t >= ms) => {
                    break Some(m.offset());
                }
                Some(Ok(_)) => {}
            }
        };
        if found != Some(offset) {
            tracing::warn!(
                topic,
                partition,
                broker_answer = offset,
                first_at_or_after = ?found,
                "the broker's offsets-for-times answer points at an older record; corrected"
            );
        }
        checked.insert(partition, found);
    }
    Ok(checked)
}
