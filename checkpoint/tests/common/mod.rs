//! Shared helpers of the checkpoint tests: a store in a scratch dir, a 2-operator epoch and a
//! store holding two of them; the incremental epochs of [`incremental`]. The epoch writers
//! take any [`SnapshotStore`], so the object-store tests reuse them.

#![allow(dead_code)]

pub mod incremental;

use std::collections::BTreeMap;

use weir_checkpoint::{
    Epoch, KeyGroupRange, LocalDirStore, Manifest, SnapshotStore, SourceOffset, Watermark,
};
use weir_testkit::files::Scratch;

/// Key groups of the test job.
pub const G: u32 = 16;

/// A fresh store in a scratch dir (the dir lives as long as the returned guard).
pub fn store() -> anyhow::Result<(Scratch, LocalDirStore)> {
    let dir = Scratch::new("checkpoint-store");
    let store = LocalDirStore::open(dir.path().join("ckpt"))?;
    Ok((dir, store))
}

/// A fresh store with epochs 1 and 2 committed, and epoch 1's manifest: what a restore falls
/// back to once a test has damaged epoch 2.
pub fn two_epochs() -> anyhow::Result<(Scratch, LocalDirStore, Manifest)> {
    let (dir, store) = store()?;
    let older = write_epoch(&store, 1)?;
    write_epoch(&store, 2)?;
    Ok((dir, store, older))
}

/// The payload instance `i` of `operator` writes at `epoch` (distinct per file and epoch).
pub fn payload(epoch: u64, operator: &str, i: usize) -> Vec<u8> {
    format!("state of {operator}[{i}] at epoch {epoch}; ")
        .repeat(3 + i)
        .into_bytes()
}

/// Writes and commits `epoch`: operator `window` at parallelism 2, `score` at 1.
pub fn write_epoch(store: &dyn SnapshotStore, epoch: u64) -> anyhow::Result<Manifest> {
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
