//! When each key last had a record, in processing time: what state TTL expiry reads to find
//! the keys that went quiet (`[state] ttl`). One table serves every window of a job
//! ([`crate::keyed_features::KeyedFeatures`] keeps one entry per key, not one per window
//! group); a lone [`crate::window_state::KeyedWindows`] keeps its own.
//!
//! Tracking is off until [`KeyActivity::set_processing_time`] is first called: the window
//! operator calls it once per tick, and a state that is never told the time has nothing to
//! expire.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

use crate::key_table::FastHash;
use crate::vocab::Key;

/// Keys quiet long enough to expire.
pub type QuietKeys = HashSet<Key, FastHash>;

/// Per-key processing time (Unix ms) of the last record, while tracking is on.
///
/// Serialized as its two fields in order (`now_ms`, then the table): the layout that
/// [`crate::window_state::KeyedWindows`] snapshots have always had for these fields.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KeyActivity {
    /// Processing time of the current batch, when key TTLs are tracked.
    now_ms: Option<i64>,
    /// Key -> processing time of its last record (only while `now_ms` is set).
    last_seen: HashMap<Key, i64, FastHash>,
}

impl KeyActivity {
    /// Sets the processing time of the records seen next and turns tracking on.
    pub fn set_processing_time(&mut self, now_ms: i64) {
        self.now_ms = Some(now_ms);
    }

    /// Records that `key` had a record now (nothing while tracking is off).
    #[inline]
    pub fn touch(&mut self, key: &Key) {
        if let Some(now) = self.now_ms {
            match self.last_seen.get_mut(key) {
                Some(seen) => *seen = now,
                None => {
                    self.last_seen.insert(key.clone(), now);
                }
            }
        }
    }

    /// Restored state joins a run at processing time `now_ms`: the time between the snapshot
    /// and now is not quiet time, so every key's last-record time moves forward by it, and
    /// tracking waits for the next [`KeyActivity::set_processing_time`].
    pub fn resume(&mut self, now_ms: i64) {
        let Some(saved) = self.now_ms.take() else {
            return;
        };
        let downtime = now_ms.saturating_sub(saved).max(0);
        for seen in self.last_seen.values_mut() {
            *seen = seen.saturating_add(downtime);
        }
    }

    /// Takes the keys with no record for `ttl_ms` (`last record + ttl_ms <= now_ms`) out of
    /// the table: they are about to expire.
    pub fn take_quiet(&mut self, now_ms: i64, ttl_ms: i64) -> QuietKeys {
        let cutoff = now_ms.saturating_sub(ttl_ms.max(0));
        let quiet: QuietKeys = self
            .last_seen
            .iter()
            .filter(|(_, &seen)| seen <= cutoff)
            .map(|(k, _)| k.clone())
            .collect();
        if !quiet.is_empty() {
            self.last_seen.retain(|k, _| !quiet.contains(k));
        }
        quiet
    }

    /// Keeps only the keys `keep` accepts.
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        self.last_seen.retain(|k, _| keep(k));
    }

    /// Adds another table's keys (disjoint from ours, or the same keys at the same times);
    /// the later time wins where both have a key.
    pub fn absorb(&mut self, other: KeyActivity) {
        self.now_ms = self.now_ms.max(other.now_ms);
        for (key, seen) in other.last_seen {
            let entry = self.last_seen.entry(key).or_insert(seen);
            *entry = (*entry).max(seen);
        }
    }

    /// Number of keys tracked.
    pub fn len(&self) -> usize {
        self.last_seen.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.last_seen.is_empty()
    }
}
