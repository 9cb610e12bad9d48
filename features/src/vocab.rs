//! Shared vocabulary of the whole pipeline: ticks, epochs, event time, watermarks, key groups
//! and source positions. Every other module (and every other crate) speaks in these types.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

/// Processing-time tick: the Timely timestamp. One tick is `tick_ms` of wall-clock time,
/// numbered from the Unix epoch (`tick = unix_ms / tick_ms`), so all workers agree on it.
pub type Tick = u64;

/// Event time in milliseconds since the Unix epoch, as carried by the records themselves.
pub type EventTime = i64;

/// The key a record is grouped by (e.g. a user id). Stored inline up to 24 bytes, so keying
/// a record does not allocate for ordinary ids.
pub type Key = CompactString;

/// A checkpoint epoch: every K-th tick (see DESIGN.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Epoch(pub u64);

/// An event-time watermark: no record with an earlier event time is expected any more.
///
/// `Watermark::MIN` means "nothing known yet" (holds every window open) and `Watermark::MAX`
/// means "end of input" (fires every window).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Watermark(pub EventTime);

impl Watermark {
    /// No progress known: holds all windows open.
    pub const MIN: Watermark = Watermark(EventTime::MIN);
    /// End of input: every window may fire.
    pub const MAX: Watermark = Watermark(EventTime::MAX);

    /// The watermark `max_event_time - max_out_of_orderness`, saturating at the ends.
    pub fn bounded_out_of_orderness(
        max_event_time: EventTime,
        max_out_of_orderness_ms: i64,
    ) -> Self {
        Watermark(max_event_time.saturating_sub(max_out_of_orderness_ms))
    }
}

/// A key group: the unit of state partitioning, routing and checkpoint files.
///
/// `key_group = xxh3_64(key bytes, KEY_GROUP_SEED) % key_groups`; the number of key groups is
/// fixed for the life of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeyGroup(pub u32);

/// Default number of key groups (DESIGN.md §4).
pub const DEFAULT_KEY_GROUPS: u32 = 4096;

/// The most key groups a job may have (2^20): a window slot keeps its key group in 20 bits
/// (`crate::slot`). Flink's most key groups (its maximum parallelism) are 32 768.
pub const MAX_KEY_GROUPS: u32 = 1 << 20;

/// Fixed seed of the key-group hash. Changing it re-partitions every persisted state: never do.
pub const KEY_GROUP_SEED: u64 = 0x5745_4952_4b47_0001; // "WEIRKG" + format 1

impl KeyGroup {
    /// The key group of `key` among `key_groups` groups (`key_groups > 0`).
    pub fn of(key: &[u8], key_groups: u32) -> KeyGroup {
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(key, KEY_GROUP_SEED);
        let groups = u64::from(key_groups.max(1));
        // A power of two (the default, 4096) takes the hash's low bits: the same remainder
        // without a 64-bit division per record (run F's CPU ×0.98; BENCHMARKS.md, F, fix 70).
        KeyGroup(if groups.is_power_of_two() {
            (hash & (groups - 1)) as u32
        } else {
            (hash % groups) as u32
        })
    }
}

/// Where a record came from: enough to find it again in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SourcePosition {
    /// Partition of the source topic (for a file: its index among the input files).
    pub partition: i32,
    /// Offset in the partition (for a file: the byte offset of the record's line, in the
    /// decompressed stream of a compressed file).
    pub offset: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A power of two of groups takes the hash's low bits: the remainder every other count
    /// of groups takes, so no key moves.
    #[test]
    fn key_groups_of_a_power_of_two_are_the_hash_remainder() {
        for i in 0..10_000_u32 {
            let key = format!("user-{i}");
            let hash = xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), KEY_GROUP_SEED);
            for groups in [1_u32, 2, 8, 4096, 1 << 20, 3, 1000, 4095] {
                let want = (hash % u64::from(groups)) as u32;
                assert_eq!(
                    KeyGroup::of(key.as_bytes(), groups),
                    KeyGroup(want),
                    "{key} {groups}"
                );
            }
        }
    }

    #[test]
    fn key_group_is_stable_and_in_range() {
        // Pinned values: a change here means persisted state and routing would move.
        let kg = KeyGroup::of(b"u000001", DEFAULT_KEY_GROUPS);
        assert!(kg.0 < DEFAULT_KEY_GROUPS);
        assert_eq!(kg, KeyGroup::of(b"u000001", DEFAULT_KEY_GROUPS));
        assert_ne!(
            KeyGroup::of(b"u000001", 1 << 20),
            KeyGroup::of(b"u000002", 1 << 20)
        );
        assert_eq!(KeyGroup::of(b"anything", 1), KeyGroup(0));
        // Computed outside Weir (Python `xxhash` 4.1, `xxh3_64_intdigest(key,
        // seed=KEY_GROUP_SEED) % groups`), so a dependency update cannot move them unseen.
        let golden: [(&[u8], u32, u32); 6] = [
            (b"u000001", 4096, 3834),
            (b"alice", 4096, 1578),
            (b"", 4096, 2714),
            (b"k-42", 4096, 731),
            (
                b"carol-with-a-longer-id-that-goes-past-sixteen-bytes",
                4096,
                3514,
            ),
            (b"u000001", 64, 58),
        ];
        for (key, groups, group) in golden {
            assert_eq!(KeyGroup::of(key, groups), KeyGroup(group), "{key:?}");
        }
    }

    #[test]
    fn watermark_saturates() {
        assert_eq!(
            Watermark::bounded_out_of_orderness(EventTime::MIN, 5),
            Watermark::MIN
        );
        assert_eq!(
            Watermark::bounded_out_of_orderness(10_000, 2_000),
            Watermark(8_000)
        );
    }
}
