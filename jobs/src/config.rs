//! Job files (TOML): the whole description of a job — runtime shape, per-stage parallelism,
//! Kafka properties, source schema, watermarks, window, features, model and sinks — parsed
//! with serde (unknown fields are errors) and validated into the pieces the pipeline needs.
//! See docs/JOB_FILE.md for every field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use weir_features::duration_ms;
use weir_features::feature::FeatureSpec;
use weir_features::job_features::JobFeatures;
use weir_features::job_features::Trigger;
use weir_features::schema::RecordSchema;
use weir_features::vocab::{DEFAULT_KEY_GROUPS, MAX_KEY_GROUPS};
use weir_features::window::WindowSpec;
use weir_kafka::DeliveryGuarantee;
use weir_operators::file_ranges::RangeSplit;
use weir_operators::source::RecordLimits;
use weir_operators::{Placement, StageParallelism};
use xxhash_rust::xxh3::Xxh3;

use crate::plan::millis::positive;
use crate::plan::{
    CheckpointSettings, KafkaInput, MetricsPlan, RuntimePlan, ScorePlan, SinkPlan, SourceInput,
    SourcePlan, TopicCheck, WindowPlan,
};

/// librdkafka's default `transaction.timeout.ms`.
const LIBRDKAFKA_TRANSACTION_TIMEOUT_MS: i64 = 60_000;

pub use crate::model_config::ModelSection;
pub use crate::sections::{
    CheckpointSection, EdgeKind, MetricsSection, ParallelismSection, RuntimeSection, SinkSection,
    SourceSection, StateSection, WatermarkSection,
};

/// A parsed job file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// Job name (used in logs and as the default consumer group).
    pub name: String,
    /// Process shape and timing.
    #[serde(default)]
    pub runtime: RuntimeSection,
    /// Per-stage parallelism; absent stages run on every worker.
    #[serde(default)]
    pub parallelism: ParallelismSection,
    /// librdkafka properties shared by every Kafka client of the job.
    #[serde(default)]
    pub kafka: BTreeMap<String, String>,
    /// The input.
    pub source: SourceSection,
    /// Event-time progress.
    #[serde(default)]
    pub watermark: WatermarkSection,
    /// The primary window: features without `window = "..."` use it, and its firings emit rows.
    pub window: WindowSpec,
    /// Named secondary windows (`[windows.<name>]`), for features with `window = "<name>"`.
    #[serde(default)]
    pub windows: BTreeMap<String, WindowSpec>,
    /// When feature vectors are emitted: on each primary window close (default) or on an
    /// event-time schedule (`[trigger] on = "schedule"`, `every = "1m"`).
    #[serde(default)]
    pub trigger: Trigger,
    /// Keyed state policy.
    #[serde(default)]
    pub state: StateSection,
    /// Features in model input order.
    pub features: Vec<FeatureSpec>,
    /// The model (absent: the job only computes features, `weir features`).
    #[serde(default)]
    pub model: Option<ModelSection>,
    /// Outputs (absent: defaults, e.g. for `weir features`, which writes to its `--output`).
    #[serde(default)]
    pub sink: SinkSection,
    /// Checkpoints (absent: none).
    #[serde(default)]
    pub checkpoint: Option<CheckpointSection>,
    /// The metrics server.
    #[serde(default)]
    pub metrics: MetricsSection,
    /// Directory of the job file (model paths are relative to it); set by [`JobFile::load`].
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// xxh3 of the file's bytes, set by [`JobFile::load`]: the processes of a cluster check
    /// that they all read the same file (`start_agreement`).
    #[serde(skip)]
    pub text_hash: u64,
}

/// A job file checked and compiled into what the pipeline runs: one plan per stage
/// ([`crate::plan`]); nothing downstream reads the job file again.
#[derive(Clone, Debug)]
pub struct CompiledJob {
    /// Job name (logs, the default consumer group).
    pub name: String,
    /// Process shape and timing.
    pub runtime: RuntimePlan,
    /// Per-stage parallelism.
    pub parallelism: StageParallelism,
    /// Input schema.
    pub schema: RecordSchema,
    /// Features.
    pub features: JobFeatures,
    /// The source stage.
    pub source: SourcePlan,
    /// The window stage (beside `features`).
    pub windows: WindowPlan,
    /// The score stage (`None`: the job file has no `[model]`; [`CompiledJob::score`]).
    pub score: Option<ScorePlan>,
    /// The sinks.
    pub sinks: SinkPlan,
    /// Checkpoints (`None`: none).
    pub checkpoints: Option<CheckpointSettings>,
    /// The Kafka topics to check before the run (`None`: the job uses no Kafka).
    pub topic_check: Option<TopicCheck>,
    /// Where the metrics server listens.
    pub metrics: MetricsPlan,
    /// Hash of what a snapshot's meaning depends on ([`JobFile::topology_hash`]).
    pub topology_hash: u64,
    /// A file source whose job file leaves `[source] range_bytes` unset: the layouts of the
    /// earlier defaults, which a checkpoint it restores may have been written with (empty
    /// otherwise; [`CompiledJob::keep_ranges`]).
    pub earlier_default_ranges: Vec<RangeLayoutHash>,
    /// [`JobFile::text_hash`].
    pub job_file_hash: u64,
}

/// A file source's split into ranges and the topology hash the job has with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeLayoutHash {
    /// How `[source] range_bytes` cuts the files.
    pub split: RangeSplit,
    /// [`JobFile::topology_hash`] with these ranges.
    pub topology_hash: u64,
}

impl CompiledJob {
    /// Reads the file source in the ranges of `layout.split` (an earlier default, which the
    /// checkpoint this run restores was written with), and checkpoints under that layout's
    /// topology hash. Nothing for a Kafka source.
    pub fn keep_ranges(&mut self, layout: RangeLayoutHash) {
        if let SourceInput::Files { split, .. } = &mut self.source.input {
            *split = layout.split;
            self.topology_hash = layout.topology_hash;
        }
    }

    /// The score stage; an error naming the missing section when the job file has no
    /// `[model]` (a features-only job, which `weir run` cannot score).
    pub fn score(&self) -> Result<&ScorePlan> {
        self.score.as_ref().with_context(|| {
            format!(
                "job `{}` has no [model] section: `weir run` scores every window with a model \
                 (path = \"…\" or registry = \"…\"); `weir features` computes the features \
                 without one",
                self.name
            )
        })
    }
}

impl JobFile {
    /// Reads and parses a job file.
    pub fn load(path: &Path) -> Result<JobFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read job file {}", path.display()))?;
        let mut job: JobFile = toml::from_str(&text)
            .with_context(|| format!("invalid job file {}", path.display()))?;
        job.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        job.text_hash = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
        Ok(job)
    }

    /// [`JobFile::load`], then `--brokers` (when given) as every Kafka client's
    /// `bootstrap.servers`, over `[kafka]`.
    pub fn load_with_brokers(path: &Path, brokers: Option<&str>) -> Result<JobFile> {
        let mut job = JobFile::load(path)?;
        if let Some(brokers) = brokers {
            job.kafka
                .insert("bootstrap.servers".to_owned(), brokers.to_owned());
        }
        Ok(job)
    }

    /// The model directory (or, with `[model] registry`, the model's registry directory),
    /// resolved against the job file's directory (`None` without `[model]`).
    pub fn model_dir(&self) -> Option<PathBuf> {
        self.model.as_ref().map(|model| model.dir(&self.base_dir))
    }

    /// Input files, resolved against the job file's directory.
    pub fn source_paths(&self) -> Vec<PathBuf> {
        self.source
            .paths
            .iter()
            .map(|p| self.base_dir.join(p))
            .collect()
    }

    /// Score and dead-letter output files, resolved against the job file's directory.
    pub fn sink_paths(&self) -> Option<(PathBuf, PathBuf)> {
        let path = self.base_dir.join(self.sink.path.as_ref()?);
        let dead = match &self.sink.dead_letter_path {
            Some(dead) => self.base_dir.join(dead),
            None => PathBuf::from(format!("{}.dead-letters.jsonl", path.display())),
        };
        Some((path, dead))
    }

    /// Switches the source to files (`weir run --input-file`, `weir features --input`); paths
    /// given on the command line are used as they are.
    pub fn use_input_files(&mut self, paths: Vec<PathBuf>) {
        self.source.kind = EdgeKind::File;
        self.source.paths = paths.into_iter().map(absolute).collect();
    }

    /// Switches the sink to files (`weir run --output-file`, `weir features --output`).
    pub fn use_output_file(&mut self, path: PathBuf, dead_letters: Option<PathBuf>) {
        self.sink.kind = EdgeKind::File;
        self.sink.path = Some(absolute(path));
        self.sink.dead_letter_path = dead_letters.map(absolute);
    }

    /// Whether the input ends: `[source] bounded`, or files (always read to their end).
    pub fn is_bounded(&self) -> bool {
        self.source.bounded || self.source.kind == EdgeKind::File
    }

    /// Whether any Kafka client is needed.
    pub fn uses_kafka(&self) -> bool {
        self.source.kind == EdgeKind::Kafka || self.sink.kind == EdgeKind::Kafka
    }

    /// What dead letters name as their source: the topic, or the input file(s).
    pub fn source_name(&self) -> String {
        match self.source.kind {
            EdgeKind::Kafka => self.source.topic.clone(),
            EdgeKind::File => {
                let paths: Vec<String> = self
                    .source_paths()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                paths.join(",")
            }
        }
    }

    /// Applies `--checkpoint-dir` (a path as given, turning checkpoints on) and
    /// `--checkpoint-interval`.
    pub fn override_checkpoints(
        &mut self,
        dir: Option<PathBuf>,
        interval: Option<&str>,
    ) -> Result<()> {
        if let Some(dir) = dir {
            let dir = if weir_checkpoint::is_object_store_url(&dir) {
                dir
            } else {
                absolute(dir)
            };
            match &mut self.checkpoint {
                Some(section) => section.dir = dir,
                None => {
                    self.checkpoint = Some(CheckpointSection {
                        dir,
                        interval: 10_000,
                        retain: 3,
                    })
                }
            }
        }
        if let Some(text) = interval {
            let section = self
                .checkpoint
                .as_mut()
                .context("--checkpoint-interval needs [checkpoint] or --checkpoint-dir")?;
            section.interval = duration_ms::parse(text)
                .map_err(anyhow::Error::msg)
                .context("--checkpoint-interval")?;
        }
        Ok(())
    }

    /// Applies `--parallelism source=2,window=4,...`.
    pub fn override_parallelism(&mut self, flags: &str) -> Result<()> {
        for item in flags.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (stage, value) = item
                .split_once('=')
                .with_context(|| format!("--parallelism item `{item}` must look like stage=n"))?;
            let n: usize = value
                .trim()
                .parse()
                .with_context(|| format!("--parallelism {stage}: `{value}` is not a number"))?;
            let slot = match stage.trim() {
                "source" => &mut self.parallelism.source,
                "window" => &mut self.parallelism.window,
                "score" => &mut self.parallelism.score,
                "sink" => &mut self.parallelism.sink,
                other => bail!(
                    "--parallelism: unknown stage `{other}` (stages: source, window, score, sink)"
                ),
            };
            *slot = Some(n);
        }
        Ok(())
    }

    /// Checks every section and compiles schema and features.
    pub fn compile(self) -> Result<CompiledJob> {
        let runtime = &self.runtime;
        if runtime.workers == 0 {
            bail!("[runtime] workers must be at least 1");
        }
        if runtime.tick <= 0 {
            bail!("[runtime] tick must be positive, e.g. \"100ms\"");
        }
        if runtime.max_lag < 0 || (runtime.max_lag > 0 && runtime.max_lag < runtime.tick) {
            bail!(
                "[runtime] max_lag must be at least one tick ({} ms) or \"0s\" for no bound, e.g. \"2s\"",
                runtime.tick
            );
        }
        if runtime.connect_timeout < 0 {
            bail!("[runtime] connect_timeout must not be negative (\"0s\" waits forever)");
        }
        if runtime.key_groups == 0 || runtime.key_groups > MAX_KEY_GROUPS {
            bail!(
                "[runtime] key_groups must be between 1 and {MAX_KEY_GROUPS} (default {DEFAULT_KEY_GROUPS})"
            );
        }
        if runtime.processes == 0 {
            bail!("[runtime] processes must be at least 1");
        }
        let workers = runtime.workers * runtime.processes;
        let p = &self.parallelism;
        let parallelism = StageParallelism {
            source: p.source.unwrap_or(workers),
            window: p.window.unwrap_or(workers),
            score: p.score.unwrap_or(workers),
            sink: p.sink.unwrap_or(workers),
        };
        parallelism.validate(workers)?;
        let w = &self.watermark;
        if w.max_out_of_orderness < 0
            || w.idle_timeout <= 0
            || w.allowed_lateness < 0
            || w.max_future < 0
        {
            bail!("[watermark] durations must be non-negative and idle_timeout positive");
        }
        if self.source.range_bytes == Some(0) {
            bail!("[source] range_bytes must be at least 1");
        }
        if self.source.max_batch == 0 {
            bail!("[source] max_batch must be at least 1");
        }
        if self.source.max_key_bytes == 0 || self.source.max_record_bytes == 0 {
            bail!("[source] max_key_bytes and max_record_bytes must be at least 1");
        }
        // The CPU budget is per process: each has `runtime.workers` threads and its share of
        // the score instances.
        let placement = Placement::new(workers, runtime.processes);
        let score = self
            .model
            .as_ref()
            .map(|model| model.plan(&self.base_dir, placement, parallelism.score))
            .transpose()?;
        if self.uses_kafka()
            && !self.kafka.contains_key("bootstrap.servers")
            && !self.source.kafka.contains_key("bootstrap.servers")
        {
            bail!("[kafka] needs \"bootstrap.servers\" = \"host:port\" (or pass --brokers)");
        }
        match self.source.kind {
            EdgeKind::Kafka if self.source.topic.is_empty() => {
                bail!("[source] kind = \"kafka\" needs topic = \"...\"")
            }
            EdgeKind::File if self.source.paths.is_empty() => {
                bail!("[source] kind = \"file\" needs paths = [\"events.jsonl\", ...]")
            }
            _ => {}
        }
        match self.sink.kind {
            EdgeKind::Kafka
                if self.sink.topic.is_empty() || self.sink.dead_letter_topic.is_empty() =>
            {
                bail!(
                    "[sink] kind = \"kafka\" needs topic = \"...\" and dead_letter_topic = \"...\""
                )
            }
            EdgeKind::File if self.sink.path.is_none() => {
                bail!("[sink] kind = \"file\" needs path = \"scores.jsonl\"")
            }
            _ => {}
        }
        self.check_exactly_once()?;
        self.window.validate().context("[window]")?;
        let state_ttl = self.state.ttl_ms()?;
        if state_ttl.is_some_and(|ttl| ttl <= 0) {
            bail!("[state] ttl must be positive, e.g. \"30m\"");
        }
        let schema = RecordSchema::new(
            &self.source.fields,
            &self.source.key,
            &self.source.event_time,
        )
        .context("[source]")?;
        let features = JobFeatures::compile(&self.features, &schema, &self.window, &self.windows)
            .context("[[features]]")?
            .with_trigger(self.trigger)
            .context("[trigger]")?;
        let checkpoints = self.checkpoint_settings()?;
        let runtime = RuntimePlan {
            workers: runtime.workers,
            processes: runtime.processes,
            placement,
            tick: Duration::from_millis(runtime.tick.unsigned_abs()),
            key_groups: runtime.key_groups,
            max_lag: positive(runtime.max_lag),
            connect_timeout: positive(runtime.connect_timeout),
        };
        Ok(CompiledJob {
            name: self.name.clone(),
            runtime,
            parallelism,
            schema,
            features,
            source: self.source_plan(),
            windows: WindowPlan {
                allowed_lateness: self.watermark.allowed_lateness,
                state_ttl: state_ttl.and_then(positive),
            },
            score,
            sinks: self.sink_plan(),
            checkpoints,
            topic_check: self.topic_check(),
            metrics: MetricsPlan::parse(&self.metrics.listen, "[metrics] listen")?,
            topology_hash: self.topology_hash(),
            earlier_default_ranges: self.earlier_default_ranges(),
            job_file_hash: self.text_hash,
        })
    }

    /// Hash of everything a snapshot's meaning depends on: the schema, the features, the
    /// windows, the trigger and the lateness, and for a file source the size of its ranges.
    /// Parallelism and worker counts are not in it (a rescale is a restore).
    pub fn topology_hash(&self) -> u64 {
        self.topology_hash_with_ranges(self.source.split())
    }

    /// [`JobFile::topology_hash`] as if `[source] range_bytes` cut the files as `split`.
    fn topology_hash_with_ranges(&self, split: RangeSplit) -> u64 {
        let mut hasher = Xxh3::with_seed(0x5745_4952_544f_5031); // "WEIRTOP1"
        let described = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{}|{}|{}",
            self.source.fields,
            self.features,
            self.window,
            self.windows,
            self.trigger,
            self.source.key,
            self.source.event_time,
            self.watermark.allowed_lateness,
        );
        hasher.update(described.as_bytes());
        if self.source.kind == EdgeKind::File {
            // A file source's checkpoint offsets are byte positions in ranges numbered by
            // their size (operators/core/src/file_ranges.rs): with another `range_bytes`, or
            // from before byte positions (line numbers), the same numbers mean other ranges
            // and lines, so such a checkpoint is refused instead of resumed at the wrong place.
            // A split of every file reads as it did before files of up to 512 KiB were kept
            // whole by default (`|file ranges of N bytes`), so its checkpoints stay valid.
            hasher.update(format!("|file {split}").as_bytes());
        }
        hasher.digest()
    }

    /// [`CompiledJob::earlier_default_ranges`]: the topology hash with each earlier default
    /// range size, for a file source that leaves `range_bytes` unset.
    fn earlier_default_ranges(&self) -> Vec<RangeLayoutHash> {
        if self.source.kind != EdgeKind::File || self.source.range_bytes.is_some() {
            return Vec::new();
        }
        weir_operators::file_ranges::EARLIER_DEFAULT_SPLITS
            .iter()
            .map(|&split| RangeLayoutHash {
                split,
                topology_hash: self.topology_hash_with_ranges(split),
            })
            .collect()
    }

    /// Consumer properties: `[kafka]`, the default `group.id`, then `[source.kafka]`.
    fn consumer_properties(&self) -> BTreeMap<String, String> {
        let mut properties = self.kafka.clone();
        properties
            .entry("group.id".to_owned())
            .or_insert_with(|| format!("weir-{}", self.name));
        properties.extend(self.source.kafka.clone());
        properties
    }

    fn source_plan(&self) -> SourcePlan {
        let source = &self.source;
        let input = match source.kind {
            EdgeKind::Kafka => SourceInput::Kafka(KafkaInput {
                topic: source.topic.clone(),
                properties: self.consumer_properties(),
                start: source.start.clone(),
                stop: None,
                partition_discovery: positive(source.partition_discovery),
            }),
            EdgeKind::File => SourceInput::Files {
                paths: self.source_paths(),
                split: source.split(),
            },
        };
        SourcePlan {
            name: self.source_name(),
            input,
            bounded: self.is_bounded(),
            max_batch: source.max_batch,
            max_out_of_orderness: self.watermark.max_out_of_orderness,
            idle_timeout: Duration::from_millis(self.watermark.idle_timeout.unsigned_abs()),
            max_future: (self.watermark.max_future > 0).then_some(self.watermark.max_future),
            limits: RecordLimits {
                max_key_bytes: source.max_key_bytes,
                max_record_bytes: source.max_record_bytes,
            },
        }
    }

    /// `[sink] delivery = "exactly_once"`: Kafka sinks, checkpoints (one transaction per
    /// epoch), and a `transaction.timeout.ms` that outlasts a checkpoint interval (a
    /// transaction stays open for one interval and its flush; the broker aborts one that
    /// passes its timeout).
    fn check_exactly_once(&self) -> Result<()> {
        if self.sink.delivery != DeliveryGuarantee::ExactlyOnce {
            return Ok(());
        }
        if self.sink.kind != EdgeKind::Kafka {
            bail!("[sink] delivery = \"exactly_once\" needs kind = \"kafka\" (a file sink is rewritten from the checkpoint on restore)");
        }
        let Some(checkpoint) = &self.checkpoint else {
            bail!("[sink] delivery = \"exactly_once\" commits one Kafka transaction per checkpoint epoch: add a [checkpoint] section");
        };
        let key = "transaction.timeout.ms";
        let timeout = match self.sink.kafka.get(key).or_else(|| self.kafka.get(key)) {
            Some(text) => text.trim().parse::<i64>().with_context(|| {
                format!("[sink.kafka] {key} = {text:?} is not a number of milliseconds")
            })?,
            None => LIBRDKAFKA_TRANSACTION_TIMEOUT_MS,
        };
        if timeout < 2 * checkpoint.interval {
            bail!(
                "[sink.kafka] {key} = {timeout} ms is less than twice the checkpoint interval ({} ms): a transaction is open for an interval and its flush, and the broker aborts it after {key}; set {key} to at least {} (and the broker's transaction.max.timeout.ms at least as high) or shorten [checkpoint] interval",
                checkpoint.interval,
                2 * checkpoint.interval
            );
        }
        Ok(())
    }

    fn sink_plan(&self) -> SinkPlan {
        match (self.sink.kind, self.sink_paths()) {
            (EdgeKind::File, Some((scores, dead_letters))) => SinkPlan::File {
                scores,
                dead_letters,
            },
            _ => {
                let mut properties = self.kafka.clone();
                properties.extend(self.sink.kafka.clone());
                SinkPlan::Kafka {
                    scores_topic: self.sink.topic.clone(),
                    dead_letter_topic: self.sink.dead_letter_topic.clone(),
                    properties,
                    delivery: self.sink.delivery,
                }
            }
        }
    }

    /// The Kafka topics `weir run` checks before it starts (`None`: the job uses no Kafka).
    pub fn topic_check(&self) -> Option<TopicCheck> {
        if !self.uses_kafka() {
            return None;
        }
        let mut properties = self.kafka.clone();
        properties.extend(self.source.kafka.clone());
        let mut topics = Vec::new();
        if self.source.kind == EdgeKind::Kafka {
            topics.push(self.source.topic.clone());
        }
        if self.sink.kind == EdgeKind::Kafka {
            topics.extend([self.sink.topic.clone(), self.sink.dead_letter_topic.clone()]);
        }
        Some(TopicCheck { properties, topics })
    }

    fn checkpoint_settings(&self) -> Result<Option<CheckpointSettings>> {
        let Some(section) = &self.checkpoint else {
            return Ok(None);
        };
        let Some(interval) = positive(section.interval) else {
            bail!("[checkpoint] interval must be positive, e.g. \"10s\"");
        };
        Ok(Some(CheckpointSettings {
            // A local directory is relative to the job file; s3://bucket/prefix is as given.
            dir: if weir_checkpoint::is_object_store_url(&section.dir) {
                section.dir.clone()
            } else {
                self.base_dir.join(&section.dir)
            },
            interval,
            retain: section.retain.max(1),
        }))
    }
}

fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        return path;
    }
    std::env::current_dir().map_or(path.clone(), |cwd| cwd.join(path))
}
