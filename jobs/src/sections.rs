//! The sections of a job file as serde reads them (`[runtime]`, `[parallelism]`, `[source]`,
//! `[watermark]`, `[state]`, `[sink]`, `[checkpoint]`, `[metrics]`; `[model]` is in
//! [`crate::model_config`]): the text's shape, durations in milliseconds as written. A leaf:
//! [`crate::config`] assembles them into a `JobFile` and compiles that into plans.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Deserialize;

use weir_features::duration_ms;
use weir_features::schema::FieldDecl;
use weir_features::vocab::DEFAULT_KEY_GROUPS;
use weir_kafka::{DeliveryGuarantee, StartFrom};
use weir_operators::file_ranges::{RangeSplit, DEFAULT_SPLIT};
use weir_operators::source::RecordLimits;

/// `[runtime]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Timely worker threads per process.
    pub workers: usize,
    /// Processes of a multi-process run (`--processes`); the job has `workers × processes`
    /// Timely workers in all.
    pub processes: usize,
    /// Processing-time tick.
    #[serde(with = "duration_ms")]
    pub tick: i64,
    /// Number of key groups (fixed for the life of a job).
    pub key_groups: u32,
    /// Sources stop reading while the scores' progress, in any process, lags more than this
    /// behind their tick (backpressure across processes); 0 = no bound.
    #[serde(with = "duration_ms")]
    pub max_lag: i64,
    /// How long a process of a multi-process run waits for every other process to connect
    /// before it gives up (exit 2); 0 = wait forever.
    #[serde(with = "duration_ms")]
    pub connect_timeout: i64,
}

impl RuntimeSection {
    /// `max_lag` for the sources' pacing (`None` when it is 0: no bound).
    pub fn max_lag_ms(&self) -> Option<u64> {
        u64::try_from(self.max_lag).ok().filter(|ms| *ms > 0)
    }
}

impl Default for RuntimeSection {
    fn default() -> Self {
        RuntimeSection {
            workers: 1,
            processes: 1,
            tick: 100,
            key_groups: DEFAULT_KEY_GROUPS,
            max_lag: 2_000,
            connect_timeout: 120_000,
        }
    }
}

/// `[parallelism]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelismSection {
    /// Source instances.
    pub source: Option<usize>,
    /// Window instances.
    pub window: Option<usize>,
    /// Score instances.
    pub score: Option<usize>,
    /// Sink instances.
    pub sink: Option<usize>,
}

/// Where a job reads from / writes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// Kafka topics (the default).
    #[default]
    Kafka,
    /// JSON Lines files (bounded replays, training sets).
    File,
}

/// `[source]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSection {
    /// `kafka` (default) or `file`.
    #[serde(default)]
    pub kind: EdgeKind,
    /// Topic to read (kind = "kafka").
    #[serde(default)]
    pub topic: String,
    /// JSON Lines files to read, plain, gzip or zstd (kind = "file"; relative to the job file).
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// Where to start without a checkpoint: `earliest`, `latest`, an RFC 3339 time or
    /// per-partition offsets (`0:1200,1:900`); `weir run --from` overrides it.
    #[serde(default = "earliest")]
    pub start: StartFrom,
    /// Stop at the end offsets seen at start, flushing all windows.
    #[serde(default)]
    pub bounded: bool,
    /// Field holding the key.
    pub key: String,
    /// Field holding the event time (integer ms since the Unix epoch).
    pub event_time: String,
    /// Records read per source activation at most.
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// kind = "file": plain files larger than this are split into ranges of about this many
    /// bytes, read by every source instance (part of a file run's checkpoints: keep it across
    /// restores). `None`: the default ([`SourceSection::split`]), or the earlier default a
    /// restored checkpoint was written with (`crate::checkpointing::prepare`).
    #[serde(default)]
    pub range_bytes: Option<u64>,
    /// Largest decoded entity key in bytes; longer keys are `oversize` dead letters.
    #[serde(default = "default_max_key_bytes")]
    pub max_key_bytes: usize,
    /// Largest record (source key plus payload) in bytes; larger ones are `oversize` dead
    /// letters.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// Declared fields: `name = "type"` or `name = { type = "...", required = false }`.
    pub fields: BTreeMap<String, FieldDecl>,
    /// Consumer-only librdkafka properties, on top of `[kafka]`.
    #[serde(default)]
    pub kafka: BTreeMap<String, String>,
    /// How often an unbounded Kafka source looks for partitions added to its topic (0 = never).
    #[serde(default = "default_partition_discovery", with = "duration_ms")]
    pub partition_discovery: i64,
}

impl SourceSection {
    /// How the files are cut: ranges of `range_bytes` in every file larger than one, or when
    /// it is unset the default (`weir_operators::file_ranges::DEFAULT_SPLIT`: 128 KiB ranges,
    /// files of up to 512 KiB whole).
    pub fn split(&self) -> RangeSplit {
        self.range_bytes.map_or(DEFAULT_SPLIT, RangeSplit::every)
    }
}

fn earliest() -> StartFrom {
    StartFrom::Earliest
}

fn default_partition_discovery() -> i64 {
    10_000
}

/// A poll decodes into one buffer the source keeps; 512 events (~130 KiB) stay in a core's
/// cache between polls (run F at 1024 against 4096: BENCHMARKS.md, fix 18), and the events
/// in flight between the sources and the windows take less memory than at 1024 (2 to 5 MB
/// less resident in run F, in the same time: fix 36).
fn default_max_batch() -> usize {
    512
}

fn default_max_key_bytes() -> usize {
    RecordLimits::DEFAULT_MAX_KEY_BYTES
}

fn default_max_record_bytes() -> usize {
    RecordLimits::DEFAULT_MAX_RECORD_BYTES
}

/// `[watermark]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatermarkSection {
    /// Bounded out-of-orderness of event time per partition.
    #[serde(with = "duration_ms")]
    pub max_out_of_orderness: i64,
    /// A caught-up partition quiet for this long stops holding the watermark.
    #[serde(with = "duration_ms")]
    pub idle_timeout: i64,
    /// Records this far behind the watermark still update (and re-emit) their window.
    #[serde(with = "duration_ms")]
    pub allowed_lateness: i64,
    /// Records whose event time is more than this ahead of the wall clock are dead letters
    /// (`future_timestamp`) and never move a watermark; `"0s"` turns the check off. The
    /// default, 1 h, is Kafka's broker-side `log.message.timestamp.after.max.ms`.
    #[serde(with = "duration_ms")]
    pub max_future: i64,
}

impl Default for WatermarkSection {
    fn default() -> Self {
        WatermarkSection {
            max_out_of_orderness: 5_000,
            idle_timeout: 30_000,
            allowed_lateness: 0,
            max_future: 3_600_000,
        }
    }
}

/// `[state]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateSection {
    /// Close the windows of keys with no record for this long (processing time), marked as
    /// closed by timeout, and drop their state. Unset: keys are kept until their windows fire.
    #[serde(default)]
    pub ttl: Option<String>,
}

impl StateSection {
    /// The TTL in milliseconds, if set.
    pub fn ttl_ms(&self) -> Result<Option<i64>> {
        self.ttl
            .as_deref()
            .map(|text| duration_ms::parse(text).map_err(anyhow::Error::msg))
            .transpose()
            .context("[state] ttl")
    }
}

/// `[sink]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkSection {
    /// `kafka` (default) or `file`.
    #[serde(default)]
    pub kind: EdgeKind,
    /// Topic for score records (kind = "kafka").
    #[serde(default)]
    pub topic: String,
    /// Topic for dead letters (kind = "kafka").
    #[serde(default)]
    pub dead_letter_topic: String,
    /// JSON Lines file for score records (kind = "file"; relative to the job file).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// JSON Lines file for dead letters (kind = "file"; default: `<path>.dead-letters.jsonl`).
    #[serde(default)]
    pub dead_letter_path: Option<PathBuf>,
    /// Producer-only librdkafka properties, on top of `[kafka]`.
    #[serde(default)]
    pub kafka: BTreeMap<String, String>,
    /// `at_least_once` (default) or `exactly_once` (kind = "kafka"; needs `[checkpoint]`).
    #[serde(default)]
    pub delivery: DeliveryGuarantee,
}

/// `[checkpoint]`: absent = no checkpoints.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSection {
    /// Checkpoint location: a directory (local disk or a mount shared by every process),
    /// relative to the job file, or `s3://bucket/prefix` (credentials from the `AWS_*`
    /// environment).
    pub dir: PathBuf,
    /// Processing time between checkpoint epochs.
    #[serde(with = "duration_ms", default = "ten_seconds")]
    pub interval: i64,
    /// Committed checkpoints to keep.
    #[serde(default = "three")]
    pub retain: usize,
}

fn ten_seconds() -> i64 {
    10_000
}
fn three() -> usize {
    3
}

/// `[metrics]`: where `weir run` serves Prometheus metrics and its health probes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// `host:port`, or `"off"` (`--metrics-addr` overrides it).
    pub listen: String,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            listen: crate::plan::metrics::DEFAULT_METRICS_LISTEN.to_owned(),
        }
    }
}
