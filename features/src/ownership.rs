//! Ownership (DESIGN.md §4–5): which instance of a stage owns a key group, which key groups an
//! instance owns, and which source instance reads a partition. Every keyed exchange route
//! (`weir_operators::placement`), every checkpoint range (`weir_checkpoint::KeyGroupRange`)
//! and every source's partition assignment derives from these three functions, so routing,
//! snapshots, restores and rescales cannot drift apart.
//!
//! Pipeline position: a pure leaf below `operators` and `checkpoint`, next to [`KeyGroup`].
//!
//! The key-group rule: instance `i` of `p` owns the key groups `kg` with `kg * p / G == i`
//! (integer division). Since `kg * p / G >= i` exactly when `kg >= ceil(i * G / p)`, that is
//! the contiguous range `[ceil(i*G/p), ceil((i+1)*G/p))`: [`key_groups_of_instance`] is the
//! preimage of [`instance_for_key_group`], so one snapshot file is always one instance's state.

use std::ops::Range;

use crate::vocab::KeyGroup;

/// The instance of a keyed stage with parallelism `parallelism` that owns `key_group` among
/// `key_groups` groups: `kg * p / G`.
pub fn instance_for_key_group(key_group: KeyGroup, key_groups: u32, parallelism: usize) -> usize {
    ((u64::from(key_group.0) * parallelism as u64) / u64::from(key_groups.max(1))) as usize
}

/// The key groups instance `instance` of `parallelism` owns among `key_groups` groups:
/// `[ceil(i*G/p), ceil((i+1)*G/p))`, exactly those [`instance_for_key_group`] sends to it.
/// Empty when `parallelism > key_groups` leaves the instance nothing (or `instance >= p`).
pub fn key_groups_of_instance(instance: usize, parallelism: usize, key_groups: u32) -> Range<u32> {
    let p = parallelism.max(1) as u64;
    let g = u64::from(key_groups);
    let first = |i: u64| (i * g).div_ceil(p).min(g) as u32;
    first(instance as u64)..first(instance as u64 + 1)
}

/// The source instance (of `parallelism`) that reads partition `partition`: `p % parallelism`.
pub fn instance_for_partition(partition: i32, parallelism: usize) -> usize {
    partition.unsigned_abs() as usize % parallelism.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_group_lies_in_the_range_of_its_instance() {
        for (g, p) in [(4096, 3), (7, 7), (5, 8), (1, 1), (4096, 1)] {
            for kg in 0..g {
                let owner = instance_for_key_group(KeyGroup(kg), g, p);
                assert!(owner < p, "G={g} p={p} kg={kg}");
                for i in 0..p {
                    let mine = key_groups_of_instance(i, p, g);
                    assert_eq!(mine.contains(&kg), i == owner, "G={g} p={p} kg={kg} i={i}");
                }
            }
        }
        assert_eq!(key_groups_of_instance(0, 3, 4096), 0..1366);
        assert_eq!(key_groups_of_instance(2, 3, 4096), 2731..4096);
        // 8 instances, 5 key groups: instances 2, 5 and 7 own nothing.
        let lens: Vec<usize> = (0..8)
            .map(|i| key_groups_of_instance(i, 8, 5).len())
            .collect();
        assert_eq!(lens, vec![1, 1, 0, 1, 1, 0, 1, 0]);
        assert!(key_groups_of_instance(8, 8, 5).is_empty());
    }

    #[test]
    fn partitions_go_round_robin_over_the_source_instances() {
        let owners: Vec<usize> = (0..6).map(|p| instance_for_partition(p, 4)).collect();
        assert_eq!(owners, vec![0, 1, 2, 3, 0, 1]);
        assert_eq!(instance_for_partition(5, 1), 0);
    }
}
