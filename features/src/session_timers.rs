//! The timers of session windows ([`crate::sessions`]): `(time, place)` entries, a place being
//! where a key sits in the sessions' key table, taken earliest first when the watermark
//! reaches their time. Pipeline position: inside the window operator's session state.
//!
//! A binary heap rather than an ordered set: a key's new timer is nearly always the latest
//! (records arrive roughly in time order), which a heap adds in constant time and a B-tree
//! in a descent and node insert per record (~4 % of a 1-worker session run, BENCHMARKS.md
//! fix 43). Entries are never removed early: the owner skips the stale ones (whose time is
//! no longer its key's timer, or whose place holds no key), so an entry may also repeat, and
//! repeats are as stale. An entry holds a key's place, not the key: 12 bytes (an 8-byte time
//! and a 4-byte place, packed) rather than 32 (run M), and no copy of the key per timer.
//!
//! The owner serializes the timers as `(time, key)` pairs ([`crate::sessions`]): places are
//! not kept across runs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::key_table::Place;
use crate::vocab::EventTime;

/// One timer, ordered by time, then place. Packed to 4-byte alignment: 12 bytes, where a
/// `(time, place)` tuple is 16 with its padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C, packed(4))]
struct Timer {
    time: EventTime,
    place: Place,
}

/// `(time, place)` entries, earliest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct SessionTimers {
    heap: BinaryHeap<Reverse<Timer>>,
}

impl SessionTimers {
    /// Adds an entry.
    #[inline]
    pub fn insert(&mut self, time: EventTime, place: Place) {
        self.heap.push(Reverse(Timer { time, place }));
    }

    /// The earliest entry's time.
    #[inline]
    pub fn first_time(&self) -> Option<EventTime> {
        self.heap.peek().map(|Reverse(timer)| timer.time)
    }

    /// Takes the earliest entry if it is at `time`.
    #[inline]
    pub fn pop_at(&mut self, time: EventTime) -> Option<Place> {
        if self.first_time() != Some(time) {
            return None;
        }
        self.heap.pop().map(|Reverse(timer)| timer.place)
    }

    /// Keeps the entries whose place `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(Place) -> bool) {
        self.heap.retain(|Reverse(timer)| keep(timer.place));
    }

    /// Every entry, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (EventTime, Place)> + '_ {
        self.heap
            .iter()
            .map(|&Reverse(Timer { time, place })| (time, place))
    }

    /// Whether no entry is left.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size run M counts per session timer.
    #[test]
    fn a_timer_takes_12_bytes() {
        assert_eq!(size_of::<Reverse<Timer>>(), 12);
    }

    /// Entries come out earliest first, each time's entries (repeats too) only when asked
    /// for that time.
    #[test]
    fn entries_come_out_earliest_first_one_time_at_a_time() {
        let mut timers = SessionTimers::default();
        let places: Vec<Place> = {
            let mut table = crate::key_table::KeyTable::default();
            (0..4)
                .map(|i| {
                    let key = crate::vocab::Key::from(format!("k{i}"));
                    let hash = crate::key_table::key_hash(&key);
                    table.find_or_insert_with(hash, &key, || ()).0
                })
                .collect()
        };
        for (time, i) in [(30, 1), (10, 3), (30, 0), (20, 2), (10, 3), (5, 2)] {
            timers.insert(time, places[i]);
        }
        assert_eq!(timers.pop_at(10), None, "5 comes first");
        let mut popped = Vec::new();
        while let Some(time) = timers.first_time() {
            while let Some(place) = timers.pop_at(time) {
                popped.push((time, place));
            }
        }
        assert!(popped.is_sorted_by_key(|(time, _)| *time), "{popped:?}");
        popped.sort();
        let want = [
            (5, places[2]),
            (10, places[3]),
            (10, places[3]),
            (20, places[2]),
            (30, places[0]),
            (30, places[1]),
        ];
        assert_eq!(popped, want);
        assert!(timers.is_empty());
    }
}
