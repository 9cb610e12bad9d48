//! The contents of one (key, pane) or (key, session): the features' accumulators plus the
//! record count and the first/last source positions (in arrival order) that a
//! [`FeatureRow`] reports. Panes and sessions merge slots when a window fires or two sessions
//! join; merging equals aggregating the union of both inputs.
//!
//! Layout (issue #18, run M): a slot is one entry of a key table per open pane, so its size
//! is most of the window state's memory. The first and last arrivals are stored as columns
//! ([`Arrivals`]) so the two 4-byte partitions share a word, and the owner's "changed since
//! emitted" flag lives in the slot's spare bytes: 88 bytes in all. Snapshots keep the older
//! shape (first and last as `(seq, position)` pairs, the flag written by the owner), so the
//! bytes of a snapshot do not depend on this layout.

use crate::feature::{Accumulators, FeatureSet};
use crate::record::Event;
use crate::row::{FeatureRow, RowValues};
use crate::vocab::{Key, KeyGroup, SourcePosition};
use crate::window::WindowBounds;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Index of the first record in [`Arrivals`]' columns.
const FIRST: usize = 0;
/// Index of the last record in [`Arrivals`]' columns.
const LAST: usize = 1;

/// Arrival numbers and source positions of a slot's first and last records (arrival order),
/// column by column: 40 bytes where two `(u64, SourcePosition)` pairs take 48.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arrivals {
    seq: [u64; 2],
    offset: [i64; 2],
    partition: [i32; 2],
}

impl Arrivals {
    /// The first and the last record, each as `(seq, position)`.
    fn new(first: (u64, SourcePosition), last: (u64, SourcePosition)) -> Self {
        Arrivals {
            seq: [first.0, last.0],
            offset: [first.1.offset, last.1.offset],
            partition: [first.1.partition, last.1.partition],
        }
    }

    /// One record, both first and last.
    fn one(seq: u64, position: SourcePosition) -> Self {
        Arrivals::new((seq, position), (seq, position))
    }

    fn get(&self, which: usize) -> (u64, SourcePosition) {
        let position = SourcePosition {
            partition: self.partition[which],
            offset: self.offset[which],
        };
        (self.seq[which], position)
    }

    fn set(&mut self, which: usize, (seq, position): (u64, SourcePosition)) {
        self.seq[which] = seq;
        self.offset[which] = position.offset;
        self.partition[which] = position.partition;
    }

    /// Takes `(seq, position)` as the first record if it arrived earlier, and as the last if
    /// it arrived later.
    #[inline]
    fn widen(&mut self, arrival: (u64, SourcePosition)) {
        if arrival.0 < self.seq[FIRST] {
            self.set(FIRST, arrival);
        }
        if arrival.0 >= self.seq[LAST] {
            self.set(LAST, arrival);
        }
    }

    /// Widens to cover `other`'s first and last records too.
    fn absorb(&mut self, other: &Arrivals) {
        if other.seq[FIRST] < self.seq[FIRST] {
            self.set(FIRST, other.get(FIRST));
        }
        if other.seq[LAST] > self.seq[LAST] {
            self.set(LAST, other.get(LAST));
        }
    }
}

/// Accumulated state of one key in one pane or session.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub key_group: KeyGroup,
    pub accs: Accumulators,
    pub records: u64,
    arrivals: Arrivals,
    /// Latest ingest time of its records ([`Event::ingested_ms`]); not in snapshots (records
    /// restored from one were read by an earlier run: 0, unknown).
    pub ingested_ms: u64,
    /// The owner's flag: changed since one of its windows was emitted. Kept here, in bytes
    /// the slot's alignment leaves free, rather than beside it; not in the slot's serialized
    /// form (the owner writes it after, as it always did).
    pub dirty: bool,
}

/// A slot's serialized form (its layout before [`Arrivals`]), borrowed for writing.
#[derive(Serialize)]
#[serde(rename = "Slot")]
struct SlotOut<'a> {
    key_group: KeyGroup,
    accs: &'a Accumulators,
    records: u64,
    first: (u64, SourcePosition),
    last: (u64, SourcePosition),
}

/// A slot's serialized form, read.
#[derive(Deserialize)]
#[serde(rename = "Slot")]
struct SlotIn {
    key_group: KeyGroup,
    accs: Accumulators,
    records: u64,
    first: (u64, SourcePosition),
    last: (u64, SourcePosition),
}

impl Serialize for Slot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SlotOut {
            key_group: self.key_group,
            accs: &self.accs,
            records: self.records,
            first: self.arrivals.get(FIRST),
            last: self.arrivals.get(LAST),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Slot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = SlotIn::deserialize(deserializer)?;
        Ok(Slot {
            key_group: s.key_group,
            accs: s.accs,
            records: s.records,
            arrivals: Arrivals::new(s.first, s.last),
            ingested_ms: 0,
            dirty: false,
        })
    }
}

impl Slot {
    /// A slot holding `event` only (`seq` = its arrival number in this state).
    pub fn new(features: &FeatureSet, event: &Event, seq: u64) -> Slot {
        let mut slot = Slot {
            key_group: event.key_group,
            accs: features.empty(),
            records: 0,
            arrivals: Arrivals::one(seq, event.position),
            ingested_ms: 0,
            dirty: false,
        };
        slot.add(features, event, seq);
        slot
    }

    /// Makes this slot a copy of `other`, reusing its accumulators' allocations.
    pub fn assign(&mut self, other: &Slot) {
        let mut accs = std::mem::take(&mut self.accs);
        accs.clone_from(&other.accs);
        *self = Slot { accs, ..*other };
    }

    /// Folds one record in. Does not allocate.
    #[inline]
    pub fn add(&mut self, features: &FeatureSet, event: &Event, seq: u64) {
        features.update(&mut self.accs, &event.values, event.ts);
        self.records += 1;
        self.ingested_ms = self.ingested_ms.max(event.ingested_ms);
        self.arrivals.widen((seq, event.position));
    }

    /// Merges `other` in: the result describes the union of both slots' records. Pass the
    /// earlier pane or session as `self` (see [`FeatureSet::merge`]).
    pub fn absorb(&mut self, features: &FeatureSet, other: &Slot) {
        features.merge(&mut self.accs, &other.accs);
        self.records += other.records;
        self.ingested_ms = self.ingested_ms.max(other.ingested_ms);
        self.arrivals.absorb(&other.arrivals);
    }

    /// Appends the feature row of this slot for `key` over `bounds` to `rows`. The row is
    /// written where it stays, in `rows`, and its values computed there: a row built on the
    /// stack and then pushed was moved twice (its 72 bytes of values, then all 184 bytes of
    /// it), each a `memcpy` call per row, and `Vec::push` of a row built in place still
    /// copied it once.
    pub fn push_row(
        &self,
        features: &FeatureSet,
        key: &Key,
        bounds: WindowBounds,
        revision: u32,
        closed_by_timeout: bool,
        rows: &mut Vec<FeatureRow>,
    ) {
        rows.reserve(1);
        let len = rows.len();
        rows.spare_capacity_mut()[0].write(FeatureRow {
            key: key.clone(),
            key_group: self.key_group,
            window_start: bounds.start,
            window_end: bounds.end,
            revision,
            values: RowValues::new(),
            records: self.records,
            first: self.arrivals.get(FIRST).1,
            last: self.arrivals.get(LAST).1,
            fired_at_ns: 0,
            closed_by_timeout,
            ingested_at_ms: self.ingested_ms,
        });
        // SAFETY: the place after the last row (room made by `reserve`) now holds a whole row.
        #[allow(unsafe_code)]
        unsafe {
            rows.set_len(len + 1);
        }
        features.values(&self.accs, &mut rows[len].values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;
    use crate::test_fixtures::{count_feature, event};

    fn bytes<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::serialize(value).unwrap_or_else(|e| panic!("cannot encode: {e}"))
    }

    /// The layout run M counts on: a slot is 88 bytes (a pane's table entry is its key and
    /// this), with the owner's flag inside.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_slot_takes_88_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 88);
    }

    /// Snapshots keep the shape of the slot before [`Arrivals`]: key group, accumulators,
    /// record count, then first and last as `(seq, position)` pairs, no flag.
    #[test]
    fn a_slot_serializes_as_its_fields_with_first_and_last_as_pairs() -> Result<()> {
        let features = count_feature()?;
        let at = |offset| SourcePosition {
            partition: 3,
            offset,
        };
        let mut slot = Slot::new(&features, &event("k", 5), 7);
        slot.arrivals = Arrivals::one(7, at(70));
        let mut later = Slot::new(&features, &event("k", 6), 9);
        later.arrivals = Arrivals::one(9, at(90));
        slot.absorb(&features, &later);
        slot.dirty = true;
        let expected = bytes(&(
            slot.key_group,
            &slot.accs,
            2_u64,
            (7_u64, at(70)),
            (9_u64, at(90)),
        ));
        assert_eq!(bytes(&slot), expected);
        let back: Slot = bincode::deserialize(&expected).map_err(|e| {
            crate::error::FeatureError::Window(format!("cannot decode a slot: {e}"))
        })?;
        assert_eq!(back.arrivals, slot.arrivals);
        assert_eq!((back.records, back.accs), (2, slot.accs));
        assert!(!back.dirty, "the flag is the owner's to restore");
        Ok(())
    }
}
