//! The timers of session windows ([`crate::sessions`]): `(time, key)` entries, taken earliest
//! first (then in key order) when the watermark reaches their time. Pipeline position: inside
//! the window operator's session state.
//!
//! A binary heap rather than an ordered set: a key's new timer is nearly always the latest
//! (records arrive roughly in time order), which a heap adds in constant time and a B-tree
//! in a descent and node insert per record (~4 % of a 1-worker session run, BENCHMARKS.md
//! fix 43). Entries are never removed early: the owner skips the stale ones (whose time is
//! no longer its key's timer), so an entry may also repeat, and repeats are as stale.
//!
//! Serialized as the ordered set it replaced (a sequence in `(time, key)` order without
//! repeats), so snapshots keep their bytes and older ones still decode.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::vocab::{EventTime, Key};

/// `(time, key)` entries, earliest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct SessionTimers {
    heap: BinaryHeap<Reverse<(EventTime, Key)>>,
}

impl SessionTimers {
    /// Adds an entry.
    #[inline]
    pub fn insert(&mut self, time: EventTime, key: Key) {
        self.heap.push(Reverse((time, key)));
    }

    /// The earliest entry's time.
    #[inline]
    pub fn first_time(&self) -> Option<EventTime> {
        self.heap.peek().map(|Reverse((time, _))| *time)
    }

    /// Takes the earliest entry (of one time, the least key).
    #[inline]
    pub fn pop_first(&mut self) -> Option<(EventTime, Key)> {
        self.heap.pop().map(|Reverse(entry)| entry)
    }

    /// Keeps the entries whose key `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&Key) -> bool) {
        self.heap.retain(|Reverse((_, key))| keep(key));
    }

    /// Adds every entry of `other`.
    pub fn absorb(&mut self, other: SessionTimers) {
        self.heap.extend(other.heap);
    }

    /// Whether no entry is left.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

impl Serialize for SessionTimers {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut entries: Vec<&(EventTime, Key)> = self.heap.iter().map(|r| &r.0).collect();
        entries.sort_unstable();
        entries.dedup();
        serializer.collect_seq(entries)
    }
}

impl<'de> Deserialize<'de> for SessionTimers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = Vec::<(EventTime, Key)>::deserialize(deserializer)?;
        Ok(SessionTimers {
            heap: entries.into_iter().map(Reverse).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Entries come out earliest first, of one time in key order; the serialized form is the
    /// ordered set's, repeats and all, and it decodes back to the same entries.
    #[test]
    fn entries_come_in_time_then_key_order_and_serialize_as_the_ordered_set() {
        let entries = [
            (30, "b"),
            (10, "z"),
            (30, "a"),
            (20, "c"),
            (10, "z"),
            (5, "q"),
        ];
        let mut timers = SessionTimers::default();
        let mut set = BTreeSet::new();
        for (time, key) in entries {
            timers.insert(time, Key::from(key));
            set.insert((time, Key::from(key)));
        }
        let bytes = bincode::serialize(&timers).unwrap_or_default();
        assert_eq!(bytes, bincode::serialize(&set).unwrap_or_default());
        let decoded: SessionTimers = bincode::deserialize(&bytes).unwrap_or_default();
        assert_eq!(decoded.first_time(), Some(5));
        let mut popped = Vec::new();
        while let Some(entry) = timers.pop_first() {
            popped.push(entry);
        }
        let mut want: Vec<(EventTime, Key)> = entries
            .iter()
            .map(|&(time, key)| (time, Key::from(key)))
            .collect();
        want.sort();
        assert_eq!(popped, want, "every entry, the repeat too, in order");
    }
}
