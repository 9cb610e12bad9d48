//! The source stage: where records come from (a Kafka topic with its consumer properties, or
//! files), how they are read and how event time progresses.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use weir_features::vocab::EventTime;
use weir_kafka::StartFrom;
use weir_operators::file_ranges::RangeSplit;
use weir_operators::source::RecordLimits;

/// `[source]` and `[watermark]` as the source operators use them.
#[derive(Clone, Debug)]
pub struct SourcePlan {
    /// What dead letters and checkpoints name as the source: the topic, or the input file(s).
    pub name: String,
    /// Kafka or files.
    pub input: SourceInput,
    /// Whether the input ends (`[source] bounded`, or files).
    pub bounded: bool,
    /// Records read per source activation at most.
    pub max_batch: usize,
    /// Bounded out-of-orderness of event time per partition.
    pub max_out_of_orderness: EventTime,
    /// A caught-up partition quiet for this long stops holding the watermark.
    pub idle_timeout: Duration,
    /// Event times more than this ahead of the wall clock are dead letters (`None`: off).
    pub max_future: Option<EventTime>,
    /// Largest key and record accepted at decode.
    pub limits: RecordLimits,
}

/// Where the records come from.
#[derive(Clone, Debug)]
pub enum SourceInput {
    /// A Kafka topic.
    Kafka(KafkaInput),
    /// JSON Lines files (plain, gzip or zstd), split into byte ranges.
    Files {
        /// The files, resolved against the job file.
        paths: Vec<PathBuf>,
        /// How plain files are cut into ranges.
        split: RangeSplit,
    },
}

/// A Kafka source.
#[derive(Clone, Debug)]
pub struct KafkaInput {
    /// The topic.
    pub topic: String,
    /// Consumer properties: `[kafka]`, the default `group.id` (`weir-<name>`), then
    /// `[source.kafka]`.
    pub properties: BTreeMap<String, String>,
    /// Where to start without a checkpoint.
    pub start: StartFrom,
    /// Where a bounded run stops, if before the end at start (`weir replay --to`; no job-file
    /// key).
    pub stop: Option<StartFrom>,
    /// How often an unbounded source looks for new partitions (`None`: never).
    pub partition_discovery: Option<Duration>,
}

impl SourcePlan {
    /// The Kafka source, if the job reads Kafka.
    pub fn kafka(&self) -> Option<&KafkaInput> {
        match &self.input {
            SourceInput::Kafka(kafka) => Some(kafka),
            SourceInput::Files { .. } => None,
        }
    }
}
