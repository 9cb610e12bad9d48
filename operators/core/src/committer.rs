//! The checkpoint committer (DESIGN.md §5): one instance (on the worker of instance 0) receives
//! every [`CheckpointPart`] of the job. When its input frontier passes a checkpoint epoch `E`,
//! every source has sent its offsets for `E`, every window instance has written its snapshot
//! of `E` and every sink has flushed its output of ticks `<= E` (they hold their capabilities
//! until then). It then writes `ckpt/<E>/MANIFEST` — offsets, key groups, parallelism, the
//! model versions served at that moment ([`CommitterConfig::serving`], this process's score
//! instances),
//! topology hash, snapshot files — with the store's atomic rename (the commit point),
//! prunes old epochs and runs the commit hook (Kafka consumer-group offsets, for lag
//! visibility only).

use std::collections::BTreeMap;
use std::sync::Arc;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use weir_checkpoint::{InputFingerprint, Manifest, SnapshotEntry, SnapshotStore, SourcePositions};
use weir_features::vocab::{Epoch, Tick};

use crate::clock::unix_ms;
use crate::epochs::{CheckpointPart, CheckpointStream, EpochClock};
use crate::metrics::JobMetrics;
use crate::serving::ServingModels;

/// Called after each commit (e.g. to commit Kafka consumer-group offsets).
pub type CommitHook = Arc<dyn Fn(&Manifest) + Send + Sync>;

/// What the committer writes into every manifest besides the parts it receives.
#[derive(Clone)]
pub struct CommitterConfig {
    /// The store to commit to.
    pub store: Arc<dyn SnapshotStore>,
    /// Which ticks are epochs.
    pub epochs: EpochClock,
    /// Key groups of the job.
    pub key_groups: u32,
    /// Parallelism of every operator, by name.
    pub parallelism: BTreeMap<String, usize>,
    /// The operators that snapshot their state at every epoch (e.g. the window operator's
    /// `WINDOW_OPERATOR`): an epoch without a snapshot of each is not committed.
    pub stateful_operators: Vec<String>,
    /// Model versions loaded at start, by model name: recorded while no score instance of
    /// this process reports what it serves (`serving`, which follows hot reloads).
    pub model_versions: BTreeMap<String, String>,
    /// What this process's score instances serve now (written by their inference threads).
    pub serving: Arc<ServingModels>,
    /// Hash of the job's features and topology.
    pub topology_hash: u64,
    /// The job's tick in milliseconds (epochs are numbered in ticks).
    pub tick_ms: u64,
    /// Committed epochs to keep.
    pub retain: usize,
    /// Positions of the restored checkpoint, per source (partitions that have not moved since
    /// keep them).
    pub restored_positions: BTreeMap<String, SourcePositions>,
    /// A file run's input files, recorded in every manifest (empty for Kafka).
    pub inputs: Vec<InputFingerprint>,
    /// The worker that commits.
    pub worker: usize,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Run after each commit.
    pub on_commit: Option<CommitHook>,
}

/// Extension trait: `parts.commit_checkpoints(config)`.
pub trait CommitCheckpoints {
    /// Commits every checkpoint epoch the job completes; see the module docs.
    fn commit_checkpoints(self, config: CommitterConfig);
}

impl CommitCheckpoints for CheckpointStream<'_> {
    fn commit_checkpoints(self, config: CommitterConfig) {
        let worker = config.worker as u64;
        let mut stash: BTreeMap<Tick, Vec<CheckpointPart>> = BTreeMap::new();
        let mut offsets = config.restored_positions.clone();
        // Set once a sink reports lost output: no later epoch commits (the run fails anyway).
        let mut output_lost = false;
        self.sink(
            Exchange::new(move |_: &CheckpointPart| worker),
            "CheckpointCommitter",
            move |(input, frontier)| {
                input.for_each(|capability, data| {
                    if let Some(&tick) = capability.least() {
                        stash.entry(tick).or_default().append(data);
                    }
                });
                let bound = frontier.frontier().iter().min().copied();
                while let Some(entry) = stash.first_entry() {
                    if bound.is_some_and(|b| *entry.key() >= b) {
                        break;
                    }
                    let (tick, parts) = entry.remove_entry();
                    let mut files = Vec::new();
                    let mut watermark: Option<i64> = None;
                    for part in parts {
                        match part {
                            CheckpointPart::Offsets { source, positions } => {
                                offsets.entry(source).or_default().merge(positions);
                            }
                            CheckpointPart::Snapshot(file) => files.push(file),
                            CheckpointPart::Watermark(w) => {
                                watermark = Some(watermark.map_or(w, |m| m.min(w)));
                            }
                            CheckpointPart::OutputLost => {
                                if !output_lost {
                                    tracing::error!(
                                        tick,
                                        "a sink lost output from this tick on; no further \
                                         checkpoint is committed, so a restart replays it"
                                    );
                                }
                                output_lost = true;
                            }
                        }
                    }
                    if !output_lost && config.epochs.is_epoch(tick) && !files.is_empty() {
                        commit(&config, tick, files, &offsets, watermark);
                    }
                }
            },
        );
    }
}

fn commit(
    config: &CommitterConfig,
    tick: Tick,
    mut files: Vec<SnapshotEntry>,
    offsets: &BTreeMap<String, SourcePositions>,
    window_watermark: Option<i64>,
) {
    files.sort_by(|a, b| (&a.operator, a.range).cmp(&(&b.operator, b.range)));
    let mut manifest = Manifest::new(Epoch(tick), config.key_groups);
    manifest.parallelism = config.parallelism.clone();
    manifest.set_positions(offsets);
    manifest.inputs = config.inputs.clone();
    let serving = config.serving.versions();
    manifest.model_versions = if serving.is_empty() {
        config.model_versions.clone()
    } else {
        serving
    };
    manifest.topology_hash = config.topology_hash;
    manifest.tick_ms = config.tick_ms;
    manifest.window_watermark = window_watermark;
    manifest.files = files;
    let has_snapshot = |operator: &String| manifest.files.iter().any(|f| &f.operator == operator);
    if let Some(missing) = config.stateful_operators.iter().find(|o| !has_snapshot(o)) {
        tracing::warn!(
            epoch = tick,
            "no {missing} snapshot for this epoch; not committed"
        );
        return;
    }
    if let Err(error) = manifest
        .validate()
        .and_then(|()| config.store.commit_manifest(&manifest))
    {
        tracing::error!(epoch = tick, %error, "checkpoint not committed");
        return;
    }
    let epoch_start_ms = tick.saturating_mul(config.tick_ms);
    config.metrics.checkpoints.record_commit(
        tick,
        manifest.total_size(),
        epoch_start_ms,
        unix_ms(),
    );
    tracing::info!(
        epoch = tick,
        bytes = manifest.total_size(),
        files = manifest.files.len(),
        "checkpoint committed"
    );
    if let Err(error) = config.store.prune(config.retain) {
        tracing::warn!(%error, "pruning old checkpoints failed");
    }
    if let Some(hook) = &config.on_commit {
        hook(&manifest);
    }
}
