//! Incremental checkpoints in the store: each epoch writes its changed shards as one bundle
//! file and lists the sections of earlier bundles for the others; verification and restore of
//! such manifests, retention that keeps listed files alive, corruption of a shared or a new
//! file, sections that do not fit their file.

mod common;

use std::fs;

use common::incremental::{commit, payload, restored, three_epochs, whole};
use common::store;
use weir_checkpoint::{inspect, CheckpointError, Epoch, EpochStatus, SnapshotStore};

#[test]
fn an_epoch_lists_unchanged_shards_from_earlier_epochs() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let [_, second, third] = three_epochs(&store, &[1], &[2])?;
    assert_eq!(second.written_here().count(), 1);
    assert_eq!(
        store.stored_files(Epoch(3))?.len(),
        2,
        "MANIFEST + one shard"
    );
    let latest = store
        .latest_valid()?
        .ok_or_else(|| anyhow::anyhow!("none"))?;
    assert_eq!(latest, third);
    assert_eq!(
        restored(&store, &latest)?,
        [payload(1, 0), payload(2, 1), payload(3, 2), payload(1, 3)]
    );
    let detail = inspect(&store)?
        .iter()
        .map(ToString::to_string)
        .collect::<String>();
    assert!(detail.contains("kept from epoch 1"), "{detail}");
    assert!(detail.contains("written by this epoch: 1"), "{detail}");
    Ok(())
}

#[test]
fn retention_keeps_files_that_kept_epochs_list() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let [_, _, third] = three_epochs(&store, &[1], &[1, 2])?;
    let pruned = store.prune(1)?;
    assert_eq!(pruned.kept, [Epoch(3)]);
    assert_eq!(
        pruned.deleted,
        [Epoch(2)],
        "epoch 2's only file was rewritten by 3"
    );
    assert_eq!(pruned.retired, [Epoch(1)]);
    let left: Vec<String> = store
        .stored_files(Epoch(1))?
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(left, ["window/kg-0-16"], "the bundle with shards 0 and 3");
    assert!(matches!(
        store.read_manifest(Epoch(1)),
        Err(CheckpointError::NotCommitted { .. })
    ));
    let statuses: Vec<EpochStatus> = inspect(&store)?.into_iter().map(|s| s.status).collect();
    assert_eq!(statuses, [EpochStatus::Retired, EpochStatus::Valid]);
    assert_eq!(store.latest_valid()?, Some(third.clone()));
    assert_eq!(
        restored(&store, &third)?,
        [payload(1, 0), payload(3, 1), payload(3, 2), payload(1, 3)]
    );
    // Pruning again changes nothing; a full epoch frees the retired directory.
    assert_eq!(store.prune(1)?.retired, [Epoch(1)]);
    commit(&store, 4, &[0, 1, 2, 3], Some(&third))?;
    let pruned = store.prune(1)?;
    assert_eq!(pruned.deleted, [Epoch(1), Epoch(3)]);
    assert_eq!(store.list_epochs()?, [Epoch(4)]);
    Ok(())
}

#[test]
fn corruption_of_a_new_file_falls_back_and_of_a_shared_file_falls_further() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    three_epochs(&store, &[1], &[2])?;
    let flip = |epoch: u64| -> anyhow::Result<()> {
        let path = store.snapshot_location(Epoch(epoch), "window", whole());
        let mut bytes = fs::read(&path)?;
        let last = bytes.len() - 1;
        bytes[last] ^= 0x5a;
        Ok(fs::write(path, bytes)?)
    };
    flip(3)?;
    assert_eq!(store.latest_valid()?.map(|m| m.epoch), Some(Epoch(2)));
    // Epoch 2 wrote shard 1 itself; epochs 2 and 3 share epoch 1's bundle for shard 0.
    flip(1)?;
    assert_eq!(store.latest_valid()?, None);
    Ok(())
}

#[test]
fn a_manifest_cannot_list_missing_later_or_misplaced_sections() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let first = commit(&store, 1, &[], None)?;
    let mut later = first.clone();
    later.epoch = Epoch(2);
    if let Some(file) = later.files.first_mut() {
        file.stored_in = Some(Epoch(7));
    }
    assert!(matches!(
        store.commit_manifest(&later),
        Err(CheckpointError::InvalidManifest { .. })
    ));
    // A section pointing past the end of its bundle.
    let mut misplaced = first.clone();
    if let Some(section) = misplaced.files.last_mut().and_then(|f| f.section.as_mut()) {
        section.offset += 1_000;
    }
    let err = store
        .for_each_snapshot(Epoch(1), &mut misplaced.files.iter(), &mut |_, _| Ok(()))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("outside"), "{err}");
    fs::remove_file(store.snapshot_location(Epoch(1), "window", whole()))?;
    let mut second = first.clone();
    second.epoch = Epoch(2);
    assert!(matches!(
        store.commit_manifest(&second),
        Err(CheckpointError::SnapshotMissing {
            epoch: Epoch(1),
            ..
        })
    ));
    Ok(())
}
