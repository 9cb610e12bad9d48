//! Keyed window state: for every open window end, the accumulators of every key that has
//! records in it. Records are applied one at a time (no allocation unless a (key, window) is
//! new); `fire` emits every window whose end the watermark passed. The Timely window operator
//! and the batch `weir features` command both run this same code, so online and training
//! features cannot disagree.

use std::collections::{BTreeMap, HashMap};

use crate::feature::{Accumulators, FeatureSet};
use crate::record::Event;
use crate::row::FeatureRow;
use crate::vocab::{EventTime, Key, KeyGroup, SourcePosition, Watermark};
use crate::window::WindowSpec;

/// In-memory hash for keys; never persisted or routed (those use the seeded key-group hash).
type FastHash = rustc_hash::FxBuildHasher;

/// State of one (key, window).
#[derive(Clone, Debug)]
struct Slot {
    key_group: KeyGroup,
    accs: Accumulators,
    records: u64,
    first: SourcePosition,
    last: SourcePosition,
    /// Last revision emitted; `None` while the window has never fired.
    emitted: Option<u32>,
    dirty: bool,
}

/// What happened to an applied record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Folded into its window.
    Updated,
    /// Behind the watermark by more than the allowed lateness: route to the dead-letter topic.
    Late {
        /// The watermark it was late against.
        watermark: Watermark,
    },
}

/// All open windows of the keys owned by one window-operator instance.
#[derive(Clone, Debug)]
pub struct KeyedWindows {
    spec: WindowSpec,
    allowed_lateness: i64,
    windows: BTreeMap<EventTime, HashMap<Key, Slot, FastHash>>,
    scratch: Vec<f64>,
}

impl KeyedWindows {
    /// Empty state for windows of `spec`; records up to `allowed_lateness_ms` behind the
    /// watermark still update (and re-emit) their window.
    pub fn new(spec: WindowSpec, allowed_lateness_ms: i64) -> Self {
        KeyedWindows {
            spec,
            allowed_lateness: allowed_lateness_ms.max(0),
            windows: BTreeMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Number of open (key, window) slots.
    pub fn open_slots(&self) -> usize {
        self.windows.values().map(HashMap::len).sum()
    }

    /// Applies one record, given the current watermark.
    #[inline]
    pub fn apply(&mut self, features: &FeatureSet, event: &Event, watermark: Watermark) -> Applied {
        if watermark != Watermark::MIN
            && event.ts < watermark.0.saturating_sub(self.allowed_lateness)
        {
            return Applied::Late { watermark };
        }
        let bounds = self.spec.assign(event.ts);
        let keys = self.windows.entry(bounds.end).or_default();
        let slot = match keys.get_mut(&event.key) {
            Some(slot) => slot,
            None => keys.entry(event.key.clone()).or_insert_with(|| Slot {
                key_group: event.key_group,
                accs: features.empty(),
                records: 0,
                first: event.position,
                last: event.position,
                emitted: None,
                dirty: false,
            }),
        };
        features.update(&mut slot.accs, &event.values);
        slot.records += 1;
        slot.last = event.position;
        slot.dirty = true;
        Applied::Updated
    }

    /// Emits every window with `end <= watermark` that has unemitted changes, then drops the
    /// windows no record can reach any more (`end <= watermark - allowed_lateness`).
    pub fn fire(
        &mut self,
        features: &FeatureSet,
        watermark: Watermark,
        mut emit: impl FnMut(FeatureRow),
    ) {
        let size = self.spec_size();
        for (&end, keys) in self.windows.range_mut(..=watermark.0) {
            let start = end - size;
            for (key, slot) in keys.iter_mut().filter(|(_, slot)| slot.dirty) {
                let revision = slot.emitted.map_or(0, |r| r + 1);
                slot.emitted = Some(revision);
                slot.dirty = false;
                features.values(&slot.accs, &mut self.scratch);
                emit(FeatureRow {
                    key: key.clone(),
                    key_group: slot.key_group,
                    window_start: start,
                    window_end: end,
                    revision,
                    values: self.scratch.clone(),
                    records: slot.records,
                    first: slot.first,
                    last: slot.last,
                    fired_at_ns: 0,
                });
            }
        }
        let horizon = watermark.0.saturating_sub(self.allowed_lateness);
        while let Some(entry) = self.windows.first_entry() {
            if *entry.key() > horizon {
                break;
            }
            entry.remove();
        }
    }

    fn spec_size(&self) -> i64 {
        match self.spec {
            WindowSpec::Tumbling { size } => size,
        }
    }
}
