//! One placement rule (DESIGN.md §4–5): the exchange route sends each key group to the instance
//! whose checkpoint range holds it, the instances' ranges partition `0..G` contiguously, and
//! after a rescale (new worker layout and parallelism) every new instance reads exactly its own
//! range from the files the old instances wrote. Partitions route like the sources read them.

use proptest::prelude::*;
use weir_checkpoint::range::overlapping;
use weir_checkpoint::{KeyGroupRange, SnapshotEntry};
use weir_features::vocab::KeyGroup;
use weir_operators::placement::{
    instance_for_key_group, instance_for_partition, KeyGroupRoutes, Placement,
};

/// A worker layout (processes × threads) and a stage parallelism `1..=workers`.
fn layout() -> impl Strategy<Value = (Placement, usize)> {
    (1usize..4, 1usize..6).prop_flat_map(|(processes, threads)| {
        let workers = processes * threads;
        (Just(Placement::new(workers, processes)), 1usize..=workers)
    })
}

/// The files the `p` instances of the window stage write: one per instance that owns any.
fn stored(p: usize, g: u32) -> Vec<SnapshotEntry> {
    (0..p)
        .map(|i| SnapshotEntry {
            operator: "window".into(),
            range: KeyGroupRange::of_instance(i, p, g),
            size: 0,
            xxh3: 0,
            stored_in: None,
            section: None,
        })
        .filter(|e| !e.range.is_empty())
        .collect()
}

/// Routing and ranges of one layout agree, and the ranges tile `0..g`.
fn check_layout(placement: Placement, p: usize, g: u32) -> Result<(), TestCaseError> {
    let ranges: Vec<KeyGroupRange> = (0..p)
        .map(|i| KeyGroupRange::of_instance(i, p, g))
        .collect();
    prop_assert_eq!(ranges[0].lo, 0);
    prop_assert_eq!(ranges[p - 1].hi, g);
    for pair in ranges.windows(2) {
        prop_assert_eq!(
            pair[0].hi,
            pair[1].lo,
            "ranges {:?} are not contiguous",
            ranges
        );
    }
    let routes = KeyGroupRoutes::new(placement, g, p);
    for kg in 0..g {
        let owners: Vec<usize> = (0..p).filter(|&i| ranges[i].contains(kg)).collect();
        prop_assert_eq!(owners.len(), 1, "key group {} has owners {:?}", kg, owners);
        let owner = instance_for_key_group(KeyGroup(kg), g, p);
        prop_assert_eq!(owners[0], owner);
        let worker = placement.key_group_route(KeyGroup(kg), g, p) as usize;
        prop_assert!(worker < placement.workers());
        prop_assert_eq!(routes.route(KeyGroup(kg)), worker as u64, "looked up");
        prop_assert_eq!(placement.instance_on(worker, p), Some(owner));
    }
    for partition in 0..64 {
        let worker = placement.partition_route(partition, p) as usize;
        let instance = instance_for_partition(partition, p);
        prop_assert!(instance < p);
        prop_assert_eq!(placement.instance_on(worker, p), Some(instance));
    }
    Ok(())
}

proptest! {
    #[test]
    fn placement_restore_ranges_and_rescale_agree(
        g in 1u32..600,
        (old_placement, old_p) in layout(),
        (new_placement, new_p) in layout(),
    ) {
        check_layout(old_placement, old_p, g)?;
        check_layout(new_placement, new_p, g)?;
        let files = stored(old_p, g);
        for instance in 0..new_p {
            let mine = KeyGroupRange::of_instance(instance, new_p, g);
            let hits = overlapping(&files, "window", instance, new_p, g);
            // The files it reads are those of the old owners of its key groups, in order...
            let mut read_from: Vec<usize> = (mine.lo..mine.hi)
                .map(|kg| instance_for_key_group(KeyGroup(kg), g, old_p))
                .collect();
            read_from.dedup();
            let read: Vec<KeyGroupRange> = hits.iter().map(|(entry, _)| entry.range).collect();
            let owned: Vec<KeyGroupRange> = read_from
                .iter()
                .map(|&old| KeyGroupRange::of_instance(old, old_p, g))
                .collect();
            prop_assert_eq!(read, owned);
            // ...and the parts it keeps cover its range exactly: no gap, no overlap.
            let mut next = mine.lo;
            for (entry, part) in &hits {
                prop_assert_eq!(entry.range.intersect(&mine), Some(*part));
                prop_assert_eq!(part.lo, next);
                next = part.hi;
            }
            prop_assert_eq!(next, mine.hi);
        }
    }
}
