//! Keyed session windows. Pipeline position: inside [`crate::window_state::KeyedWindows`]
//! (window operator, batch `weir features`).
//!
//! Rules (all times event time, per key; `gap` and `max_length` from the [`WindowSpec`]):
//! - An event at `ts` spans `[ts, ts + gap)`. A session spans `[first ts, last ts + gap)`.
//!   An event *touches* a session when the two spans overlap or meet (`start <= ts + gap`
//!   and `ts <= end`): events at most `gap` apart belong together, as windows that touch
//!   merge in Flink, Kafka Streams and Bytewax.
//! - If the union of the event and every session it touches is at most `max_length` long,
//!   those sessions merge into one (accumulators merged in start order, then the event
//!   added). This is how an allowed-late event bridging two sessions joins them.
//! - Otherwise the event joins, alone, the touched session with the latest start that it can
//!   join without exceeding `max_length`; if there is none it starts a new session. So an event
//!   that would stretch a session past `max_length` starts a new one. For events arriving in
//!   time order this is the usual greedy split; for out-of-order events it depends on arrival
//!   order only when a `max_length` cut is involved (without cuts, sessions are a function of
//!   the set of events).
//! - A session fires when `watermark >= end`. A session changed after it fired (an
//!   allowed-late event, or a merge with another) re-emits with `revision + 1` (the maximum of
//!   the merged sessions' revisions, plus one) and its possibly new bounds, so its
//!   `window_end` may differ from the superseded row's. It is dropped once
//!   `watermark - allowed_lateness > end`: no allowed record (`ts >= watermark -
//!   allowed_lateness`) can touch it any more.
//! - Expiry (the state TTL, processing time) forgets a key's sessions but keeps each one's
//!   span and last revision ([`ForgottenSessions`]) until the same horizon passes its end.
//!   Every session that touches a forgotten one (whether or not `max_length` would have let
//!   them merge) emits above the highest revision among those it touches, so a
//!   `(key, window_end, revision)` is never emitted twice: two new sessions may each cover
//!   part of a forgotten span, and either may end where it ended.
//!
//! [`WindowSpec`]: crate::window::WindowSpec

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeSet, HashMap, HashSet};

use smallvec::SmallVec;

use crate::aggregate::Words;
use crate::feature::FeatureSet;
use crate::key_table::{key_hash, FastHash, KeyTable, Place};
use crate::record::Event;
use crate::row::FeatureRow;
use crate::session_list::SessionList;
use crate::session_timers::SessionTimers;
use crate::slot::Slot;
use crate::vocab::{EventTime, Key, Watermark};
use crate::window::WindowBounds;

/// One session of a key. Its flag `slot.dirty()`: changed since its last emission.
#[derive(Clone, Debug)]
struct Session {
    start: EventTime,
    end: EventTime,
    slot: Slot,
    /// Last revision emitted; `None` while never fired.
    emitted: Option<u32>,
}

/// A session's serialized form, with its flag last (as when the flag was a field here).
#[derive(Serialize)]
#[serde(rename = "Session")]
struct SessionOut<'a> {
    start: EventTime,
    end: EventTime,
    slot: &'a Slot,
    emitted: Option<u32>,
    dirty: bool,
}

/// A session's serialized form, read.
#[derive(Deserialize)]
#[serde(rename = "Session")]
struct SessionIn {
    start: EventTime,
    end: EventTime,
    slot: Slot,
    emitted: Option<u32>,
    dirty: bool,
}

impl Serialize for Session {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SessionOut {
            start: self.start,
            end: self.end,
            slot: &self.slot,
            emitted: self.emitted,
            dirty: self.slot.dirty(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Session {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = SessionIn::deserialize(deserializer)?;
        let mut slot = s.slot;
        slot.set_dirty(s.dirty);
        Ok(Session {
            start: s.start,
            end: s.end,
            slot,
            emitted: s.emitted,
        })
    }
}

/// A session [`SessionWindows::expire`] forgot: its span and the last revision emitted for it.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Forgotten {
    start: EventTime,
    end: EventTime,
    revision: u32,
}

/// The sessions expiry forgot that an allowed record may still touch, per key. Snapshots
/// hold them beside the rest of the window state (since `keyed_features::STATE_VERSION` 2).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ForgottenSessions {
    keys: HashMap<Key, Vec<Forgotten>, FastHash>,
    /// (end, key) of every forgotten session (sessions of a key with one end share an entry).
    ends: BTreeSet<(EventTime, Key)>,
}

impl ForgottenSessions {
    fn remember(&mut self, key: &Key, forgotten: Forgotten) {
        self.keys.entry(key.clone()).or_default().push(forgotten);
        self.ends.insert((forgotten.end, key.clone()));
    }

    /// The highest revision among `key`'s forgotten sessions that `[start, end)` touches
    /// (overlaps or meets). They stay until [`Self::drop_before`]: another session may touch
    /// them too.
    fn highest_touching(&self, key: &Key, start: EventTime, end: EventTime) -> Option<u32> {
        self.keys
            .get(key)?
            .iter()
            .filter(|f| f.start <= end && start <= f.end)
            .map(|f| f.revision)
            .max()
    }

    /// Drops the forgotten sessions ending before `horizon` (a record at `horizon` still
    /// touches one ending there); returns whether any went.
    fn drop_before(&mut self, horizon: EventTime) -> bool {
        let mut changed = false;
        while let Some((end, key)) = self.ends.first().cloned() {
            if end >= horizon {
                break;
            }
            self.ends.pop_first();
            changed = true;
            if let Some(list) = self.keys.get_mut(&key) {
                list.retain(|f| f.end >= horizon);
                if list.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
        changed
    }

    /// Whether no forgotten session is kept.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Forgotten sessions kept.
    pub fn len(&self) -> usize {
        self.keys.values().map(Vec::len).sum()
    }
}

/// A key's sessions; serialized as a sequence, like the `Vec` it replaced.
type KeySessionList = SessionList<Session>;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct KeySessions {
    /// Sorted by start. Most keys have one open session: it lives in the key's table entry
    /// (no allocation of its own; a `Vec` would allocate room for four on the first push),
    /// in the session's own size ([`SessionList`]).
    sessions: KeySessionList,
    /// The time of this key's live entry among the timers (its entries at other times are stale).
    timer: EventTime,
}

/// Sessions of every key of one session window definition.
#[derive(Clone, Debug)]
pub(crate) struct SessionWindows {
    gap: i64,
    max_length: i64,
    /// A new key is hashed and probed once.
    keys: KeyTable<KeySessions>,
    /// (time, place of a key in `keys`): look at the key when the watermark reaches the
    /// time. Entries whose time is not the key's `timer`, or whose place holds no key, are
    /// stale and skipped.
    timers: SessionTimers,
    /// Sessions expiry forgot; not in this struct's serialized form (version-1 snapshots do
    /// not have them): `KeyedFeatures::encode` writes them after it.
    forgotten: ForgottenSessions,
}

/// A session state's serialized form, borrowed for writing: the timers as `(time, key)`
/// pairs in order without repeats (the ordered set they once were; places are not kept
/// across runs), stale entries whose place holds no key left out.
#[derive(Serialize)]
#[serde(rename = "SessionWindows")]
struct SessionWindowsOut<'a> {
    gap: i64,
    max_length: i64,
    keys: &'a KeyTable<KeySessions>,
    timers: Vec<(EventTime, &'a Key)>,
}

/// A session state's serialized form, read.
#[derive(Deserialize)]
#[serde(rename = "SessionWindows")]
struct SessionWindowsIn {
    gap: i64,
    max_length: i64,
    keys: KeyTable<KeySessions>,
    timers: Vec<(EventTime, Key)>,
}

impl Serialize for SessionWindows {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut timers: Vec<(EventTime, &Key)> = self.timer_keys().collect();
        timers.sort_unstable();
        timers.dedup();
        SessionWindowsOut {
            gap: self.gap,
            max_length: self.max_length,
            keys: &self.keys,
            timers,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SessionWindows {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = SessionWindowsIn::deserialize(deserializer)?;
        let mut windows = SessionWindows {
            gap: s.gap,
            max_length: s.max_length,
            keys: s.keys,
            timers: SessionTimers::default(),
            forgotten: ForgottenSessions::default(),
        };
        for (time, key) in &s.timers {
            windows.add_timer(*time, key);
        }
        Ok(windows)
    }
}

impl SessionWindows {
    /// The timers as `(time, key)` pairs, in no order (entries whose place holds no key,
    /// stale, left out).
    fn timer_keys(&self) -> impl Iterator<Item = (EventTime, &Key)> {
        self.timers
            .iter()
            .filter_map(|(time, place)| Some((time, self.keys.key_at(place)?)))
    }

    /// Adds a timer of `key` at `time`; none for a key without sessions (its entry would be
    /// stale, skipped when it came due).
    fn add_timer(&mut self, time: EventTime, key: &Key) {
        if let Some(place) = self.keys.place(key_hash(key), key) {
            self.timers.insert(time, place);
        }
    }

    /// Drops the timers whose place holds no key (stale).
    fn drop_stale_timers(&mut self) {
        let keys = &self.keys;
        self.timers.retain(|place| keys.key_at(place).is_some());
    }
}

impl SessionWindows {
    pub fn new(gap: i64, max_length: i64) -> Self {
        SessionWindows {
            gap,
            max_length,
            keys: KeyTable::default(),
            timers: SessionTimers::default(),
            forgotten: ForgottenSessions::default(),
        }
    }

    pub fn open_slots(&self) -> usize {
        self.keys.values().map(|k| k.sessions.len()).sum()
    }

    /// Merges each key's sessions that touch (one ends where the next starts), as
    /// [`SessionWindows::apply`] would have, where the union stays within `max_length`:
    /// state written while touching sessions stayed apart (window state format 3 and older)
    /// then follows the current rule. A merged session changed, so it emits as a revision of
    /// the ones it joins (like an event bridging them). Returns whether any merged.
    pub(crate) fn merge_touching(&mut self, features: &FeatureSet) -> bool {
        let mut merged = false;
        for state in self.keys.values_mut() {
            let sessions = &mut state.sessions;
            let mut i = 0;
            while i + 1 < sessions.len() {
                let (a, b) = (&sessions[i], &sessions[i + 1]);
                let union = (a.start.min(b.start), a.end.max(b.end));
                if b.start <= a.end && union.1.saturating_sub(union.0) <= self.max_length {
                    let next = sessions.remove(i + 1);
                    let into = &mut sessions[i];
                    into.slot.absorb(features, &next.slot);
                    into.emitted = into.emitted.max(next.emitted);
                    (into.start, into.end) = union;
                    into.slot.set_dirty(true);
                    merged = true;
                } else {
                    i += 1;
                }
            }
        }
        merged
    }

    /// Applies one record (no allocation when it extends or lands in an existing session).
    #[inline]
    pub fn apply(&mut self, features: &FeatureSet, event: &Event, seq: u64) {
        let (lo, hi) = (event.ts, event.ts.saturating_add(self.gap));
        let (place, state, _) =
            self.keys
                .find_or_insert_with(key_hash(&event.key), &event.key, || KeySessions {
                    sessions: KeySessionList::default(),
                    timer: EventTime::MAX,
                });
        let sessions = &mut state.sessions;
        let touched: SmallVec<[usize; 4]> = (0..sessions.len())
            .filter(|&i| sessions[i].start <= hi && lo <= sessions[i].end)
            .collect();
        let union = touched.iter().fold((lo, hi), |(s, e), &i| {
            (s.min(sessions[i].start), e.max(sessions[i].end))
        });
        let max_length = self.max_length;
        let fits = |s: EventTime, e: EventTime| e.saturating_sub(s) <= max_length;
        let target = if let (Some(&first), true) = (touched.first(), fits(union.0, union.1)) {
            // Merge every touched session into the first, in start order.
            for &i in &touched[1..] {
                let (head, tail) = sessions.split_at_mut(i);
                head[first].slot.absorb(features, &tail[0].slot);
                head[first].emitted = head[first].emitted.max(tail[0].emitted);
            }
            for &i in touched[1..].iter().rev() {
                sessions.remove(i);
            }
            let into = &mut sessions[first];
            (into.start, into.end) = union;
            into.slot.add(features, event, seq);
            first
        } else if let Some(&i) = touched
            .iter()
            .rev()
            .find(|&&i| fits(sessions[i].start.min(lo), sessions[i].end.max(hi)))
        {
            let s = &mut sessions[i];
            (s.start, s.end) = (s.start.min(lo), s.end.max(hi));
            s.slot.add(features, event, seq);
            i
        } else {
            let at = sessions.partition_point(|s| s.start <= lo);
            sessions.insert(
                at,
                Session {
                    start: lo,
                    end: hi,
                    slot: Slot::new(features, event, seq),
                    emitted: None,
                },
            );
            at
        };
        let session = &mut sessions[target];
        session.slot.set_dirty(true);
        if !self.forgotten.is_empty() {
            let touched = self
                .forgotten
                .highest_touching(&event.key, session.start, session.end);
            session.emitted = session.emitted.max(touched);
        }
        if session.end < state.timer {
            state.timer = session.end;
            self.timers.insert(session.end, place);
        }
    }

    /// Returns whether the state changed (any timer came due).
    pub fn fire(
        &mut self,
        features: &FeatureSet,
        watermark: Watermark,
        allowed_lateness: i64,
        rows: &mut Vec<FeatureRow>,
    ) -> bool {
        let horizon = watermark.0.saturating_sub(allowed_lateness);
        let first_row = rows.len();
        let mut changed = self.forgotten.drop_before(horizon);
        let mut due: Vec<Place> = Vec::new();
        while let Some(time) = self.timers.first_time().filter(|&t| t <= watermark.0) {
            changed = true;
            // This time's keys in key order, the order their rows leave in (a place holding
            // no key, a stale entry, is skipped).
            due.clear();
            while let Some(place) = self.timers.pop_at(time) {
                due.push(place);
            }
            if due.len() > 1 {
                let keys = &self.keys;
                due.sort_unstable_by(|a, b| (keys.key_at(*a), a).cmp(&(keys.key_at(*b), b)));
                due.dedup();
            }
            for &place in &due {
                self.fire_key(features, (time, place), watermark, allowed_lateness, rows);
            }
        }
        sort_by_end_and_key(&mut rows[first_row..]);
        changed
    }

    /// Fires the sessions of the key at `place` that end by `time` if its timer is at `time`
    /// (else the entry is stale), then sets the key's next timer or drops the key.
    fn fire_key(
        &mut self,
        features: &FeatureSet,
        (time, place): (EventTime, Place),
        watermark: Watermark,
        allowed_lateness: i64,
        rows: &mut Vec<FeatureRow>,
    ) {
        let horizon = watermark.0.saturating_sub(allowed_lateness);
        let Some((key, state)) = self
            .keys
            .entry_at_mut(place)
            .filter(|(_, state)| state.timer == time)
        else {
            return;
        };
        // Only the sessions ending by this timer's time: a key's later ones are due at
        // their own ends, so the rows leave in (end, key) order as the timers do.
        for s in state.sessions.iter_mut() {
            if s.end <= time && s.slot.dirty() {
                let revision = s.emitted.map_or(0, |r| r + 1);
                s.emitted = Some(revision);
                s.slot.set_dirty(false);
                let bounds = WindowBounds {
                    start: s.start,
                    end: s.end,
                };
                s.slot
                    .as_ref()
                    .push_row(features, key, bounds, revision, false, rows);
            }
        }
        // Dirty sessions stay: those also due fire when their own timer comes, in this call.
        state
            .sessions
            .retain(|s| s.end >= horizon || s.slot.dirty());
        let due_later = state
            .sessions
            .iter()
            .any(|s| s.slot.dirty() && s.end <= watermark.0);
        // Next look: when a session closes, or when a fired one can be dropped (once the
        // horizon is past its end).
        let next = state.sessions.iter().map(|s| {
            if s.slot.dirty() {
                s.end
            } else {
                s.end.saturating_add(allowed_lateness).saturating_add(1)
            }
        });
        match next.min() {
            // (`next <= watermark` with nothing due later only when times saturate at the
            // end of time.)
            Some(next) if next > watermark.0 || due_later => {
                state.timer = next;
                self.timers.insert(next, place);
            }
            _ => {
                self.keys.remove_at(place);
            }
        }
    }

    /// Force-closes every session of `keys` (emitting those not yet emitted or changed since,
    /// marked `closed_by_timeout`) and forgets the keys, remembering each session's span and
    /// last revision (see the module rules).
    pub fn expire(
        &mut self,
        features: &FeatureSet,
        keys: &HashSet<Key, FastHash>,
        rows: &mut Vec<FeatureRow>,
    ) {
        let mut expired: Vec<&Key> = keys.iter().collect();
        expired.sort_unstable();
        for key in expired {
            let Some(state) = self.keys.remove(key) else {
                continue;
            };
            for s in &state.sessions {
                let revision = if s.slot.dirty() {
                    let revision = s.emitted.map_or(0, |r| r + 1);
                    let bounds = WindowBounds {
                        start: s.start,
                        end: s.end,
                    };
                    s.slot
                        .as_ref()
                        .push_row(features, key, bounds, revision, true, rows);
                    revision
                } else {
                    // Not dirty: it fired and has not changed since.
                    s.emitted.unwrap_or_default()
                };
                let forgotten = Forgotten {
                    start: s.start,
                    end: s.end,
                    revision,
                };
                self.forgotten.remember(key, forgotten);
            }
        }
        self.drop_stale_timers();
    }
}

impl SessionWindows {
    /// Keeps only the keys `keep` accepts (restore at a new parallelism).
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        self.keys.retain(|k, _| keep(k));
        self.drop_stale_timers();
        self.forgotten.keys.retain(|k, _| keep(k));
        self.forgotten.ends.retain(|(_, k)| keep(k));
    }

    /// Replaces every session's words with `convert`'s of them (state decoded from an older
    /// snapshot layout); `None` when `convert` refuses a session's words.
    pub fn convert_words(&mut self, convert: &dyn Fn(&[u64]) -> Option<Words>) -> Option<()> {
        for state in self.keys.values_mut() {
            for session in state.sessions.iter_mut() {
                session.slot.convert_words(convert)?;
            }
        }
        Some(())
    }

    /// Adds the keys of `other` (disjoint from ours) to this state.
    pub fn absorb(&mut self, other: SessionWindows) {
        // Timers hold places: `other`'s keys take new ones here.
        let timers: Vec<(EventTime, Key)> = other
            .timer_keys()
            .map(|(time, key)| (time, key.clone()))
            .collect();
        self.keys.extend(other.keys);
        for (time, key) in &timers {
            self.add_timer(*time, key);
        }
        self.forgotten.keys.extend(other.forgotten.keys);
        self.forgotten.ends.extend(other.forgotten.ends);
    }

    /// The sessions expiry forgot (written beside the snapshot, see the field).
    pub fn forgotten(&self) -> &ForgottenSessions {
        &self.forgotten
    }

    /// Puts back the forgotten sessions of a snapshot.
    pub fn restore_forgotten(&mut self, forgotten: ForgottenSessions) {
        self.forgotten = forgotten;
    }
}

/// Puts a firing's rows in emission order, earliest end first, then by key. They are taken
/// from the timers in `(time, key)` order, each timer firing only the sessions ending by its
/// time, which is that order: the rows are checked, and sorted only if a session's end were
/// ever below its key's timer (a row is ~180 bytes to move). No two rows share an end and a
/// key (a key's sessions are disjoint), so the order is total.
fn sort_by_end_and_key(rows: &mut [FeatureRow]) {
    fn order(row: &FeatureRow) -> (EventTime, &str) {
        (row.window_end, row.key.as_str())
    }
    if !rows.is_sorted_by(|a, b| order(a) <= order(b)) {
        rows.sort_unstable_by(|a, b| order(a).cmp(&order(b)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;
    use crate::test_fixtures::{count_feature, event};

    /// A key's one session costs the session's size in its list ([`SessionList`]; run M).
    #[test]
    fn a_key_with_one_session_holds_just_the_session() {
        assert_eq!(size_of::<KeySessionList>(), size_of::<Session>());
    }

    fn rows(windows: &mut SessionWindows, features: &FeatureSet) -> Vec<(i64, i64, u32, u64)> {
        let mut out = Vec::new();
        windows.fire(features, Watermark::MAX, 0, &mut out);
        out.iter()
            .map(|r| (r.window_start, r.window_end, r.revision, r.records))
            .collect()
    }

    #[test]
    fn events_exactly_gap_apart_are_one_session() -> Result<()> {
        let features = count_feature()?;
        let mut windows = SessionWindows::new(10, 100);
        // 10 is `gap` after 0; 20 comes last and is `gap` from both 10 and 30, so it bridges
        // them; 41 is more than `gap` after 30: a session of its own.
        for (seq, ts) in [0, 10, 30, 41, 20].into_iter().enumerate() {
            windows.apply(&features, &event("k", ts), seq as u64);
        }
        assert_eq!(
            rows(&mut windows, &features),
            [(0, 40, 0, 4), (41, 51, 0, 1)]
        );
        Ok(())
    }

    /// State written while touching sessions stayed apart (format 3 and older) is merged into
    /// what the current rule makes of the same events, as a revision of both.
    #[test]
    fn touching_sessions_of_old_state_merge_within_max_length() -> Result<()> {
        let features = count_feature()?;
        let mut windows = SessionWindows::new(10, 25);
        windows.apply(&features, &event("k", 0), 0);
        // The old rule's split of 0, 10 and 20: three sessions that touch.
        let key = Key::from("k");
        let place = windows.keys.place(key_hash(&key), &key);
        let state = windows.keys.at_mut(place.expect("k has sessions"));
        state.sessions = [(0, 10), (10, 20), (20, 30)]
            .into_iter()
            .enumerate()
            .map(|(seq, (start, end))| Session {
                start,
                end,
                slot: Slot::new(&features, &event("k", start), seq as u64),
                emitted: Some(0),
            })
            .collect();
        assert!(windows.merge_touching(&features));
        // [0, 20) fits max_length 25; adding [20, 30) would make 30.
        let state = windows.keys.get_hashed(key_hash(&key), &key);
        let spans: Vec<_> = state
            .into_iter()
            .flat_map(|state| &state.sessions)
            .map(|s| (s.start, s.end, s.slot.dirty(), s.emitted))
            .collect();
        assert_eq!(spans, [(0, 20, true, Some(0)), (20, 30, false, Some(0))]);
        assert!(!windows.merge_touching(&features), "nothing left to merge");
        // The merged session emits as revision 1 of what it joins; the untouched one not at all.
        assert_eq!(rows(&mut windows, &features), [(0, 20, 1, 2)]);
        Ok(())
    }

    /// A watermark past several sessions of a key fires each at its own timer: the rows leave
    /// in (end, key) order, and the later sessions are emitted, not dropped as past the
    /// horizon after the key's first one fired.
    #[test]
    fn a_watermark_jump_fires_every_due_session_in_end_then_key_order() -> Result<()> {
        let features = count_feature()?;
        let mut windows = SessionWindows::new(10, 100);
        for (seq, (key, ts)) in [("a", 0), ("a", 100), ("a", 200), ("b", 50), ("b", 100)]
            .into_iter()
            .enumerate()
        {
            windows.apply(&features, &event(key, ts), seq as u64);
        }
        let mut out = Vec::new();
        windows.fire(&features, Watermark(1_000), 0, &mut out);
        let fired: Vec<_> = out
            .iter()
            .map(|r| (r.window_end, r.key.as_str(), r.records))
            .collect();
        assert_eq!(
            fired,
            [
                (10, "a", 1),
                (60, "b", 1),
                (110, "a", 1),
                (110, "b", 1),
                (210, "a", 1)
            ]
        );
        assert_eq!(windows.open_slots(), 0, "every session is past the horizon");
        assert!(windows.timers.is_empty());
        Ok(())
    }

    /// Timers hold places in memory but serialize as the ordered `(time, key)` set they were
    /// (a key's stale entry included, as before); the state read back fires the same rows.
    #[test]
    fn timers_serialize_as_time_key_pairs_and_restore_to_the_same_rows() -> Result<()> {
        let features = count_feature()?;
        let mut windows = SessionWindows::new(10, 100);
        let events = [("c", 0), ("b", 0), ("a", 5), ("c", 40), ("d", 40)];
        for (seq, (key, ts)) in events.into_iter().enumerate() {
            windows.apply(&features, &event(key, ts), seq as u64);
        }
        // a and b close and leave (their places free); c keeps its later session.
        windows.fire(&features, Watermark(20), 0, &mut Vec::new());
        // e takes a freed place; d's earlier session leaves its entry at 50 stale.
        windows.apply(&features, &event("e", 45), 5);
        windows.apply(&features, &event("d", 25), 6);
        let timers: BTreeSet<(EventTime, Key)> = [(35, "d"), (50, "c"), (50, "d"), (55, "e")]
            .into_iter()
            .map(|(time, key)| (time, Key::from(key)))
            .collect();
        let bytes = bincode::serialize(&windows).map_err(|e| {
            crate::error::FeatureError::Window(format!("cannot encode sessions: {e}"))
        })?;
        let expected = bincode::serialize(&(10_i64, 100_i64, &windows.keys, &timers));
        assert_eq!(Some(&bytes), expected.as_ref().ok());
        let mut restored: SessionWindows = bincode::deserialize(&bytes).map_err(|e| {
            crate::error::FeatureError::Window(format!("cannot decode sessions: {e}"))
        })?;
        let fire = |w: &mut SessionWindows| {
            let mut out = Vec::new();
            w.fire(&features, Watermark::MAX, 0, &mut out);
            out.iter()
                .map(|r| (r.key.clone(), r.window_start, r.window_end, r.records))
                .collect::<Vec<_>>()
        };
        let rows = fire(&mut windows);
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(fire(&mut restored), rows);
        Ok(())
    }
}
