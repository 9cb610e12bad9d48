//! Checkpointing of a run (`--restore`; the `[checkpoint]` section is in
//! [`crate::sections`]; its `dir` is a directory or `s3://bucket/prefix`, opened by
//! [`weir_checkpoint::open_store`]) and the choice, before the workers start, of the checkpoint to restore (DESIGN.md §5): the newest
//! valid one (a corrupt or partial epoch is skipped with a log line naming the reason), or a
//! named epoch; a checkpoint of a job whose features or key groups changed is refused.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use weir_checkpoint::{InputFingerprint, Manifest, SnapshotStore};
use weir_features::vocab::Epoch;
use weir_operators::epochs::{EpochClock, OperatorCheckpoints};

use weir_kafka::{transaction_fence, DeliveryGuarantee};

use crate::config::{CompiledJob, JobFile};
use crate::plan::millis::millis;
use crate::plan::{SinkPlan, SourceInput};

/// What `--restore` asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RestoreChoice {
    /// The newest valid checkpoint if there is one, else a fresh start (the default).
    #[default]
    Auto,
    /// The newest valid checkpoint; an error if there is none.
    Latest,
    /// This epoch; an error if it is not valid.
    Epoch(u64),
    /// Start fresh even if checkpoints exist.
    Fresh,
}

impl FromStr for RestoreChoice {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "auto" => Ok(RestoreChoice::Auto),
            "latest" => Ok(RestoreChoice::Latest),
            "none" => Ok(RestoreChoice::Fresh),
            other => other.parse().map(RestoreChoice::Epoch).map_err(|_| {
                format!(
                    "--restore takes `latest`, `none`, `auto` or an epoch number, not `{other}`"
                )
            }),
        }
    }
}

/// Checkpointing of one run, decided before the workers start.
#[derive(Clone)]
pub struct CheckpointPlan {
    /// The store.
    pub store: Arc<dyn SnapshotStore>,
    /// Which ticks are epochs.
    pub clock: EpochClock,
    /// Committed epochs to keep.
    pub retain: usize,
    /// The checkpoint this run starts from.
    pub restore: Option<Arc<Manifest>>,
    /// Hash of the job's features and topology (recorded in every manifest).
    pub topology_hash: u64,
    /// A file job's input files as they are at its start (recorded in every manifest; a
    /// restore has checked them against the checkpoint's).
    pub inputs: Vec<InputFingerprint>,
}

impl std::fmt::Debug for CheckpointPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointPlan")
            .field("clock", &self.clock)
            .field("retain", &self.retain)
            .field("restore", &self.restore.as_ref().map(|m| m.epoch))
            .finish_non_exhaustive()
    }
}

impl CheckpointPlan {
    /// What a stateful operator needs.
    pub fn operator(&self) -> OperatorCheckpoints {
        OperatorCheckpoints {
            clock: self.clock,
            store: Some(self.store.clone()),
            restore: self.restore.clone(),
        }
    }
}

/// Hash of everything a snapshot's meaning depends on ([`JobFile::topology_hash`]; a
/// compiled job carries it as `CompiledJob::topology_hash`).
pub fn topology_hash(job: &JobFile) -> u64 {
    job.topology_hash()
}

/// Opens the job's checkpoint store and picks the checkpoint to restore; `None` when the job
/// has no `[checkpoint]` section. A file job that leaves `[source] range_bytes` unset and
/// restores a checkpoint written with an earlier default keeps that checkpoint's ranges
/// ([`CompiledJob::keep_ranges`]): upgrading Weir does not make its checkpoints unusable.
pub fn prepare(job: &mut CompiledJob, choice: RestoreChoice) -> Result<Option<CheckpointPlan>> {
    let Some(settings) = job.checkpoints.clone() else {
        if matches!(choice, RestoreChoice::Latest | RestoreChoice::Epoch(_)) {
            bail!(
                "--restore needs a [checkpoint] section with dir = \"...\" (or --checkpoint-dir)"
            );
        }
        return Ok(None);
    };
    let dir = &settings.dir;
    let tick_ms = millis(job.runtime.tick);
    let store: Arc<dyn SnapshotStore> = weir_checkpoint::open_store(dir)
        .with_context(|| format!("cannot open the checkpoint store {}", dir.display()))?
        .into();
    let manifest = match choice {
        RestoreChoice::Fresh => {
            // New epochs share the directory with these: they must be numbered alike.
            if let Some(newest) = store.latest_valid()? {
                check_same_tick(&newest, tick_ms)?;
            }
            None
        }
        RestoreChoice::Auto | RestoreChoice::Latest => {
            let found = store.latest_valid()?;
            if found.is_none() && choice == RestoreChoice::Latest {
                bail!("--restore latest: no valid checkpoint in {}", dir.display());
            }
            found
        }
        RestoreChoice::Epoch(epoch) => {
            Some(store.verify_epoch(Epoch(epoch)).with_context(|| {
                format!(
                    "--restore {epoch}: checkpoint {epoch} in {} cannot be restored",
                    dir.display()
                )
            })?)
        }
    };
    let inputs = input_fingerprints(job)?;
    if let Some(manifest) = &manifest {
        keep_checkpoint_ranges(job, manifest);
        check_compatible(job, manifest)?;
        check_same_inputs(manifest, &inputs)?;
        tracing::info!(
            epoch = manifest.epoch.0,
            dir = %dir.display(),
            bytes = manifest.total_size(),
            "restoring from checkpoint {}",
            manifest.epoch.0
        );
    } else {
        tracing::info!(dir = %dir.display(), "starting without a checkpoint");
    }
    Ok(Some(CheckpointPlan {
        store,
        clock: EpochClock::every(millis(settings.interval), tick_ms),
        retain: settings.retain,
        restore: manifest.map(Arc::new),
        topology_hash: job.topology_hash,
        inputs,
    }))
}

/// Fingerprints of a file job's input files (none for Kafka; a pipe or other non-regular
/// input has none either): see [`weir_checkpoint::input_files`].
fn input_fingerprints(job: &CompiledJob) -> Result<Vec<InputFingerprint>> {
    let SourceInput::Files { paths, .. } = &job.source.input else {
        return Ok(Vec::new());
    };
    let regular = paths.iter().filter(|path| path.is_file());
    regular
        .map(|path| {
            InputFingerprint::of(path).with_context(|| {
                format!(
                    "cannot read input file {} to record it in checkpoints",
                    path.display()
                )
            })
        })
        .collect()
}

/// Refuses to resume `manifest` over input files that changed since it was taken: its
/// positions and finished ranges belong to the bytes it read.
fn check_same_inputs(manifest: &Manifest, inputs: &[InputFingerprint]) -> Result<()> {
    for recorded in &manifest.inputs {
        let now = inputs.iter().find(|now| now.path == recorded.path);
        if let Some(change) = now.and_then(|now| recorded.difference(now)) {
            bail!(
                "checkpoint {} was taken over other input files: {change}; its positions and finished ranges belong to the bytes it read, so resuming would skip or repeat records — restore with the original files, or start over with --restore none",
                manifest.epoch.0
            );
        }
    }
    Ok(())
}

/// When `manifest` was written by this job with an earlier default range size (the job file
/// leaves `range_bytes` unset), reads the files in those ranges: its positions are numbered
/// by them.
fn keep_checkpoint_ranges(job: &mut CompiledJob, manifest: &Manifest) {
    let written_with = job
        .earlier_default_ranges
        .iter()
        .copied()
        .find(|layout| layout.topology_hash == manifest.topology_hash);
    let Some(layout) = written_with else {
        return;
    };
    tracing::info!(
        epoch = manifest.epoch.0,
        range_bytes = layout.split.range_bytes,
        "checkpoint {} was written with file {} (an earlier default of [source] range_bytes): this run reads its files in those ranges; set range_bytes to choose",
        manifest.epoch.0,
        layout.split
    );
    job.keep_ranges(layout);
}

/// Epochs are numbered in ticks (`unix_ms / tick`): checkpoints taken with another tick
/// cannot be ordered with this job's, so a restore would pick a stale one and retention would
/// delete the new ones as old.
fn check_same_tick(manifest: &Manifest, tick_ms: u64) -> Result<()> {
    let (epoch, recorded) = (manifest.epoch.0, manifest.tick_ms);
    if recorded != 0 && recorded != tick_ms {
        bail!(
            "checkpoint {epoch} was taken with [runtime] tick = {recorded} ms but the job has {tick_ms} ms; epochs are numbered in ticks, so the two cannot share a checkpoint directory — run with the original tick, or use another checkpoint directory"
        );
    }
    Ok(())
}

fn check_compatible(job: &CompiledJob, manifest: &Manifest) -> Result<()> {
    let hash = job.topology_hash;
    check_same_tick(manifest, millis(job.runtime.tick))?;
    let epoch = manifest.epoch.0;
    let groups = job.runtime.key_groups;
    if manifest.key_groups != groups {
        bail!(
            "checkpoint {epoch} was written with {} key groups but the job has [runtime] key_groups = {groups}; key groups are fixed for the life of a job (restore with --restore none to start over)",
            manifest.key_groups
        );
    }
    let source = &job.source.name;
    let read: Vec<&str> = manifest.source_names().collect();
    if !read.is_empty() && !read.contains(&source.as_str()) {
        bail!(
            "checkpoint {epoch} was written by a job reading {} but this job reads {source}; its window state and offsets belong to that input (a replay over files, or another job sharing the directory?) — use another checkpoint directory ([checkpoint] dir or --checkpoint-dir), or start over with --restore none",
            read.join(", ")
        );
    }
    if manifest.topology_hash != hash {
        bail!(
            "checkpoint {epoch} was written by a job with different features, windows, trigger, schema or lateness (topology hash {:016x}, this job {hash:016x}); its state cannot be reused — restore with the original job file, or start over with --restore none",
            manifest.topology_hash
        );
    }
    Ok(())
}

/// Before the sinks start: a restore of an exactly-once job with fewer sink instances than the
/// checkpoint's run had fences the `transactional.id`s of the removed instances, so that a
/// transaction one of them left open does not hold `read_committed` readers back until it
/// times out ([`weir_kafka::transaction_fence`]). Process 0 does it for the cluster.
pub fn fence_removed_sinks(
    job: &CompiledJob,
    checkpoints: Option<&CheckpointPlan>,
    process: usize,
) -> Result<()> {
    let SinkPlan::Kafka {
        properties,
        delivery: DeliveryGuarantee::ExactlyOnce,
        ..
    } = &job.sinks
    else {
        return Ok(());
    };
    let Some(restored) = checkpoints.and_then(|c| c.restore.as_ref()) else {
        return Ok(());
    };
    let before = restored.parallelism.get("sink").copied().unwrap_or(0);
    let removed = transaction_fence::removed_instances(before, job.parallelism.sink);
    if process != 0 || removed.is_empty() {
        return Ok(());
    }
    let fenced = transaction_fence::fence_removed_instances(properties, &job.name, removed)
        .context("cannot fence the sink instances this restore removes")?;
    tracing::info!(
        from = before,
        to = job.parallelism.sink,
        fenced = ?fenced,
        "exactly-once sinks rescaled down: fenced the removed instances' transactional ids"
    );
    Ok(())
}

/// Parallelism by operator name, as recorded in manifests.
pub fn parallelism_by_operator(job: &CompiledJob) -> BTreeMap<String, usize> {
    let p = job.parallelism;
    BTreeMap::from([
        ("source".to_owned(), p.source),
        (
            weir_operators::window_features::WINDOW_OPERATOR.to_owned(),
            p.window,
        ),
        ("score".to_owned(), p.score),
        ("sink".to_owned(), p.sink),
    ])
}
