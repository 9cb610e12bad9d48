//! Incremental epochs for the store tests: four window shards, each epoch rewriting some of
//! them as one bundle and listing the earlier bundles' sections for the others.

use std::collections::BTreeMap;

use weir_checkpoint::{Epoch, KeyGroupRange, Manifest, SnapshotStore};

use super::G;

/// Four window shards of `G / 4` key groups each.
pub fn shard(i: u32) -> KeyGroupRange {
    KeyGroupRange {
        lo: i * G / 4,
        hi: (i + 1) * G / 4,
    }
}

pub fn payload(epoch: u64, shard: u32) -> Vec<u8> {
    format!("shard {shard} as of epoch {epoch}").into_bytes()
}

/// Commits `epoch`, writing the shards in `changed` as one bundle and listing `previous`'s
/// entries for the others (all four shards on the first epoch).
pub fn commit(
    store: &dyn SnapshotStore,
    epoch: u64,
    changed: &[u32],
    previous: Option<&Manifest>,
) -> anyhow::Result<Manifest> {
    let mut manifest = Manifest::new(Epoch(epoch), G);
    manifest.parallelism.insert("window".into(), 1);
    let rewrite: Vec<u32> = match previous {
        Some(_) => changed.to_vec(),
        None => (0..4).collect(),
    };
    let payloads: Vec<Vec<u8>> = rewrite.iter().map(|&i| payload(epoch, i)).collect();
    let sections: Vec<(KeyGroupRange, &[u8])> = rewrite
        .iter()
        .zip(&payloads)
        .map(|(&i, p)| (shard(i), p.as_slice()))
        .collect();
    let mut written = store.write_bundle(Epoch(epoch), "window", whole(), &sections)?;
    for i in (0..4).filter(|i| !rewrite.contains(i)) {
        let kept = previous
            .and_then(|p| p.files.iter().find(|f| f.range == shard(i)))
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("shard {i} missing"))?;
        written.push(kept);
    }
    written.sort_by_key(|f| f.range);
    manifest.files = written;
    store.commit_manifest(&manifest)?;
    Ok(manifest)
}

/// Epoch 1 with every shard, epoch 2 rewriting the shards `second` and epoch 3 the shards
/// `third`; their manifests.
pub fn three_epochs(
    store: &dyn SnapshotStore,
    second: &[u32],
    third: &[u32],
) -> anyhow::Result<[Manifest; 3]> {
    let first = commit(store, 1, &[], None)?;
    let second = commit(store, 2, second, Some(&first))?;
    let third = commit(store, 3, third, Some(&second))?;
    Ok([first, second, third])
}

pub fn whole() -> KeyGroupRange {
    KeyGroupRange { lo: 0, hi: G }
}

/// The payload of every shard as restored from `manifest`.
pub fn restored(store: &dyn SnapshotStore, manifest: &Manifest) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut out = BTreeMap::new();
    store.for_each_snapshot(
        manifest.epoch,
        &mut manifest.files.iter(),
        &mut |entry, bytes| {
            out.insert(entry.range, bytes.to_vec());
            Ok(())
        },
    )?;
    Ok(out.into_values().collect())
}
