//! The contents of one (key, pane) or (key, session): the features' accumulators plus the
//! record count and the first/last source positions (in arrival order) that a
//! [`FeatureRow`] reports. Panes and sessions merge slots when a window fires or two sessions
//! join; merging equals aggregating the union of both inputs.
//!
//! Layout (issue #18, run M): a slot is one entry of a key table per open pane, so its size
//! is most of the window state's memory. The first and last arrivals are stored as columns
//! ([`Arrivals`]) so the two 4-byte partitions share a word, and the key group, record count,
//! latest ingest time and the owner's "changed since emitted" flag share 16 bytes
//! ([`Tally`]): 64 bytes beside the accumulator words ([`SlotMeta`]). A pane's words live in
//! its key table's column ([`SlotRef`] / [`SlotMut`] borrow both parts); a session's slot
//! holds its own ([`Slot`], 80 bytes). Snapshots keep the older shape (first and last as
//! `(seq, position)` pairs, the flag written by the owner), so the bytes of a snapshot do not
//! depend on this layout.

use crate::aggregate::{clone_distinct_from, Words};
use crate::feature::{AccsMut, AccsRef, Accumulators, FeatureSet};
use crate::hll::Distinct;
use crate::record::Event;
use crate::row::{FeatureRow, RowValues};
use crate::vocab::{Key, KeyGroup, SourcePosition, MAX_KEY_GROUPS};
use crate::window::WindowBounds;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thin_vec::ThinVec;

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

/// Bits of [`Tally::packed`] that hold the record count.
const RECORD_BITS: u32 = 43;

/// The most records a slot counts (2^43 - 1): at a million records a second for one key,
/// 100 days in one window. A count that reaches it stays there.
const MAX_RECORDS: u64 = (1 << RECORD_BITS) - 1;

/// Bit of [`Tally::packed`] that holds the owner's flag.
const DIRTY_BIT: u64 = 1 << RECORD_BITS;

/// Where the key group starts in [`Tally::packed`]: its 20 bits hold every key group below
/// [`MAX_KEY_GROUPS`].
const KEY_GROUP_SHIFT: u32 = RECORD_BITS + 1;

const _: () = assert!(MAX_KEY_GROUPS as u64 <= 1 << (64 - KEY_GROUP_SHIFT));

/// A slot's key group, record count and its owner's flag in one word, beside the latest
/// ingest time: 16 bytes where a `u64` count and a `u64` time beside the key group and flag
/// took 24 (run M). `packed`: bits 0–42 the record count (at most [`MAX_RECORDS`]), bit 43
/// the flag, bits 44–63 the key group. A record's update adds to the count and takes the
/// later ingest time, as with unpacked fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tally {
    /// Latest ingest time of the slot's records ([`Event::ingested_ms`]).
    ingested_ms: u64,
    packed: u64,
}

impl Tally {
    fn new(key_group: KeyGroup, records: u64, ingested_ms: u64) -> Self {
        debug_assert!(key_group.0 < MAX_KEY_GROUPS, "{key_group:?}");
        let mut tally = Tally {
            ingested_ms,
            packed: u64::from(key_group.0) << KEY_GROUP_SHIFT,
        };
        tally.add_records(records);
        tally
    }

    fn key_group(&self) -> KeyGroup {
        KeyGroup((self.packed >> KEY_GROUP_SHIFT) as u32)
    }

    fn records(&self) -> u64 {
        self.packed & MAX_RECORDS
    }

    /// Adds one record, up to [`MAX_RECORDS`]: a compare and an add (a record's update, where
    /// [`Tally::absorb`] is a merge's).
    #[inline]
    fn add_record(&mut self, ingested_ms: u64) {
        if self.packed & MAX_RECORDS != MAX_RECORDS {
            self.packed += 1;
        }
        self.ingested_ms = self.ingested_ms.max(ingested_ms);
    }

    /// Takes in `other`'s records and later ingest time (a merge of two slots).
    fn absorb(&mut self, other: &Tally) {
        self.add_records(other.records());
        self.ingested_ms = self.ingested_ms.max(other.ingested_ms);
    }

    /// Adds `n` records, up to [`MAX_RECORDS`].
    fn add_records(&mut self, n: u64) {
        let records = self.records().saturating_add(n).min(MAX_RECORDS);
        self.packed = self.packed & !MAX_RECORDS | records;
    }

    fn dirty(&self) -> bool {
        self.packed & DIRTY_BIT != 0
    }

    fn set_dirty(&mut self, dirty: bool) {
        self.packed = self.packed & !DIRTY_BIT | if dirty { DIRTY_BIT } else { 0 };
    }
}

/// What a slot holds beside its accumulator words: its distinct states (a thin pointer,
/// nothing allocated for a job without `distinct` features), its first and last arrivals,
/// and its [`Tally`]: 64 bytes. A pane keeps this in its key table's entry and the words in
/// the table's column ([`crate::key_table::KeyTable`]); a session or a merged window holds
/// it beside words of its own ([`Slot`]).
#[derive(Clone, Debug)]
pub(crate) struct SlotMeta {
    distinct: ThinVec<Distinct>,
    arrivals: Arrivals,
    /// Key group, record count, latest ingest time of its records (not in snapshots: records
    /// restored from one were read by an earlier run, 0, unknown) and the owner's flag:
    /// changed since one of its windows was emitted (not in the slot's serialized form: the
    /// owner writes it after, as it always did).
    tally: Tally,
}

/// Accumulated state of one key in one session, or of one merged window: its words and the
/// rest ([`SlotMeta`]), 80 bytes.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    words: Words,
    meta: SlotMeta,
}

/// A slot, borrowed: its words (its own, or its pane table's column) and the rest.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotRef<'a> {
    pub words: &'a [u64],
    pub meta: &'a SlotMeta,
}

/// A slot, borrowed mutably.
#[derive(Debug)]
pub(crate) struct SlotMut<'a> {
    pub words: &'a mut [u64],
    pub meta: &'a mut SlotMeta,
}

/// A slot's serialized form (its layout before [`Arrivals`]), borrowed for writing.
#[derive(Serialize)]
#[serde(rename = "Slot")]
struct SlotOut<'a> {
    key_group: KeyGroup,
    accs: AccsRef<'a>,
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

impl Serialize for SlotRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let meta = self.meta;
        SlotOut {
            key_group: meta.tally.key_group(),
            accs: self.accs(),
            records: meta.tally.records(),
            first: meta.arrivals.get(FIRST),
            last: meta.arrivals.get(LAST),
        }
        .serialize(serializer)
    }
}

impl Serialize for Slot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_ref().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Slot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = SlotIn::deserialize(deserializer)?;
        if s.key_group.0 >= MAX_KEY_GROUPS {
            return Err(serde::de::Error::custom(format!(
                "key group {} is not below the most key groups, {MAX_KEY_GROUPS}",
                s.key_group.0
            )));
        }
        Ok(Slot {
            words: s.accs.words,
            meta: SlotMeta {
                distinct: s.accs.distinct,
                arrivals: Arrivals::new(s.first, s.last),
                tally: Tally::new(s.key_group, s.records, 0),
            },
        })
    }
}

impl SlotMeta {
    /// The rest of a new slot for `event` (`seq` = its arrival number in this state), before
    /// the record is folded in ([`SlotMut::add`]) with the slot's words set to
    /// [`FeatureSet::empty_words`].
    pub fn new(features: &FeatureSet, event: &Event, seq: u64) -> SlotMeta {
        SlotMeta {
            distinct: features.empty_distinct(),
            arrivals: Arrivals::one(seq, event.position),
            tally: Tally::new(event.key_group, 0, 0),
        }
    }

    /// The owner's flag: changed since one of its windows was emitted.
    pub fn dirty(&self) -> bool {
        self.tally.dirty()
    }

    pub fn set_dirty(&mut self, dirty: bool) {
        self.tally.set_dirty(dirty);
    }
}

impl<'a> SlotMut<'a> {
    /// The accumulators, borrowed mutably.
    #[inline]
    fn accs(&mut self) -> AccsMut<'_> {
        AccsMut {
            words: self.words,
            distinct: &mut self.meta.distinct,
        }
    }

    /// Folds one record in. Does not allocate.
    #[inline]
    pub fn add(&mut self, features: &FeatureSet, event: &Event, seq: u64) {
        features.update(self.accs(), &event.values, event.ts);
        self.meta.tally.add_record(event.ingested_ms);
        self.meta.arrivals.widen((seq, event.position));
    }

    /// Merges `other` in: the result describes the union of both slots' records. Pass the
    /// earlier pane or session as `self` (see [`FeatureSet::merge`]).
    pub fn absorb(&mut self, features: &FeatureSet, other: SlotRef<'_>) {
        features.merge(self.accs(), other.accs());
        self.meta.tally.absorb(&other.meta.tally);
        self.meta.arrivals.absorb(&other.meta.arrivals);
    }
}

impl SlotRef<'_> {
    /// The accumulators, borrowed.
    pub fn accs(&self) -> AccsRef<'_> {
        AccsRef {
            words: self.words,
            distinct: &self.meta.distinct,
            records: self.meta.tally.records(),
        }
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
        let meta = self.meta;
        rows.reserve(1);
        let len = rows.len();
        rows.spare_capacity_mut()[0].write(FeatureRow {
            key: key.clone(),
            key_group: meta.tally.key_group(),
            window_start: bounds.start,
            window_end: bounds.end,
            revision,
            values: RowValues::new(),
            records: meta.tally.records(),
            first: meta.arrivals.get(FIRST).1,
            last: meta.arrivals.get(LAST).1,
            fired_at_ns: 0,
            closed_by_timeout,
            ingested_at_ms: meta.tally.ingested_ms,
        });
        // SAFETY: the place after the last row (room made by `reserve`) now holds a whole row.
        #[allow(unsafe_code)]
        unsafe {
            rows.set_len(len + 1);
        }
        features.values(self.accs(), &mut rows[len].values);
    }
}

impl Slot {
    /// A slot holding `event` only (`seq` = its arrival number in this state).
    pub fn new(features: &FeatureSet, event: &Event, seq: u64) -> Slot {
        let mut slot = Slot {
            words: Words::from(features.empty_words()),
            meta: SlotMeta::new(features, event, seq),
        };
        slot.add(features, event, seq);
        slot
    }

    pub fn as_ref(&self) -> SlotRef<'_> {
        SlotRef {
            words: &self.words,
            meta: &self.meta,
        }
    }

    pub fn as_mut(&mut self) -> SlotMut<'_> {
        SlotMut {
            words: &mut self.words,
            meta: &mut self.meta,
        }
    }

    /// A copy of `slot`, in a slot of its own.
    pub fn from_ref(slot: SlotRef<'_>) -> Slot {
        Slot {
            words: Words::from(slot.words),
            meta: slot.meta.clone(),
        }
    }

    /// Replaces the words with `convert`'s of them (state decoded from an older snapshot
    /// layout); `None` when `convert` refuses them.
    pub fn convert_words(&mut self, convert: impl FnOnce(&[u64]) -> Option<Words>) -> Option<()> {
        self.words = convert(&self.words)?;
        Some(())
    }

    /// Splits the slot into its words and the rest (a pane table keeps them apart).
    pub fn into_parts(self) -> (Words, SlotMeta) {
        (self.words, self.meta)
    }

    /// Makes this slot a copy of `other`, reusing its allocations.
    pub fn assign(&mut self, other: SlotRef<'_>) {
        if self.words.len() == other.words.len() {
            self.words.copy_from_slice(other.words);
        } else {
            self.words = Words::from(other.words);
        }
        let mut distinct = std::mem::take(&mut self.meta.distinct);
        clone_distinct_from(&mut distinct, &other.meta.distinct);
        self.meta = SlotMeta {
            distinct,
            ..*other.meta
        };
    }

    /// Folds one record in. Does not allocate.
    #[inline]
    pub fn add(&mut self, features: &FeatureSet, event: &Event, seq: u64) {
        self.as_mut().add(features, event, seq);
    }

    /// The owner's flag: changed since one of its windows was emitted.
    pub fn dirty(&self) -> bool {
        self.meta.dirty()
    }

    pub fn set_dirty(&mut self, dirty: bool) {
        self.meta.set_dirty(dirty);
    }

    /// Merges `other` in (see [`SlotMut::absorb`]).
    pub fn absorb(&mut self, features: &FeatureSet, other: &Slot) {
        self.as_mut().absorb(features, other.as_ref());
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

    /// The layout run M counts on: a slot without its words is 64 bytes (a pane's table
    /// entry is its key and this, its words in the table's column), with the owner's flag
    /// inside; a slot with words of its own (a session's) 80.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_slot_takes_64_bytes_beside_its_words() {
        assert_eq!(std::mem::size_of::<SlotMeta>(), 64);
        assert_eq!(std::mem::size_of::<Slot>(), 80);
    }

    /// The slot's accumulators as the type they serialize as.
    fn accumulators(slot: &Slot) -> Accumulators {
        Accumulators {
            words: slot.words.clone(),
            distinct: slot.meta.distinct.clone(),
            records: 0,
        }
    }

    /// The count, the flag and the key group share a word without touching each other; the
    /// count stops at its largest value.
    #[test]
    fn a_tally_keeps_count_flag_and_key_group_apart() {
        let last_group = KeyGroup(MAX_KEY_GROUPS - 1);
        let mut tally = Tally::new(last_group, 3, 20);
        tally.set_dirty(true);
        tally.add_record(10);
        tally.add_records(2);
        assert_eq!((tally.records(), tally.ingested_ms), (6, 20));
        assert_eq!(tally.key_group(), last_group);
        assert!(tally.dirty());
        tally.add_record(30);
        tally.set_dirty(false);
        assert_eq!((tally.records(), tally.ingested_ms), (7, 30));
        assert_eq!(tally.key_group(), last_group);
        assert!(!tally.dirty());

        tally.add_records(MAX_RECORDS);
        tally.set_dirty(true);
        assert_eq!(tally.records(), MAX_RECORDS);
        tally.add_record(40);
        tally.add_records(1);
        assert_eq!(tally.records(), MAX_RECORDS);
        assert_eq!(tally.key_group(), last_group);
        assert!(tally.dirty());
    }

    /// A snapshot's slot whose key group a slot cannot hold is refused, not cut to 20 bits.
    #[test]
    fn a_key_group_past_the_most_is_refused() -> Result<()> {
        let features = count_feature()?;
        let slot = Slot::new(&features, &event("k", 5), 7);
        let at = slot.meta.arrivals.get(FIRST);
        let accs = accumulators(&slot);
        let encoded = |group| bytes(&(KeyGroup(group), &accs, 1_u64, at, at));
        let last = bincode::deserialize::<Slot>(&encoded(MAX_KEY_GROUPS - 1));
        assert!(last.is_ok_and(|s| s.meta.tally.key_group() == KeyGroup(MAX_KEY_GROUPS - 1)));
        let past = bincode::deserialize::<Slot>(&encoded(MAX_KEY_GROUPS));
        assert!(past.is_err_and(|e| e.to_string().contains("key group 1048576")));
        Ok(())
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
        slot.meta.arrivals = Arrivals::one(7, at(70));
        let mut later = Slot::new(&features, &event("k", 6), 9);
        later.meta.arrivals = Arrivals::one(9, at(90));
        slot.absorb(&features, &later);
        slot.set_dirty(true);
        let expected = bytes(&(
            slot.meta.tally.key_group(),
            &accumulators(&slot),
            2_u64,
            (7_u64, at(70)),
            (9_u64, at(90)),
        ));
        assert_eq!(bytes(&slot), expected);
        let back: Slot = bincode::deserialize(&expected).map_err(|e| {
            crate::error::FeatureError::Window(format!("cannot decode a slot: {e}"))
        })?;
        assert_eq!(back.meta.arrivals, slot.meta.arrivals);
        assert!(!back.dirty(), "the flag is the owner's to restore");
        assert_eq!(back.meta.tally.records(), 2);
        assert_eq!(accumulators(&back), accumulators(&slot));
        // A slot borrowed from a pane table (its words elsewhere) writes the same bytes.
        let (words, meta) = slot.clone().into_parts();
        assert_eq!(
            bytes(&SlotRef {
                words: &words,
                meta: &meta
            }),
            expected
        );
        Ok(())
    }
}
