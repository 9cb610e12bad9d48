//! The Kafka source (DESIGN.md §2): each source instance owns the partitions `p` with
//! `p % parallelism == instance`, reads them with an assigned `BaseConsumer`, decodes JSON into
//! events (bad records become dead letters with their raw bytes), tracks a watermark per
//! partition and reports its progress once per tick. Timely time is the wall-clock tick.
//! In bounded mode it stops at the high watermarks captured at start and then reports the end
//! of input, which flushes every window downstream.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;
use timely::dataflow::{Scope, Stream};

use weir_features::dead_letter::DeadLetter;
use weir_features::decode::JsonDecoder;
use weir_features::record::Event;
use weir_features::vocab::{KeyGroup, SourcePosition, Tick};
use weir_features::watermark::{PartitionWatermarks, WatermarkReport};
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::Placement;

use crate::admin::partition_count;
use crate::error::{KafkaEdgeError, Result};
use crate::properties::{brokers, client_config};

type VecBuilder<D> = timely::container::CapacityContainerBuilder<Vec<D>>;

/// Where a source starts reading when there is no checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// The oldest retained offset.
    Earliest,
    /// Only records produced after the job starts.
    Latest,
}

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
    /// Number of source instances.
    pub parallelism: usize,
    /// Worker layout.
    pub placement: Placement,
    /// Length of a tick in ms.
    pub tick_ms: u64,
    /// Key groups of the job.
    pub key_groups: u32,
    /// Payload decoder.
    pub decoder: JsonDecoder,
    /// Bounded out-of-orderness of event time.
    pub max_out_of_orderness_ms: i64,
    /// How long a caught-up partition must be quiet to stop holding the watermark.
    pub idle_timeout_ms: u64,
    /// Records read per activation at most (keeps ticks and other operators moving).
    pub max_batch: usize,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Set to stop reading (Ctrl-C): the source ends without declaring the end of input, so
    /// open windows are not flushed as if the input were complete.
    pub stop: Arc<AtomicBool>,
}

/// The three outputs of the source stage.
pub struct SourceStreams<'scope> {
    /// Decoded events.
    pub events: Stream<'scope, Tick, Vec<Event>>,
    /// Records that could not be decoded.
    pub dead_letters: Stream<'scope, Tick, Vec<DeadLetter>>,
    /// One progress report per tick per source instance.
    pub reports: Stream<'scope, Tick, Vec<WatermarkReport>>,
}

/// A running source instance: its consumer and what it knows of its partitions.
struct Reader {
    consumer: BaseConsumer,
    partitions: Partitions,
}

/// Per-partition progress of one source instance.
struct Partitions {
    instance: u32,
    watermarks: PartitionWatermarks,
    /// Bounded mode: first offset not to read, per partition.
    end_offsets: HashMap<i32, i64>,
    config: KafkaSourceConfig,
}

/// Builds the Kafka source on every worker; instances run on `parallelism` workers.
pub fn kafka_source<'scope>(
    scope: Scope<'scope, Tick>,
    config: KafkaSourceConfig,
) -> Result<SourceStreams<'scope>> {
    let instance = config
        .placement
        .instance_on(scope.index(), config.parallelism);
    let reader = instance
        .map(|i| Reader::open(i as u32, config.clone()))
        .transpose()?;

    let mut builder = OperatorBuilder::new(format!("KafkaSource({})", config.topic), scope);
    let activator = scope.activator_for(builder.operator_info().address);
    let (events_out, events) = builder.new_output::<Vec<Event>>();
    let (dead_out, dead_letters) = builder.new_output::<Vec<DeadLetter>>();
    let (reports_out, reports) = builder.new_output::<Vec<WatermarkReport>>();
    let mut events_out = OutputBuilder::<_, VecBuilder<Event>>::from(events_out);
    let mut dead_out = OutputBuilder::<_, VecBuilder<DeadLetter>>::from(dead_out);
    let mut reports_out = OutputBuilder::<_, VecBuilder<WatermarkReport>>::from(reports_out);

    builder.build(move |capabilities| {
        let mut running = reader.map(|reader| {
            let now = unix_ms();
            let tick = now / reader.partitions.config.tick_ms;
            let caps: Vec<Capability<Tick>> =
                capabilities.iter().map(|c| c.delayed(&tick)).collect();
            (reader, caps)
        });
        drop(capabilities);
        activator.activate();
        move |_frontiers| {
            let Some((reader, caps)) = running.as_mut() else {
                return;
            };
            if reader.partitions.config.stop.load(Ordering::Relaxed) {
                tracing::info!(instance = reader.partitions.instance, "source stopped");
                running = None;
                return;
            }
            let now = unix_ms();
            let tick_ms = reader.partitions.config.tick_ms;
            let tick = now / tick_ms;
            if tick > *caps[0].time() {
                // Close the current tick: its records are out, so report its progress.
                let report = reader.partitions.report(now);
                reports_out.activate().session(&caps[2]).give(report);
                caps.iter_mut().for_each(|c| c.downgrade(&tick));
            }
            let mut events = Vec::new();
            let mut dead = Vec::new();
            let polled = reader.poll(now, &mut events, &mut dead);
            if !events.is_empty() {
                events_out
                    .activate()
                    .session(&caps[0])
                    .give_container(&mut events);
            }
            if !dead.is_empty() {
                dead_out
                    .activate()
                    .session(&caps[1])
                    .give_container(&mut dead);
            }
            if reader.partitions.config.bounded && reader.partitions.watermarks.all_finished() {
                let report = reader.partitions.report(now);
                reports_out.activate().session(&caps[2]).give(report);
                tracing::info!(
                    instance = reader.partitions.instance,
                    "source reached the end of its bounded input"
                );
                running = None;
                return;
            }
            if polled > 0 {
                activator.activate();
            } else {
                let until_next_tick = tick_ms - now % tick_ms;
                activator.activate_after(Duration::from_millis(until_next_tick.min(5)));
            }
        }
    });
    Ok(SourceStreams {
        events,
        dead_letters,
        reports,
    })
}

impl Reader {
    fn open(instance: u32, config: KafkaSourceConfig) -> Result<Reader> {
        let consumer: BaseConsumer = client_config(
            &config.properties,
            &[
                ("group.id", "weir"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "true"),
                ("auto.offset.reset", "earliest"),
            ],
        )
        .create()
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
        let owned: Vec<i32> = (0..partitions as i32)
            .filter(|p| (*p as usize) % config.parallelism == instance as usize)
            .collect();
        let now = unix_ms();
        let mut watermarks =
            PartitionWatermarks::new(config.max_out_of_orderness_ms, config.idle_timeout_ms);
        let mut assignment = TopicPartitionList::new();
        let mut end_offsets = HashMap::new();
        for &partition in &owned {
            watermarks.assign(partition, now);
            let start = match config.start {
                StartFrom::Earliest => Offset::Beginning,
                StartFrom::Latest => Offset::End,
            };
            assignment
                .add_partition_offset(&config.topic, partition, start)
                .map_err(|source| KafkaEdgeError::Request {
                    what: "assign".to_owned(),
                    source,
                })?;
            if config.bounded {
                let (low, high) = consumer
                    .fetch_watermarks(&config.topic, partition, Duration::from_secs(10))
                    .map_err(|source| KafkaEdgeError::Request {
                        what: format!("list offsets of {}/{partition}", config.topic),
                        source,
                    })?;
                let first = if config.start == StartFrom::Earliest {
                    low
                } else {
                    high
                };
                end_offsets.insert(partition, high);
                if first >= high {
                    watermarks.finish(partition);
                }
            }
        }
        consumer
            .assign(&assignment)
            .map_err(|source| KafkaEdgeError::Request {
                what: "assign".to_owned(),
                source,
            })?;
        tracing::info!(
            instance,
            ?owned,
            bounded = config.bounded,
            "source instance assigned"
        );
        Ok(Reader {
            consumer,
            partitions: Partitions {
                instance,
                watermarks,
                end_offsets,
                config,
            },
        })
    }

    /// Reads up to `max_batch` records; returns how many messages were handled.
    fn poll(&mut self, now_ms: u64, events: &mut Vec<Event>, dead: &mut Vec<DeadLetter>) -> usize {
        let mut handled = 0;
        while handled < self.partitions.config.max_batch {
            match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    self.partitions.watermarks.set_caught_up(partition, true);
                    if self.partitions.config.bounded {
                        // Everything present at start has been read (the end offset was taken
                        // before this fetch reached the end), e.g. when the broker's high
                        // watermark counts control records that are never delivered.
                        self.partitions.watermarks.finish(partition);
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, topic = %self.partitions.config.topic, "consumer error (librdkafka retries)");
                    break;
                }
                Some(Ok(message)) => {
                    handled += 1;
                    self.partitions.handle(&message, now_ms, events, dead);
                }
            }
        }
        handled
    }
}

impl Partitions {
    fn report(&self, now_ms: u64) -> WatermarkReport {
        WatermarkReport {
            source: self.instance,
            progress: self.watermarks.progress(now_ms),
        }
    }

    fn handle(
        &mut self,
        message: &BorrowedMessage<'_>,
        now_ms: u64,
        events: &mut Vec<Event>,
        dead: &mut Vec<DeadLetter>,
    ) {
        let partition = message.partition();
        let offset = message.offset();
        if let Some(&end) = self.end_offsets.get(&partition) {
            if offset >= end {
                self.watermarks.finish(partition);
                return;
            }
        }
        JobMetrics::add(&self.config.metrics.records_in, 1);
        self.watermarks.set_caught_up(partition, false);
        let position = SourcePosition { partition, offset };
        let payload = message.payload().unwrap_or_default();
        match self.config.decoder.decode(payload) {
            Ok(decoded) => {
                self.watermarks.observe(partition, decoded.ts, now_ms);
                JobMetrics::add(&self.config.metrics.events_in, 1);
                events.push(Event {
                    key_group: KeyGroup::of(decoded.key.as_bytes(), self.config.key_groups),
                    key: decoded.key,
                    ts: decoded.ts,
                    values: decoded.values,
                    position,
                });
            }
            Err(error) => {
                self.watermarks.touch(partition, now_ms);
                self.config.metrics.dead_letter(error.reason);
                dead.push(DeadLetter {
                    reason: error.reason,
                    error: error.message,
                    topic: self.config.topic.clone(),
                    position,
                    timestamp: message.timestamp().to_millis(),
                    key: message.key().map(<[u8]>::to_vec),
                    raw: payload.to_vec(),
                });
            }
        }
        if self
            .end_offsets
            .get(&partition)
            .is_some_and(|&end| offset + 1 >= end)
        {
            self.watermarks.finish(partition);
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
