//! Incremental checkpoints in the store: manifests that list files of earlier epochs, their
//! verification and restore, retention that keeps listed files alive, corruption of a shared
//! or a new file.

mod common;

use std::fs;

use common::{store, G};
use weir_checkpoint::{
    inspect, CheckpointError, Epoch, KeyGroupRange, LocalDirStore, Manifest, SnapshotEntry,
    SnapshotStore,
};

/// Four window shards of `G / 4` key groups each.
fn shard(i: u32) -> KeyGroupRange {
    KeyGroupRange {
        lo: i * G / 4,
        hi: (i + 1) * G / 4,
    }
}

fn payload(epoch: u64, shard: u32) -> Vec<u8> {
    format!("shard {shard} as of epoch {epoch}").into_bytes()
}

/// Commits `epoch`, writing the shards in `changed` and listing `previous`'s files for the
/// others (all four shards on the first epoch).
fn commit(
    store: &LocalDirStore,
    epoch: u64,
    changed: &[u32],
    previous: Option<&Manifest>,
) -> anyhow::Result<Manifest> {
    let mut manifest = Manifest::new(Epoch(epoch), G);
    manifest.parallelism.insert("window".into(), 1);
    for i in 0..4 {
        let entry = match previous {
            Some(previous) if !changed.contains(&i) => previous
                .files
                .iter()
                .find(|f| f.range == shard(i))
                .cloned()
                .map(|f| SnapshotEntry {
                    stored_in: Some(f.file_epoch(previous.epoch)),
                    ..f
                })
                .ok_or_else(|| anyhow::anyhow!("shard {i} missing"))?,
            _ => store.write_snapshot(Epoch(epoch), "window", shard(i), &payload(epoch, i))?,
        };
        manifest.files.push(entry);
    }
    store.commit_manifest(&manifest)?;
    Ok(manifest)
}

/// The payload of every shard as restored from `manifest`.
fn restored(store: &LocalDirStore, manifest: &Manifest) -> anyhow::Result<Vec<Vec<u8>>> {
    manifest
        .files
        .iter()
        .map(|f| {
            let snapshot =
                store.read_snapshot(f.file_epoch(manifest.epoch), &f.operator, f.range)?;
            Ok(snapshot.payload)
        })
        .collect()
}

#[test]
fn an_epoch_lists_unchanged_shards_from_earlier_epochs() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let first = commit(&store, 1, &[], None)?;
    let second = commit(&store, 2, &[1], Some(&first))?;
    let third = commit(&store, 3, &[2], Some(&second))?;
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
    let first = commit(&store, 1, &[], None)?;
    let second = commit(&store, 2, &[1], Some(&first))?;
    let third = commit(&store, 3, &[1, 2], Some(&second))?;
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
    assert_eq!(left, ["window/kg-0-4", "window/kg-12-16"]);
    assert!(matches!(
        store.read_manifest(Epoch(1)),
        Err(CheckpointError::NotCommitted { .. })
    ));
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
    let first = commit(&store, 1, &[], None)?;
    let second = commit(&store, 2, &[1], Some(&first))?;
    commit(&store, 3, &[2], Some(&second))?;
    let flip = |epoch: u64, range: KeyGroupRange| -> anyhow::Result<()> {
        let path = store.snapshot_location(Epoch(epoch), "window", range);
        let mut bytes = fs::read(&path)?;
        let last = bytes.len() - 1;
        bytes[last] ^= 0x5a;
        Ok(fs::write(path, bytes)?)
    };
    flip(3, shard(2))?;
    assert_eq!(store.latest_valid()?.map(|m| m.epoch), Some(Epoch(2)));
    // Epoch 2 wrote shard 1 itself; epochs 2 and 3 share epoch 1's shard 0.
    flip(1, shard(0))?;
    assert_eq!(store.latest_valid()?, None);
    Ok(())
}

#[test]
fn a_manifest_cannot_list_missing_or_later_files() -> anyhow::Result<()> {
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
    fs::remove_file(store.snapshot_location(Epoch(1), "window", shard(3)))?;
    let mut second = first.clone();
    second.epoch = Epoch(2);
    for file in &mut second.files {
        file.stored_in = Some(Epoch(1));
    }
    assert!(matches!(
        store.commit_manifest(&second),
        Err(CheckpointError::SnapshotMissing {
            epoch: Epoch(1),
            ..
        })
    ));
    Ok(())
}
