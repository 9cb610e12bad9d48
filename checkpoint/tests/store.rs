//! The local store end to end: round trip (finished source partitions included), corruption,
//! truncation, missing files, crash before the commit point, retention and inspection.

mod common;

use std::fs;
use std::path::Path;

use common::{payload, store, two_epochs, write_epoch, G};
use weir_checkpoint::{
    inspect, CheckpointError, Epoch, EpochStatus, KeyGroupRange, Manifest, SnapshotStore,
    SourcePositions,
};

fn window0(store: &weir_checkpoint::LocalDirStore, epoch: u64) -> std::path::PathBuf {
    store.snapshot_location(Epoch(epoch), "window", KeyGroupRange::of_instance(0, 2, G))
}

#[test]
fn round_trip() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let written = write_epoch(&store, 5)?;
    let read = store.read_manifest(Epoch(5))?;
    assert_eq!(read, written);
    assert_eq!(store.latest_valid()?, Some(written.clone()));
    for (i, range) in [
        (0, KeyGroupRange { lo: 0, hi: 8 }),
        (1, KeyGroupRange { lo: 8, hi: 16 }),
    ] {
        let snapshot = store.read_snapshot(Epoch(5), "window", range)?;
        assert_eq!(snapshot.payload, payload(5, "window", i));
    }
    assert!(store.root().join("5/window/kg-0-8").is_file());
    assert!(store.root().join("5/score/kg-0-16").is_file());
    assert!(store.root().join("5/MANIFEST").is_file());
    // No temp files left behind.
    let names: Vec<String> = store
        .stored_files(Epoch(5))?
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(
        names,
        [
            "MANIFEST",
            "score/kg-0-16",
            "window/kg-0-8",
            "window/kg-8-16"
        ]
    );
    Ok(())
}

/// The manifest's `"format_version"`.
fn format_version(store: &weir_checkpoint::LocalDirStore, epoch: u64) -> anyhow::Result<u64> {
    let text = fs::read_to_string(store.manifest_path(Epoch(epoch)))?;
    let envelope: serde_json::Value = serde_json::from_str(&text)?;
    Ok(envelope["format_version"].as_u64().unwrap_or(0))
}

#[test]
fn finished_partitions_round_trip_as_spans_in_a_version_3_manifest() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let without = write_epoch(&store, 5)?;
    assert_eq!(
        format_version(&store, 5)?,
        2,
        "nothing finished: still version 2"
    );
    let mut manifest = without.clone();
    manifest.epoch = Epoch(6);
    let mut positions = manifest.positions_of("events");
    for partition in (2..10_000).chain([10_001]) {
        positions.finish(partition);
    }
    manifest.set_positions(&[("events".to_owned(), positions.clone())].into());
    for entry in &mut manifest.files {
        entry.stored_in = Some(Epoch(5));
    }
    store.commit_manifest(&manifest)?;
    assert_eq!(format_version(&store, 6)?, 3);
    let text = fs::read_to_string(store.manifest_path(Epoch(6)))?;
    assert!(text.contains(r#""finished":{"events":[[2,10000],[10001,10002]]}"#));
    assert!(text.len() < 2_000, "{} bytes", text.len());
    let read = store.read_manifest(Epoch(6))?;
    assert_eq!(read, manifest);
    assert_eq!(read.positions_of("events"), positions);
    assert_eq!(
        read.positions(),
        [("events".to_owned(), positions.clone())].into()
    );
    assert_eq!(read.positions_of("other"), SourcePositions::default());
    assert_eq!(read.source_names().collect::<Vec<_>>(), ["events"]);
    // An empty span (hand-edited, with its checksum recomputed) is an error, not a panic.
    let body = serde_json::to_string(&manifest)?.replace("[2,10000]", "[5,5]");
    let envelope = format!(
        r#"{{"format_version":3,"body_xxh3":"{:016x}","body":{body}}}"#,
        xxhash_rust::xxh3::xxh3_64(body.as_bytes())
    );
    let err = weir_checkpoint::manifest::decode(Path::new("MANIFEST"), envelope.as_bytes()).err();
    assert!(
        err.as_ref()
            .is_some_and(|e| e.to_string().contains("[5, 5] is empty or reversed")),
        "{err:?}"
    );
    // A partition cannot both resume at a position and be finished.
    let mut both = manifest.clone();
    both.epoch = Epoch(7);
    let mut finished_too = both.positions_of("events").finished;
    finished_too.insert(0..1);
    both.finished.insert("events".into(), finished_too);
    let err = store.commit_manifest(&both).err();
    assert!(
        matches!(&err, Some(CheckpointError::InvalidManifest { detail, .. }) if detail.contains("partition 0")),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn empty_store_has_nothing_to_restore() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    assert_eq!(store.latest_valid()?, None);
    assert!(store.list_epochs()?.is_empty());
    Ok(())
}

#[test]
fn corrupt_byte_falls_back_to_previous_epoch() -> anyhow::Result<()> {
    let (_dir, store, older) = two_epochs()?;
    let path = window0(&store, 2);
    let mut bytes = fs::read(&path)?;
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    fs::write(&path, bytes)?;
    let err = store.verify_epoch(Epoch(2)).err();
    assert!(
        matches!(&err, Some(CheckpointError::ChecksumMismatch { path: p, .. }) if *p == path),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, Some(older));
    Ok(())
}

#[test]
fn truncated_file_falls_back() -> anyhow::Result<()> {
    let (_dir, store, older) = two_epochs()?;
    let path = window0(&store, 2);
    let bytes = fs::read(&path)?;
    fs::write(&path, &bytes[..bytes.len() / 2])?;
    let err = store.verify_epoch(Epoch(2)).err();
    assert!(
        matches!(err, Some(CheckpointError::Truncated { .. })),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, Some(older));
    Ok(())
}

#[test]
fn missing_file_falls_back() -> anyhow::Result<()> {
    let (_dir, store, older) = two_epochs()?;
    fs::remove_file(window0(&store, 2))?;
    let err = store.verify_epoch(Epoch(2)).err();
    assert!(
        matches!(err, Some(CheckpointError::SnapshotMissing { .. })),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, Some(older));
    Ok(())
}

#[test]
fn corrupt_manifest_falls_back() -> anyhow::Result<()> {
    let (_dir, store, older) = two_epochs()?;
    let path = store.manifest_path(Epoch(2));
    let text = fs::read_to_string(&path)?.replace("\"v3\"", "\"v4\"");
    fs::write(&path, text)?;
    let err = store.read_manifest(Epoch(2)).err();
    assert!(
        matches!(err, Some(CheckpointError::ChecksumMismatch { .. })),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, Some(older));
    Ok(())
}

#[test]
fn files_without_manifest_are_ignored() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let older = write_epoch(&store, 1)?;
    // Crash before the commit point: epoch 2's snapshots are durable, its MANIFEST is not.
    store.write_snapshot(Epoch(2), "window", KeyGroupRange::new(0, 8)?, b"half")?;
    let err = store.verify_epoch(Epoch(2)).err();
    assert!(
        matches!(err, Some(CheckpointError::NotCommitted { .. })),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, Some(older));
    Ok(())
}

#[test]
fn commit_refuses_missing_files_and_bad_coverage() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let mut manifest = Manifest::new(Epoch(3), G);
    manifest.parallelism.insert("window".into(), 2);
    let first = store.write_snapshot(Epoch(3), "window", KeyGroupRange::new(0, 8)?, b"a")?;
    manifest.files.push(first.clone());
    // Key groups 8..16 not covered.
    let err = store.commit_manifest(&manifest).err();
    assert!(
        matches!(err, Some(CheckpointError::InvalidManifest { .. })),
        "{err:?}"
    );
    // Covered, but the second file was never written.
    let mut second = first.clone();
    second.range = KeyGroupRange::new(8, 16)?;
    manifest.files.push(second);
    let err = store.commit_manifest(&manifest).err();
    assert!(
        matches!(err, Some(CheckpointError::SnapshotMissing { .. })),
        "{err:?}"
    );
    assert!(!store.manifest_path(Epoch(3)).exists());
    Ok(())
}

#[test]
fn unknown_snapshot_version_is_refused() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    write_epoch(&store, 1)?;
    let path = window0(&store, 1);
    let mut bytes = fs::read(&path)?;
    bytes[8] = 9;
    fs::write(&path, bytes)?;
    let err = store.verify_epoch(Epoch(1)).err();
    assert!(
        matches!(
            err,
            Some(CheckpointError::UnsupportedVersion { version: 9, .. })
        ),
        "{err:?}"
    );
    assert_eq!(store.latest_valid()?, None);
    Ok(())
}

#[test]
fn retention_keeps_last_n_committed() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    for epoch in 1..=5 {
        write_epoch(&store, epoch)?;
    }
    // Uncommitted leftovers: one older than the newest commit, one newer (in progress).
    store.write_snapshot(Epoch(4), "extra", KeyGroupRange::new(0, 1)?, b"x")?;
    fs::remove_file(store.manifest_path(Epoch(4)))?;
    store.write_snapshot(Epoch(6), "window", KeyGroupRange::new(0, 8)?, b"x")?;
    let pruned = store.prune(2)?;
    assert_eq!(pruned.kept, [Epoch(3), Epoch(5)]);
    assert_eq!(pruned.deleted, [Epoch(1), Epoch(2), Epoch(4)]);
    assert_eq!(store.list_epochs()?, [Epoch(3), Epoch(5), Epoch(6)]);
    assert_eq!(store.latest_valid()?.map(|m| m.epoch), Some(Epoch(5)));
    // keep_last = 0 still keeps the newest commit.
    assert_eq!(store.prune(0)?.kept, [Epoch(5)]);
    assert_eq!(store.list_epochs()?, [Epoch(5), Epoch(6)]);
    Ok(())
}

#[test]
fn inspect_reports_each_epoch() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    write_epoch(&store, 1)?;
    write_epoch(&store, 2)?;
    store.write_snapshot(Epoch(3), "window", KeyGroupRange::new(0, 8)?, b"x")?;
    fs::remove_file(window0(&store, 2))?;
    let summaries = inspect(&store)?;
    let statuses: Vec<_> = summaries
        .iter()
        .map(|s| (s.epoch, s.status.clone()))
        .collect();
    assert_eq!(statuses[0], (Epoch(1), EpochStatus::Valid));
    assert!(matches!(&statuses[1], (Epoch(2), EpochStatus::Invalid(r)) if r.contains("missing")));
    assert_eq!(statuses[2], (Epoch(3), EpochStatus::Uncommitted));
    assert_eq!(summaries[0].files, 4);
    let detail = summaries[0].to_string();
    for needle in [
        "epoch 1: valid",
        "window=2",
        "fraud@v3",
        "partition 0: next offset 100",
    ] {
        assert!(detail.contains(needle), "{needle:?} not in:\n{detail}");
    }
    assert!(summaries[1].line().contains("INVALID"));
    Ok(())
}

#[test]
fn interrupted_manifest_write_leaves_epoch_uncommitted() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let older = write_epoch(&store, 1)?;
    let newer = write_epoch(&store, 2)?;
    // Crash between writing the manifest's temp file and its rename.
    let manifest = fs::read(store.manifest_path(Epoch(2)))?;
    fs::remove_file(store.manifest_path(Epoch(2)))?;
    fs::write(
        store.epoch_dir(Epoch(2)).join(".MANIFEST.tmp-1-0"),
        manifest,
    )?;
    assert_eq!(store.latest_valid()?, Some(older));
    // A retried commit of the same epoch succeeds.
    store.commit_manifest(&newer)?;
    assert_eq!(store.latest_valid()?, Some(newer));
    Ok(())
}

#[test]
fn concurrent_writers_of_one_epoch() -> anyhow::Result<()> {
    let (_dir, store) = store()?;
    let p = 8;
    let entries = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p)
            .map(|i| {
                let store = &store;
                scope.spawn(move || {
                    let range = KeyGroupRange::of_instance(i, p, G);
                    store.write_snapshot(Epoch(9), "window", range, &payload(9, "window", i))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("writer panicked"))?
                    .map_err(Into::into)
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut manifest = Manifest::new(Epoch(9), G);
    manifest.parallelism.insert("window".into(), p);
    manifest.files = entries;
    store.commit_manifest(&manifest)?;
    assert_eq!(store.latest_valid()?.map(|m| m.files.len()), Some(p));
    Ok(())
}
