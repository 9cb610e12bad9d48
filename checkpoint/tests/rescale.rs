//! Rescale: which stored key-group files an instance reads when the parallelism changes.

mod common;

use proptest::prelude::*;
use weir_checkpoint::range::overlapping;
use weir_checkpoint::{CheckpointError, Epoch, KeyGroupRange, Manifest, SnapshotEntry};

fn stored(old_p: usize, g: u32) -> Vec<SnapshotEntry> {
    (0..old_p)
        .map(|i| SnapshotEntry {
            operator: "window".into(),
            range: KeyGroupRange::of_instance(i, old_p, g),
            size: 0,
            xxh3: 0,
            stored_in: None,
            section: None,
        })
        .filter(|e| !e.range.is_empty())
        .collect()
}

proptest! {
    #[test]
    fn every_new_key_group_is_covered_exactly_once(
        g in 1u32..300,
        old_p in 1usize..40,
        new_p in 1usize..40,
    ) {
        let files = stored(old_p, g);
        let mut owners = vec![0u32; g as usize];
        for instance in 0..new_p {
            let mine = KeyGroupRange::of_instance(instance, new_p, g);
            let mut covered = vec![0u32; g as usize];
            for (entry, part) in overlapping(&files, "window", instance, new_p, g) {
                prop_assert_eq!(entry.range.intersect(&mine), Some(part));
                for kg in part.lo..part.hi {
                    covered[kg as usize] += 1;
                }
            }
            for kg in 0..g {
                // Same rule as the router: instance = kg * p / G.
                let routed = (u64::from(kg) * new_p as u64 / u64::from(g)) as usize;
                prop_assert_eq!(mine.contains(kg), routed == instance);
                prop_assert_eq!(covered[kg as usize], u32::from(mine.contains(kg)));
                owners[kg as usize] += covered[kg as usize];
            }
        }
        prop_assert!(owners.iter().all(|&n| n == 1));
    }
}

#[test]
fn same_parallelism_reads_own_file_only() {
    let files = stored(4, 4096);
    for i in 0..4 {
        let hits = overlapping(&files, "window", i, 4, 4096);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0.range, KeyGroupRange::of_instance(i, 4, 4096));
        assert_eq!(hits[0].1, hits[0].0.range);
    }
    assert!(overlapping(&files, "score", 0, 4, 4096).is_empty());
}

#[test]
fn changed_key_group_count_is_refused() -> anyhow::Result<()> {
    let mut manifest = Manifest::new(Epoch(1), 4096);
    manifest.files = stored(2, 4096);
    let err = manifest.files_for_instance("window", 0, 3, 1024).err();
    assert!(matches!(
        err,
        Some(CheckpointError::KeyGroupsChanged { stored: 4096, .. })
    ));
    assert_eq!(manifest.files_for_instance("window", 0, 3, 4096)?.len(), 1);
    assert_eq!(manifest.files_for_instance("window", 1, 3, 4096)?.len(), 2);
    Ok(())
}
