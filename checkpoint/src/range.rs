//! Key-group snapshot files: the ranges they hold and their names (`<operator>/kg-<lo>-<hi>`),
//! how a manifest lists one ([`SnapshotEntry`], [`Section`]), what one operator instance owns
//! and which listed files an instance must read after a rescale ([`overlapping`]).
//!
//! Pipeline position: the leaf of this crate's vocabulary — bundles, manifests, stores and
//! the operators' snapshot writers and restores all speak in these types; it imports nothing
//! of the crate but its errors.
//!
//! Instance `i` of `p` owns the key groups `[ceil(i*G/p), ceil((i+1)*G/p))`, the preimage of
//! the router's `kg * p / G`: both come from [`weir_features::ownership`], so a snapshot is
//! always exactly one instance's state.

use std::fmt;

use serde::{Deserialize, Serialize};

use weir_features::ownership;
use weir_features::vocab::Epoch;

use crate::error::{CheckpointError, Result};

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
    /// See [`ownership::key_groups_of_instance`].
    pub fn of_instance(instance: usize, parallelism: usize, key_groups: u32) -> Self {
        let owned = ownership::key_groups_of_instance(instance, parallelism, key_groups);
        KeyGroupRange {
            lo: owned.start,
            hi: owned.end,
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

/// One snapshot of the epoch, as listed in the manifest: a whole file, or one section of a
/// bundle file (the state shards an instance changed in one epoch, written together).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    /// The operator that wrote it (a directory name).
    pub operator: String,
    /// The key groups it holds.
    pub range: KeyGroupRange,
    /// Size in bytes: of the whole file (header included), or of the section.
    pub size: u64,
    /// xxh3_64 of the payload, or of the section's bytes.
    pub xxh3: u64,
    /// The epoch whose directory holds the file (`None`, as in format 1: the manifest's own).
    #[serde(default)]
    pub stored_in: Option<Epoch>,
    /// Where the section lies when the snapshot is part of a bundle file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<Section>,
}

/// The place of one snapshot inside a bundle file `<operator>/kg-<lo>-<hi>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// The range in the bundle file's name (the writing instance's key groups).
    pub file: KeyGroupRange,
    /// Offset of the section in the file's payload.
    pub offset: u64,
    /// Size of the whole bundle file in bytes (header included).
    pub file_size: u64,
}

impl SnapshotEntry {
    /// The epoch whose directory holds the file, for a manifest of epoch `listed_by`.
    pub fn file_epoch(&self, listed_by: Epoch) -> Epoch {
        self.stored_in.unwrap_or(listed_by)
    }

    /// The range in the name of the file that holds the snapshot.
    pub fn file_range(&self) -> KeyGroupRange {
        self.section.map_or(self.range, |s| s.file)
    }

    /// Size of the whole file that holds the snapshot.
    pub fn file_size(&self) -> u64 {
        self.section.map_or(self.size, |s| s.file_size)
    }

    /// The file's name inside its epoch: `<operator>/kg-<lo>-<hi>`.
    pub fn file_name(&self) -> String {
        format!("{}/{}", self.operator, self.file_range().file_name())
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

/// Checks that `name` can be a single path component (and an object-store key segment).
pub(crate) fn check_operator_name(name: &str) -> Result<()> {
    let fail = |reason| {
        Err(CheckpointError::InvalidName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.starts_with('.') {
        return fail("it starts with `.` (reserved for temporary files)");
    }
    if name == "MANIFEST" {
        return fail("`MANIFEST` is the commit file");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return fail("use only ASCII letters, digits, `_`, `-` and `.`");
    }
    Ok(())
}
