//! Key-group ranges: what one snapshot file holds, what one operator instance owns, and which
//! stored files an instance must read after a rescale.
//!
//! Instance `i` of `p` owns the key groups `kg` with `kg * p / G == i` (integer division), i.e.
//! `[ceil(i*G/p), ceil((i+1)*G/p))` — the same rule as `weir_operators::placement::
//! instance_for_key_group`, so a snapshot is always exactly one instance's state.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{CheckpointError, Result};
use crate::manifest::SnapshotEntry;

/// A half-open range of key groups `lo..hi` (`kg-<lo>-<hi>` on disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeyGroupRange {
    /// First key group (inclusive).
    pub lo: u32,
    /// End (exclusive).
    pub hi: u32,
}

impl KeyGroupRange {
    /// The range `lo..hi`; fails when it is empty or reversed.
    pub fn new(lo: u32, hi: u32) -> Result<Self> {
        if lo >= hi {
            return Err(CheckpointError::InvalidRange {
                lo,
                hi,
                reason: "a snapshot range must hold at least one key group (lo < hi)",
            });
        }
        Ok(KeyGroupRange { lo, hi })
    }

    /// The range owned by instance `instance` of `parallelism` among `key_groups` groups.
    /// Empty (`lo == hi`) when `parallelism > key_groups` leaves the instance nothing.
    pub fn of_instance(instance: usize, parallelism: usize, key_groups: u32) -> Self {
        let p = parallelism.max(1) as u64;
        let g = u64::from(key_groups);
        let bound = |i: u64| ((i * g).div_ceil(p)).min(g) as u32;
        KeyGroupRange {
            lo: bound(instance as u64),
            hi: bound(instance as u64 + 1),
        }
    }

    /// Number of key groups in the range.
    pub fn len(&self) -> u32 {
        self.hi.saturating_sub(self.lo)
    }

    /// True when the range holds no key group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when `key_group` is in the range.
    pub fn contains(&self, key_group: u32) -> bool {
        self.lo <= key_group && key_group < self.hi
    }

    /// The key groups in both ranges, if any.
    pub fn intersect(&self, other: &KeyGroupRange) -> Option<KeyGroupRange> {
        let lo = self.lo.max(other.lo);
        let hi = self.hi.min(other.hi);
        (lo < hi).then_some(KeyGroupRange { lo, hi })
    }

    /// The file name of a snapshot of this range: `kg-<lo>-<hi>`.
    pub fn file_name(&self) -> String {
        format!("kg-{}-{}", self.lo, self.hi)
    }

    /// Parses a `kg-<lo>-<hi>` file name.
    pub fn parse_file_name(name: &str) -> Option<Self> {
        let (lo, hi) = name.strip_prefix("kg-")?.split_once('-')?;
        KeyGroupRange::new(lo.parse().ok()?, hi.parse().ok()?).ok()
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.lo, self.hi)
    }
}

/// The stored snapshots of `operator` that instance `instance` of `parallelism` must read on
/// restore, in key-group order, each with the part of it the instance now owns (the instance
/// drops the rest while loading). Unchanged parallelism gives exactly the instance's own file.
pub fn overlapping<'a>(
    files: &'a [SnapshotEntry],
    operator: &str,
    instance: usize,
    parallelism: usize,
    key_groups: u32,
) -> Vec<(&'a SnapshotEntry, KeyGroupRange)> {
    let mine = KeyGroupRange::of_instance(instance, parallelism, key_groups);
    let mut hits: Vec<_> = files
        .iter()
        .filter(|entry| entry.operator == operator)
        .filter_map(|entry| entry.range.intersect(&mine).map(|part| (entry, part)))
        .collect();
    hits.sort_by_key(|(entry, _)| entry.range);
    hits
}
