//! Shared helpers of the checkpoint tests: a store in a temp dir and a 2-operator epoch.

#![allow(dead_code)]

use std::collections::BTreeMap;

use weir_checkpoint::{
    Epoch, KeyGroupRange, LocalDirStore, Manifest, SnapshotStore, SourceOffset, Watermark,
};

/// Key groups of the test job.
pub const G: u32 = 16;

/// A fresh store in a temp dir (the dir lives as long as the returned guard).
pub fn store() -> anyhow::Result<(tempfile::TempDir, LocalDirStore)> {
    let dir = tempfile::tempdir()?;
    let store = LocalDirStore::open(dir.path().join("ckpt"))?;
    Ok((dir, store))
}

/// The payload instance `i` of `operator` writes at `epoch` (distinct per file and epoch).
pub fn payload(epoch: u64, operator: &str, i: usize) -> Vec<u8> {
    format!("state of {operator}[{i}] at epoch {epoch}; ")
        .repeat(3 + i)
        .into_bytes()
}

/// Writes and commits `epoch`: operator `window` at parallelism 2, `score` at 1.
pub fn write_epoch(store: &LocalDirStore, epoch: u64) -> anyhow::Result<Manifest> {
    let mut manifest = Manifest::new(Epoch(epoch), G);
    for (operator, p) in [("window", 2usize), ("score", 1)] {
        manifest.parallelism.insert(operator.into(), p);
        for i in 0..p {
            let range = KeyGroupRange::of_instance(i, p, G);
            let entry = store.write_snapshot(
                Epoch(epoch),
                operator,
                range,
                &payload(epoch, operator, i),
            )?;
            manifest.files.push(entry);
        }
    }
    manifest.parallelism.insert("sink".into(), 2);
    let partitions = BTreeMap::from([
        (
            0,
            SourceOffset {
                next_offset: 100 * epoch as i64,
                watermark: Watermark(1_000 * epoch as i64),
            },
        ),
        (
            1,
            SourceOffset {
                next_offset: 7,
                watermark: Watermark::MIN,
            },
        ),
    ]);
    manifest.sources.insert("events".into(), partitions);
    manifest.model_versions.insert("fraud".into(), "v3".into());
    manifest.topology_hash = 0xfeed_beef;
    store.commit_manifest(&manifest)?;
    Ok(manifest)
}
