//! Choosing the checkpoint to restore (`weir run --restore`, issue #4): the newest valid one,
//! a named epoch, or none; a checkpoint written by a job with other features or another key-group
//! count is refused with an explanation; `--restore latest` without a checkpoint is an error; a
//! file job that leaves `[source] range_bytes` unset restores a checkpoint written with an
//! earlier default in that checkpoint's ranges.

use std::path::Path;

use anyhow::{bail, Context, Result};

use weir::checkpointing::{prepare, topology_hash, RestoreChoice};
use weir::config::JobFile;
use weir::plan::SourceInput;
use weir_checkpoint::{LocalDirStore, Manifest, SnapshotStore};
use weir_features::vocab::Epoch;
use weir_operators::file_ranges::{RangeSplit, DEFAULT_SPLIT, EARLIER_DEFAULT_SPLITS};
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_dir_toml, scratch_dir};

/// The clickstream job with checkpoints in `dir`.
fn job(dir: &Path) -> Result<JobFile> {
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.checkpoint = Some(toml::from_str(&checkpoint_dir_toml(dir))?);
    Ok(job)
}

/// Commits an empty checkpoint of `epoch` (no snapshot files) for `job`.
fn commit(dir: &Path, job: &JobFile, epoch: u64, hash: u64) -> Result<()> {
    commit_edited(dir, job, epoch, hash, |_| ())
}

/// [`commit`] of the manifest as `edit` leaves it.
fn commit_edited(
    dir: &Path,
    job: &JobFile,
    epoch: u64,
    hash: u64,
    edit: impl FnOnce(&mut Manifest),
) -> Result<()> {
    let store = LocalDirStore::open(dir)?;
    let mut manifest = Manifest::new(Epoch(epoch), job.runtime.key_groups);
    manifest.topology_hash = hash;
    edit(&mut manifest);
    store.commit_manifest(&manifest)?;
    Ok(())
}

fn error_of(result: Result<impl Sized>) -> String {
    match result {
        Ok(_) => String::new(),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn newest_valid_named_or_none_is_restored() -> Result<()> {
    let dir = scratch_dir("restore-choice");
    let file = job(&dir)?;
    let hash = topology_hash(&file);
    let compiled = file.clone().compile()?;
    assert!(prepare(&mut compiled.clone(), RestoreChoice::Auto)?
        .context("checkpoints are on")?
        .restore
        .is_none());
    let err = error_of(prepare(&mut compiled.clone(), RestoreChoice::Latest));
    assert!(err.contains("no valid checkpoint"), "{err}");
    commit(&dir, &file, 10, hash)?;
    commit(&dir, &file, 20, hash)?;
    let newest = |choice| -> Result<Option<u64>> {
        Ok(prepare(&mut compiled.clone(), choice)?
            .context("checkpoints are on")?
            .restore
            .map(|m| m.epoch.0))
    };
    assert_eq!(newest(RestoreChoice::Auto)?, Some(20));
    assert_eq!(newest(RestoreChoice::Latest)?, Some(20));
    assert_eq!(newest(RestoreChoice::Epoch(10))?, Some(10));
    assert_eq!(newest(RestoreChoice::Fresh)?, None);
    let err = error_of(newest(RestoreChoice::Epoch(15)));
    assert!(err.contains("--restore 15"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn checkpoints_of_another_topology_or_key_group_count_are_refused() -> Result<()> {
    let dir = scratch_dir("restore-refuse");
    let file = job(&dir)?;
    commit(&dir, &file, 10, topology_hash(&file) ^ 1)?;
    let err = error_of(prepare(&mut file.clone().compile()?, RestoreChoice::Auto));
    assert!(err.contains("different features, windows"), "{err}");
    assert!(err.contains("--restore none"), "{err}");

    let mut regrouped = file.clone();
    regrouped.runtime.key_groups = 1024;
    let err = error_of(prepare(&mut regrouped.compile()?, RestoreChoice::Auto));
    assert!(err.contains("4096 key groups"), "{err}");

    // Another input (a replay over files, another topic sharing the directory).
    let dir_other = scratch_dir("restore-other-input");
    let file = job(&dir_other)?;
    commit_edited(&dir_other, &file, 10, topology_hash(&file), |manifest| {
        manifest
            .sources
            .insert("replay.jsonl".to_owned(), Default::default());
    })?;
    let err = error_of(prepare(&mut file.clone().compile()?, RestoreChoice::Auto));
    assert!(
        err.contains("written by a job reading replay.jsonl but this job reads clicks"),
        "{err}"
    );
    assert!(err.contains("--restore none"), "{err}");
    let _ = std::fs::remove_dir_all(&dir_other);

    // The same features in another worker layout are a rescale, not a different job.
    let mut wider = file.clone();
    wider.runtime.workers = 4;
    assert_eq!(topology_hash(&wider), topology_hash(&file));
    let mut changed = file.clone();
    changed.window = toml::from_str("kind = \"tumbling\"\nsize = \"5m\"")?;
    if topology_hash(&changed) == topology_hash(&file) {
        bail!("a different window must change the topology hash");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn checkpoints_of_another_tick_are_refused_even_when_starting_over() -> Result<()> {
    let dir = scratch_dir("restore-tick");
    let file = job(&dir)?;
    commit_edited(
        &dir,
        &file,
        17_000_000_000,
        topology_hash(&file),
        |manifest| {
            manifest.tick_ms = 100;
        },
    )?;
    assert!(prepare(&mut file.clone().compile()?, RestoreChoice::Auto)?.is_some());

    let mut slower = file.clone();
    slower.runtime.tick = 1_000;
    for choice in [RestoreChoice::Auto, RestoreChoice::Fresh] {
        let err = error_of(prepare(&mut slower.clone().compile()?, choice));
        assert!(
            err.contains("taken with [runtime] tick = 100 ms but the job has 1000 ms"),
            "{choice:?}: {err}"
        );
        assert!(err.contains("another checkpoint directory"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn a_file_checkpoint_of_an_earlier_default_range_size_is_restored_in_its_ranges() -> Result<()> {
    for &earlier in EARLIER_DEFAULT_SPLITS {
        restored_in_earlier_default_ranges(earlier)?;
    }
    Ok(())
}

/// A checkpoint written with the earlier default `earlier` by a job file that leaves
/// `range_bytes` unset.
fn restored_in_earlier_default_ranges(earlier: RangeSplit) -> Result<()> {
    let dir = scratch_dir(&format!("restore-earlier-ranges-{}", earlier.range_bytes));
    let mut file = job(&dir)?;
    file.use_input_files(vec![dir.join("events.jsonl")]);
    assert_eq!(
        file.source.range_bytes, None,
        "the clickstream job leaves it unset"
    );
    assert_ne!(earlier, DEFAULT_SPLIT);
    assert_eq!(earlier.whole_up_to, 0, "earlier defaults split every file");
    let mut written = file.clone();
    written.source.range_bytes = Some(earlier.range_bytes);
    let written_hash = topology_hash(&written);
    commit(&dir, &file, 10, written_hash)?;

    // Unset: the run reads in the checkpoint's ranges and checkpoints under their hash.
    let mut run = file.clone().compile()?;
    assert_ne!(run.topology_hash, written_hash);
    let plan = prepare(&mut run, RestoreChoice::Auto)?.context("checkpoints are on")?;
    assert_eq!(plan.restore.map(|m| m.epoch.0), Some(10));
    assert_eq!(plan.topology_hash, written_hash);
    assert_eq!(run.topology_hash, written_hash);
    match &run.source.input {
        SourceInput::Files { split, .. } => assert_eq!(*split, earlier),
        SourceInput::Kafka(_) => bail!("a file job"),
    }
    // A fresh start uses the current default.
    let mut fresh = file.clone().compile()?;
    prepare(&mut fresh, RestoreChoice::Fresh)?;
    match &fresh.source.input {
        SourceInput::Files { split, .. } => assert_eq!(*split, DEFAULT_SPLIT),
        SourceInput::Kafka(_) => bail!("a file job"),
    }

    // Set explicitly to another size: the checkpoint's positions mean other lines, refused.
    let mut explicit = file.clone();
    explicit.source.range_bytes = Some(DEFAULT_SPLIT.range_bytes);
    let err = error_of(prepare(&mut explicit.compile()?, RestoreChoice::Auto));
    assert!(err.contains("different features, windows"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
