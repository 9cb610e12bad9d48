//! Per-event trailing-range features (Flink `OVER (ORDER BY ts RANGE BETWEEN r PRECEDING AND
//! CURRENT ROW)`), the fraud-scoring pattern: every event emits one row whose features
//! aggregate the key's events with event time in `(ts - range, ts]` — events that arrive later
//! but lie in that range included — once the watermark passes the event's time.
//!
//! State per key: the events of the last `range` (plus allowed lateness), ordered by
//! (event time, arrival). A row's bounds are `[ts - range + 1, ts + 1)` in milliseconds and its
//! first/last positions are the triggering event's. Rows are not revised: an allowed-late event
//! gets its own row but does not revise rows of later events already emitted.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::feature::FeatureSet;
use crate::key_table::FastHash;
use crate::record::{Event, Values};
use crate::row::{FeatureRow, RowValues};
use crate::vocab::{EventTime, Key, KeyGroup, SourcePosition, Watermark};

/// Buffered events of one key, by (event time, arrival sequence); `true` = row not emitted yet.
type Buffer = BTreeMap<(EventTime, u64), (BufferedEvent, bool)>;

/// A buffered [`Event`]. Snapshots hold it in the layout of an `Event` without its ingest
/// time, which they do not keep (an event restored from one was read by an earlier run: 0,
/// unknown), so the window-state format is unchanged.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BufferedEvent {
    /// Kept for the snapshot layout (the buffer's key says the same).
    key: Key,
    key_group: KeyGroup,
    ts: EventTime,
    values: Values,
    position: SourcePosition,
    #[serde(skip)]
    ingested_ms: u64,
}

impl From<&Event> for BufferedEvent {
    fn from(event: &Event) -> Self {
        BufferedEvent {
            key: event.key.clone(),
            key_group: event.key_group,
            ts: event.ts,
            values: event.values.clone(),
            position: event.position,
            ingested_ms: event.ingested_ms,
        }
    }
}

/// Trailing-range state of all keys of one operator instance.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct OverRange {
    range: i64,
    keys: HashMap<Key, Buffer, FastHash>,
    pending: usize,
}

impl OverRange {
    /// Empty state for a trailing range of `range` ms (`range > 0`).
    pub fn new(range: i64) -> Self {
        OverRange {
            range: range.max(1),
            keys: HashMap::default(),
            pending: 0,
        }
    }

    /// Buffered events.
    pub fn open_slots(&self) -> usize {
        self.keys.values().map(BTreeMap::len).sum()
    }

    /// Buffers one event; its row is emitted when the watermark passes its time.
    pub fn apply(&mut self, event: &Event, seq: u64) {
        let buffer = match self.keys.get_mut(&event.key) {
            Some(buffer) => buffer,
            None => self.keys.entry(event.key.clone()).or_default(),
        };
        buffer.insert((event.ts, seq), (BufferedEvent::from(event), true));
        self.pending += 1;
    }

    /// Emits the row of every pending event with `ts <= watermark` (by key, then time), then
    /// drops events no later row can include (`ts <= watermark - lateness - range`). Returns
    /// whether the state changed.
    pub fn fire(
        &mut self,
        features: &FeatureSet,
        watermark: Watermark,
        lateness: i64,
        rows: &mut Vec<FeatureRow>,
    ) -> bool {
        let mut changed = false;
        if self.pending > 0 {
            let mut keys: Vec<&Key> = self.keys.keys().collect();
            keys.sort_unstable();
            let mut due: Vec<(Key, EventTime, u64)> = Vec::new();
            for key in keys {
                let buffer = &self.keys[key];
                let ready = buffer
                    .range(..=(watermark.0, u64::MAX))
                    .filter(|(_, (_, pending))| *pending);
                due.extend(ready.map(|(&(ts, seq), _)| (key.clone(), ts, seq)));
            }
            changed = !due.is_empty();
            for (key, ts, seq) in due {
                self.emit_row(features, &key, ts, seq, false, rows);
            }
        }
        let horizon = watermark
            .0
            .saturating_sub(lateness)
            .saturating_sub(self.range);
        for buffer in self.keys.values_mut() {
            while let Some(entry) = buffer.first_entry() {
                if entry.key().0 > horizon || entry.get().1 {
                    break;
                }
                entry.remove();
                changed = true;
            }
        }
        self.keys.retain(|_, b| !b.is_empty());
        changed
    }

    /// Emits the rows of every pending event of `keys` now (closed by timeout) and drops them.
    pub fn expire(
        &mut self,
        features: &FeatureSet,
        keys: &HashSet<Key, FastHash>,
        rows: &mut Vec<FeatureRow>,
    ) {
        let mut sorted: Vec<&Key> = keys.iter().filter(|k| self.keys.contains_key(*k)).collect();
        sorted.sort_unstable();
        let mut due: Vec<(Key, EventTime, u64)> = Vec::new();
        for key in sorted {
            let buffer = &self.keys[key];
            due.extend(
                buffer
                    .iter()
                    .filter(|(_, (_, p))| *p)
                    .map(|(&(ts, seq), _)| (key.clone(), ts, seq)),
            );
        }
        for (key, ts, seq) in due {
            self.emit_row(features, &key, ts, seq, true, rows);
        }
        self.keys.retain(|k, _| !keys.contains(k));
    }

    fn emit_row(
        &mut self,
        features: &FeatureSet,
        key: &Key,
        ts: EventTime,
        seq: u64,
        timeout: bool,
        rows: &mut Vec<FeatureRow>,
    ) {
        let Some(buffer) = self.keys.get_mut(key) else {
            return;
        };
        let mut accs = features.empty();
        let from = ts.saturating_sub(self.range).saturating_add(1);
        for (_, (event, _)) in buffer.range((from, 0)..=(ts, u64::MAX)) {
            features.add(&mut accs, &event.values, event.ts);
        }
        let Some((event, pending)) = buffer.get_mut(&(ts, seq)) else {
            return;
        };
        *pending = false;
        self.pending = self.pending.saturating_sub(1);
        let mut values = RowValues::new();
        features.values(accs.view(), &mut values);
        rows.push(FeatureRow {
            key: key.clone(),
            key_group: event.key_group,
            window_start: from,
            window_end: ts.saturating_add(1),
            revision: 0,
            values,
            records: accs.records,
            first: event.position,
            last: event.position,
            fired_at_ns: 0,
            closed_by_timeout: timeout,
            ingested_at_ms: event.ingested_ms,
        });
    }
}

impl OverRange {
    /// Keeps only the keys `keep` accepts (restore at a new parallelism).
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        self.keys.retain(|k, _| keep(k));
        self.pending = self
            .keys
            .values()
            .map(|buffer| buffer.values().filter(|(_, pending)| *pending).count())
            .sum();
    }

    /// Adds the keys of `other` (disjoint from ours) to this state.
    pub fn absorb(&mut self, other: OverRange) {
        self.pending += other.pending;
        self.keys.extend(other.keys);
    }
}
