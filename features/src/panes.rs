//! Keyed state of aligned (tumbling and hopping) windows, kept as panes of
//! `gcd(size, slide)`. Pipeline position: inside [`crate::window_state::KeyedWindows`], i.e.
//! inside the window operator and the batch `weir features` command.
//!
//! - `apply` folds a record into the one pane its time falls in (no allocation when the
//!   (pane, key) exists).
//! - `fire(wm)` emits every window with `end <= wm` that has records of a key, merging its
//!   panes; a pane updated after one of its windows fired (an allowed-late record) makes those
//!   windows re-emit with `revision + 1`, same `(key, window_end)`.
//! - A pane is dropped once `wm - allowed_lateness >= end of the last window containing it`:
//!   no record can reach it any more, and no window containing it can fire or re-fire.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::aggregate::Words;
use crate::feature::FeatureSet;
use crate::key_table::{key_hash, same_key, FastHash};
use crate::pane_table::{PaneKeys, PaneMaps};
use crate::record::Event;
use crate::row::FeatureRow;
use crate::slot::{Slot, SlotMeta, SlotMut, SlotRef};
use crate::vocab::{EventTime, Key, Watermark};
use crate::window::{Aligned, WindowBounds};

/// Panes of every key of one aligned window definition.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PaneWindows {
    geom: Aligned,
    /// Pane start -> key -> pane.
    #[serde(with = "crate::pane_table")]
    panes: PaneMaps,
    /// Window end -> key -> last revision emitted, for windows that may still re-fire.
    emitted: BTreeMap<EventTime, HashMap<Key, u32, FastHash>>,
    /// Every window with `end <= fired_end` has been emitted (when it had records).
    fired_end: Option<EventTime>,
    /// Smallest start of a dirty pane.
    dirty_from: Option<EventTime>,
    /// The emptied map of the last pane dropped, for the next pane to open: a stream in time
    /// order then reuses one table's memory instead of allocating (and the kernel zeroing)
    /// a new one per pane. Not persisted.
    #[serde(skip)]
    spare: Option<PaneKeys>,
    /// The last multi-pane window's merged slot, whose memory the next one reuses. Not
    /// persisted.
    #[serde(skip)]
    merged: Option<Slot>,
}

/// Opens the (empty) pane at `start`, sized for as many keys as the open pane before it
/// holds, so a stream in time order does not rehash each pane as it fills; nor do two
/// sources reading two time regions of a file, whose earlier region opens its panes behind
/// the latest one. It takes the `spare` map of a dropped pane when there is one.
#[cold]
fn open_pane<'a>(
    panes: &'a mut PaneMaps,
    spare: &mut Option<PaneKeys>,
    start: EventTime,
) -> &'a mut PaneKeys {
    let capacity = panes
        .range(..start)
        .next_back()
        .map_or(0, |(_, keys)| keys.len());
    let mut keys = spare.take().unwrap_or_default();
    keys.reserve(capacity);
    panes.entry(start).or_insert(keys)
}

/// The bounds of the window of `geom` ending at `end`.
fn window_bounds(geom: Aligned, end: EventTime) -> WindowBounds {
    WindowBounds {
        start: end - geom.size,
        end,
    }
}

/// `key`'s panes of the window `bounds`, merged in pane order ([`merge_slots`]). `hash`: the
/// key's hash in the pane tables ([`FastHash`]), computed once for all of them.
fn merged_slot<'a>(
    panes: &'a PaneMaps,
    features: &FeatureSet,
    (key, hash): (&Key, u64),
    bounds: WindowBounds,
    merged: &'a mut Option<Slot>,
) -> Option<SlotRef<'a>> {
    let slots = panes
        .range(bounds.start..bounds.end)
        .filter_map(|(_, keys)| keys.get_hashed_words(hash, key))
        .map(|(meta, words)| SlotRef { words, meta });
    merge_slots(features, slots, merged)
}

/// One window's slots (its panes', in pane order) merged into `merged` (reused from window
/// to window: no allocation per row); a window of one pane (every tumbling window, and most
/// hopping windows of a sparse key) is that pane's slot, borrowed, not a copy.
fn merge_slots<'a>(
    features: &FeatureSet,
    mut slots: impl Iterator<Item = SlotRef<'a>>,
    merged: &'a mut Option<Slot>,
) -> Option<SlotRef<'a>> {
    let first = slots.next()?;
    let Some(second) = slots.next() else {
        return Some(first);
    };
    let slot = match merged {
        Some(slot) => {
            slot.assign(first);
            slot
        }
        None => merged.insert(Slot::from_ref(first)),
    };
    let mut into = slot.as_mut();
    into.absorb(features, second);
    slots.for_each(|s| into.absorb(features, s));
    Some(slot.as_ref())
}

/// The low bits of a key hash that the sort of one window end's entries ([`sort_end`]) holds
/// an entry's index in: windows are ordered by the hash's other 40 bits, and keys that share
/// those are kept apart as keys of one hash are ([`for_each_window`]).
const INDEX_BITS: u32 = 24;

/// The hash bits that order windows.
const ORDER_MASK: u64 = !((1 << INDEX_BITS) - 1);

/// One pane of a window of a key that a firing emits (its end, the key and the pane's slot),
/// or a window to emit again whose panes are looked up (`slot: None`: a revision). A
/// firing's entries in the order of [`for_each_window`] hold each window's panes side by side,
/// in pane order, so its row merges them without looking the key up in each pane again.
#[derive(Clone, Copy)]
struct Due<'a> {
    end: EventTime,
    /// The key's in-memory hash: rows of one end are emitted in the order of its
    /// [`ORDER_MASK`] bits, so sorting a firing's windows compares integers, not strings (keys
    /// that share those bits, in key order). The hash is unseeded, so the order is a function
    /// of the keys alone, the same in every run. It is also the key's hash in the pane
    /// tables, so looking a revision's panes up hashes the key no more.
    key_hash: u64,
    key: &'a Key,
    slot: Option<SlotRef<'a>>,
}

impl<'a> Due<'a> {
    /// The entry's window: its end and the key hash's order bits (keys that share them are
    /// told apart by [`for_each_window`]).
    fn window(&self) -> (EventTime, u64) {
        (self.end, self.key_hash & ORDER_MASK)
    }

    fn new(end: EventTime, key: &'a Key, slot: Option<SlotRef<'a>>) -> Self {
        Due {
            end,
            key_hash: key_hash(key),
            key,
            slot,
        }
    }
}

/// Puts a firing's entries in emission order and returns how many windows they hold (keys
/// that share their hash's [`ORDER_MASK`] bits count as one: a hint for the rows' room). The
/// sort compares integers only: windows by end, then by key hash (so those bits' order); it
/// is stable, so a window's entries keep the order they come in (pane order, as a firing
/// gathers them).
fn sort_windows(due: &mut [Due<'_>]) -> usize {
    due.sort_by_key(|d| (d.end, d.key_hash));
    due.chunk_by(|a, b| a.window() == b.window()).count()
}

/// [`sort_windows`] for the entries of one window end gathered pane after pane, in pane
/// order. The sort moves 8-byte words, not 48-byte entries: each word is an entry's hash
/// order bits and its index (so a window's entries stay in pane order), sorted by
/// [`sort_words`], and the entries are then copied into `sorted` in that order. More
/// entries than the index bits hold take the general sort. Returns the windows' count, as
/// [`sort_windows`] does.
fn sort_end<'a>(due: &mut Vec<Due<'a>>, words: &mut Vec<u64>, sorted: &mut Vec<Due<'a>>) -> usize {
    if due.len() >= 1 << INDEX_BITS {
        return sort_windows(due);
    }
    words.clear();
    words.extend(
        due.iter()
            .enumerate()
            .map(|(i, d)| d.key_hash & ORDER_MASK | i as u64),
    );
    sort_words(words);
    sorted.clear();
    sorted.extend(words.iter().map(|w| due[(w & !ORDER_MASK) as usize]));
    std::mem::swap(due, sorted);
    due.chunk_by(|a, b| a.window() == b.window()).count()
}

/// Sorts one end's words ([`sort_end`]): a stable radix sort by their top 16 bits (two
/// counting passes), then an insertion pass that orders each run of words sharing those bits
/// (a few words when the hash bits are uniform). Past 2^18 words the runs grow long, and the
/// general sort takes them. Keys are input, and a key set chosen to share hash bits would
/// make the insertion pass quadratic: past [`INSERTION_MOVES`] moves a word, the general
/// sort finishes the job instead.
fn sort_words(words: &mut [u64]) {
    if words.len() > 1 << 18 {
        words.sort_unstable();
        return;
    }
    radsort::sort_by_key(words, |w| (w >> 48) as u16);
    let mut budget = INSERTION_MOVES * words.len();
    for i in 1..words.len() {
        let w = words[i];
        let mut j = i;
        while j > 0 && words[j - 1] > w {
            words[j] = words[j - 1];
            j -= 1;
        }
        words[j] = w;
        budget = budget.saturating_sub(i - j);
        if budget == 0 {
            words.sort_unstable();
            return;
        }
    }
}

/// The insertion pass's moves per word, on average, before [`sort_words`] gives up on it.
const INSERTION_MOVES: usize = 8;

/// Passes each window's entries of `due` (in [`sort_windows`]' or [`sort_end`]'s order), in
/// pane order, to `window`. Keys that share their hash's order bits are put in key order first
/// (a stable sort: each key's entries stay in pane order).
fn for_each_window<'a>(due: &mut [Due<'a>], mut window: impl FnMut(&[Due<'a>])) {
    for run in due.chunk_by_mut(|a, b| a.window() == b.window()) {
        // A window's entries after its first (none for a window of one pane, every tumbling
        // window): comparing the first key with itself cost a `memcmp` call per row.
        let collision = run[1..].iter().any(|d| !same_key(d.key, run[0].key));
        if collision {
            run.sort_by(|a, b| a.key.cmp(b.key));
        }
        run.chunk_by(|a, b| !collision || same_key(a.key, b.key))
            .for_each(&mut window);
    }
}

impl PaneWindows {
    pub fn new(geom: Aligned) -> Self {
        PaneWindows {
            geom,
            panes: BTreeMap::new(),
            emitted: BTreeMap::new(),
            fired_end: None,
            dirty_from: None,
            spare: None,
            merged: None,
        }
    }

    pub fn open_slots(&self) -> usize {
        self.panes.values().map(PaneKeys::len).sum()
    }

    #[inline]
    pub fn apply(&mut self, features: &FeatureSet, event: &Event, seq: u64) {
        let start = self.geom.pane_start(event.ts);
        // Searched from the latest pane back: a record is most often in the latest pane or
        // the one before it, which the map's own search reaches only after comparing `start`
        // with every earlier pane's.
        let latest = self.panes.iter_mut().rev().find(|(s, _)| **s <= start);
        let keys = match latest {
            Some((&s, keys)) if s == start => keys,
            _ => open_pane(&mut self.panes, &mut self.spare, start),
        };
        let (meta, words, _) = keys.find_or_insert_words(
            key_hash(&event.key),
            &event.key,
            features.empty_words(),
            || SlotMeta::new(features, event, seq),
        );
        let mut slot = SlotMut { words, meta };
        slot.add(features, event, seq);
        if self
            .fired_end
            .is_some_and(|f| self.geom.first_end(start) <= f)
        {
            slot.meta.set_dirty(true);
            self.dirty_from = Some(self.dirty_from.map_or(start, |d| d.min(start)));
        }
    }

    /// The earliest window end after `after` (or overall) whose window holds a pane.
    fn next_end(&self, after: Option<EventTime>) -> Option<EventTime> {
        let lower = after.map_or(EventTime::MIN, |a| self.geom.next_end_after(a));
        let (&start, _) = self
            .panes
            .range(lower.saturating_sub(self.geom.size)..)
            .next()?;
        Some(lower.max(self.geom.first_end(start)))
    }

    /// Window ends of the pane at `start`, earliest first.
    fn ends_of(&self, start: EventTime) -> impl Iterator<Item = EventTime> {
        let (first, last, slide) = (
            self.geom.first_end(start),
            self.geom.last_end(start),
            self.geom.slide,
        );
        (0..)
            .map(move |i: i64| first.saturating_add(i.saturating_mul(slide)))
            .take_while(move |&e| e <= last)
    }

    /// Returns whether the state changed (a window emitted, a dirty pane cleared, state
    /// dropped): a shard whose state did not change need not be snapshotted again.
    pub fn fire(
        &mut self,
        features: &FeatureSet,
        watermark: Watermark,
        allowed_lateness: i64,
        rows: &mut Vec<FeatureRow>,
    ) -> bool {
        let mut changed = self.dirty_from.is_some();
        // Re-emissions: windows already fired whose panes changed (allowed-late records only).
        let mut redo: Vec<(EventTime, Key)> = Vec::new();
        if let (Some(from), Some(fired)) = (self.dirty_from.take(), self.fired_end) {
            for (&start, keys) in self.panes.range_mut(from..fired) {
                let ends = {
                    let (first, slide) = (self.geom.first_end(start), self.geom.slide);
                    let last = self.geom.last_end(start).min(fired);
                    (0..)
                        .map(move |i: i64| first.saturating_add(i.saturating_mul(slide)))
                        .take_while(move |&e| e <= last)
                };
                for (key, pane) in keys.iter_mut().filter(|(_, p)| p.dirty()) {
                    pane.set_dirty(false);
                    redo.extend(ends.clone().map(|e| (e, key.clone())));
                }
            }
        }
        // Windows the watermark closed since the last fire.
        let mut closed = Vec::new();
        while let Some(end) = self.next_end(self.fired_end).filter(|&e| e <= watermark.0) {
            closed.push(end);
            self.fired_end = Some(end);
            changed = true;
        }
        // Borrowed keys in emission order: no copy of a key per row until its row is built.
        let (panes, emitted, merged, geom) =
            (&self.panes, &mut self.emitted, &mut self.merged, self.geom);
        // A window ending at or before the horizon cannot re-fire: its revision is not kept
        // (`drop_through` would drop it below).
        let horizon = watermark.0.saturating_sub(allowed_lateness);
        // Emits the `windows` windows of entries in emission order.
        let mut emit = |due: &mut Vec<Due<'_>>, windows: usize| {
            rows.reserve(windows);
            for_each_window(due, |window| {
                let Some(&Due {
                    end, key, key_hash, ..
                }) = window.first()
                else {
                    return;
                };
                let bounds = window_bounds(geom, end);
                // A revision (no slot) merges whatever its panes hold now; windows the
                // watermark closed carry their panes' slots (a revision and a closed window
                // never share an end: revisions end at or before the last firing, closed
                // windows after it). A window of one closed pane's entry takes its slot
                // straight from it: through `merge_slots`' iterator the slot was stored in two
                // parts and read back whole, a stall (BENCHMARKS.md, F, fix 79).
                let slot = match window {
                    [Due {
                        slot: Some(only), ..
                    }] => Some(*only),
                    _ if window.iter().any(|d| d.slot.is_none()) => {
                        merged_slot(panes, features, (key, key_hash), bounds, merged)
                    }
                    _ => merge_slots(features, window.iter().filter_map(|d| d.slot), merged),
                };
                if let Some(slot) = slot {
                    let revision = if end <= horizon {
                        emitted
                            .get(&end)
                            .and_then(|r| r.get(key))
                            .map_or(0, |r| r + 1)
                    } else {
                        let revisions = emitted.entry(end).or_default();
                        let revision = revisions.get(key).map_or(0, |r| r + 1);
                        revisions.insert(key.clone(), revision);
                        revision
                    };
                    slot.push_row(features, key, bounds, revision, false, rows);
                }
            });
        };
        let mut due: Vec<Due<'_>> = redo
            .iter()
            .map(|(end, key)| Due::new(*end, key, None))
            .collect();
        let windows = sort_windows(&mut due);
        emit(&mut due, windows);
        // Then each closed window end in turn (rows come end by end, so this is their order
        // too), with every pane of its windows and the pane's slot: a window's row merges its
        // entries' slots instead of looking its key up in each of its panes. One end at a
        // time, the entries of a watermark jump over many ends are not all held at once.
        let (mut words, mut sorted) = (Vec::new(), Vec::new());
        for &end in &closed {
            due.clear();
            for keys in panes.range(end - geom.size..end).map(|(_, keys)| keys) {
                due.extend(
                    keys.iter_words().map(|(key, meta, words)| {
                        Due::new(end, key, Some(SlotRef { words, meta }))
                    }),
                );
            }
            let windows = sort_end(&mut due, &mut words, &mut sorted);
            emit(&mut due, windows);
        }
        let dropped = self.drop_through(horizon);
        changed || dropped
    }

    /// Drops windows and panes that no record can reach any more (`end <= horizon`); returns
    /// whether anything was dropped.
    fn drop_through(&mut self, horizon: EventTime) -> bool {
        let mut dropped = false;
        while let Some(entry) = self.emitted.first_entry() {
            if *entry.key() > horizon {
                break;
            }
            entry.remove();
            dropped = true;
        }
        while let Some(entry) = self.panes.first_entry() {
            if self.geom.last_end(*entry.key()) > horizon {
                break;
            }
            let mut keys = entry.remove();
            keys.clear();
            self.spare = Some(keys);
            dropped = true;
        }
        dropped
    }

    /// Force-closes every window of `keys`: emits each window not yet emitted or changed since
    /// (marked `closed_by_timeout`), then forgets the keys' state, keeping only the revision
    /// numbers of windows that may still change.
    pub fn expire(
        &mut self,
        features: &FeatureSet,
        keys: &HashSet<Key, FastHash>,
        rows: &mut Vec<FeatureRow>,
    ) {
        let mut due: Vec<(EventTime, Key)> = Vec::new();
        let fired = self.fired_end.unwrap_or(EventTime::MIN);
        for (&start, panes) in &self.panes {
            for (key, pane) in panes.iter().filter(|(k, _)| keys.contains(*k)) {
                let ends = self.ends_of(start).filter(|&e| e > fired || pane.dirty());
                due.extend(ends.map(|e| (e, key.clone())));
            }
        }
        due.sort_unstable();
        due.dedup();
        let mut revisions = Vec::new();
        for (end, key) in due {
            let bounds = window_bounds(self.geom, end);
            let keyed = (&key, key_hash(&key));
            if let Some(slot) = merged_slot(&self.panes, features, keyed, bounds, &mut self.merged)
            {
                let revision = self
                    .emitted
                    .get(&end)
                    .and_then(|r| r.get(&key))
                    .map_or(0, |r| r + 1);
                slot.push_row(features, &key, bounds, revision, true, rows);
                revisions.push((end, key, revision));
            }
        }
        for map in self.panes.values_mut() {
            map.retain(|k, _| !keys.contains(k));
        }
        self.panes.retain(|_, m| !m.is_empty());
        // The keys' revision numbers stay (one number per window) until the windows can no
        // longer change: a record after the expiry re-opens its window, and that window's
        // next row must be a new revision of the same score id, not revision 0 again.
        for (end, key, revision) in revisions {
            self.emitted.entry(end).or_default().insert(key, revision);
        }
    }
}

impl PaneWindows {
    /// Keeps only the keys `keep` accepts (restore at a new parallelism).
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        for keys in self.panes.values_mut() {
            keys.retain(|k, _| keep(k));
        }
        self.panes.retain(|_, keys| !keys.is_empty());
        for keys in self.emitted.values_mut() {
            keys.retain(|k, _| keep(k));
        }
        self.emitted.retain(|_, keys| !keys.is_empty());
    }

    /// Replaces every pane's words with `convert`'s of them (state decoded from an older
    /// snapshot layout), `width` words each; `None` when `convert` refuses a pane's words.
    pub fn convert_words(
        &mut self,
        width: usize,
        convert: &dyn Fn(&[u64]) -> Option<Words>,
    ) -> Option<()> {
        for keys in self.panes.values_mut() {
            keys.convert_words(width, convert)?;
        }
        Some(())
    }

    /// Adds the keys of `other` (disjoint from ours, same window definition and watermark
    /// history) to this state.
    pub fn absorb(&mut self, other: PaneWindows) {
        for (start, keys) in other.panes {
            self.panes.entry(start).or_default().absorb_words(keys);
        }
        for (end, keys) in other.emitted {
            self.emitted.entry(end).or_default().extend(keys);
        }
        self.fired_end = self.fired_end.max(other.fired_end);
        self.dirty_from = match (self.dirty_from, other.dirty_from) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;
    use crate::test_fixtures::{count_feature, event};

    /// A firing's entry for a pane holding `slot`.
    fn entry<'a>(end: EventTime, key_hash: u64, key: &'a Key, slot: &'a Slot) -> Due<'a> {
        Due {
            end,
            key_hash,
            key,
            slot: Some(slot.as_ref()),
        }
    }

    /// A pane opened behind the latest one (a second source's records, a time region
    /// behind the other's) starts with room for the keys of the pane before it, as one
    /// opened after the latest does: it is not grown from empty by rehashing as it fills.
    #[test]
    fn a_pane_opened_behind_the_latest_is_sized_as_the_pane_before_it() -> Result<()> {
        let features = count_feature()?;
        let mut windows = PaneWindows::new(Aligned::new(60, 60));
        let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        for (seq, key) in keys.iter().enumerate() {
            windows.apply(&features, &event(key, 0), seq as u64);
        }
        windows.apply(&features, &event("late-region", 600), 1_000);
        // The pane at 60, between the two: sized for the 200 keys of the pane at 0.
        windows.apply(&features, &event("k0", 60), 1_001);
        let capacity = |w: &PaneWindows, start: i64| w.panes.get(&start).map(PaneKeys::capacity);
        assert!(
            capacity(&windows, 60) >= Some(200),
            "{:?}",
            capacity(&windows, 60)
        );
        // A pane before every open one has no pane before it to go by.
        windows.apply(&features, &event("k0", -60), 1_002);
        assert!(
            capacity(&windows, -60) < Some(200),
            "{:?}",
            capacity(&windows, -60)
        );
        Ok(())
    }

    /// `n` slots of one record each, for entries.
    fn slots(n: u64) -> Result<Vec<Slot>> {
        let features = count_feature()?;
        Ok((0..n)
            .map(|seq| Slot::new(&features, &event("k", 0), seq))
            .collect())
    }

    /// Windows in `(end, key hash, key)` order, each window's panes in the order they came
    /// (pane order, as a firing gathers them), with two keys of one hash (forced here: a real
    /// 64-bit collision is not at hand) kept apart and in key order.
    #[test]
    fn windows_come_by_end_then_hash_and_keys_of_one_hash_stay_apart() -> Result<()> {
        let slots = slots(5)?;
        let (a, b, c) = (Key::from("a"), Key::from("b"), Key::from("c"));
        let mut due = vec![
            entry(20, 7, &b, &slots[0]),
            entry(20, 7, &a, &slots[1]),
            entry(10, 9, &c, &slots[4]),
            entry(20, 7, &b, &slots[2]),
            entry(20, 7, &a, &slots[3]),
        ];
        let mut windows = Vec::new();
        // Three windows; a and b share a hash, so the hint counts two.
        assert_eq!(sort_windows(&mut due), 2);
        for_each_window(&mut due, |window| {
            let panes: Vec<*const u64> = window
                .iter()
                .filter_map(|d| d.slot.map(|s| s.words.as_ptr()))
                .collect();
            windows.push((window[0].end, window[0].key.clone(), panes));
        });
        let pane = |i: usize| slots[i].as_ref().words.as_ptr();
        assert_eq!(
            windows,
            [
                (10, c, vec![pane(4)]),
                (20, a, vec![pane(1), pane(3)]),
                (20, b, vec![pane(0), pane(2)]),
            ]
        );
        Ok(())
    }

    /// One end's entries, gathered pane after pane: windows in the order of their hashes'
    /// order bits, each window's panes in pane order, and two keys whose hashes differ only
    /// in the bits that hold the index (entries interleaved: b, a, b, a) kept apart, in key
    /// order.
    #[test]
    fn one_ends_windows_come_by_hash_order_bits_with_their_panes_in_order() -> Result<()> {
        let slots = slots(6)?;
        let (a, b, c) = (Key::from("a"), Key::from("b"), Key::from("c"));
        let shared = 5 << INDEX_BITS;
        // Panes 0, 1, 2 in turn, as the firing gathers them, all of the window ending at 60.
        let mut due = vec![
            entry(60, shared | 2, &b, &slots[0]),
            entry(60, 9 << INDEX_BITS, &c, &slots[1]),
            entry(60, shared | 1, &a, &slots[2]),
            entry(60, shared | 2, &b, &slots[3]),
            entry(60, shared | 1, &a, &slots[4]),
            entry(60, 1 << INDEX_BITS, &c, &slots[5]),
        ];
        // Counted by order bits: a and b share theirs; the two c entries differ in theirs
        // (a key has one hash; here they stand for two keys ordered apart).
        let (mut words, mut sorted) = (Vec::new(), Vec::new());
        assert_eq!(sort_end(&mut due, &mut words, &mut sorted), 3);
        let mut windows = Vec::new();
        for_each_window(&mut due, |window| {
            // Each entry as the index of its slot: slots 0-1 are pane 0's, 2-3 pane 1's, 4-5
            // pane 2's.
            let of = |d: &Due<'_>| {
                let meta = d.slot?.meta;
                slots
                    .iter()
                    .position(|s| std::ptr::eq(s.as_ref().meta, meta))
            };
            let panes: Vec<Option<usize>> = window.iter().map(of).collect();
            windows.push((window[0].key.clone(), panes));
        });
        assert_eq!(
            windows,
            [
                (c.clone(), vec![Some(5)]),
                (a, vec![Some(2), Some(4)]),
                (b, vec![Some(0), Some(3)]),
                (c, vec![Some(1)]),
            ]
        );
        Ok(())
    }

    /// The radix sort and its insertion pass order words as the general sort does: hash
    /// bits spread over all 16 top bits, sharing 256 top-16 values (runs of ~8 for the
    /// insertion pass, within its budget), past the size that takes the general sort, and all
    /// sharing one (the insertion pass gives up).
    #[test]
    fn sort_words_orders_words_as_the_general_sort_does() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(18);
        let spread = |rng: &mut StdRng, i: u64| rng.random::<u64>() & ORDER_MASK | i;
        let few_tops = |rng: &mut StdRng, i: u64| {
            let middle = ORDER_MASK & ((1 << 48) - 1);
            rng.random_range(0..256u64) << 48 | rng.random::<u64>() & middle | i
        };
        let check = |mut words: Vec<u64>| {
            let mut expected = words.clone();
            expected.sort_unstable();
            sort_words(&mut words);
            // Not `assert_eq!`: its message would print every word.
            assert!(words == expected, "{} words out of order", expected.len());
        };
        check((0..5_000).map(|i| spread(&mut rng, i)).collect());
        check((0..2_000).map(|i| few_tops(&mut rng, i)).collect());
        check((0..(1 << 18) + 1).map(|i| spread(&mut rng, i)).collect());
        // Every word shares its top 16 bits: the insertion pass gives up, the general sort
        // finishes.
        let one_top = |rng: &mut StdRng, i: u64| (7 << 48) | few_tops(rng, i) & !(0xffff << 48);
        check((0..3_000).map(|i| one_top(&mut rng, i)).collect());
    }
}
