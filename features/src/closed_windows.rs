//! Closed windows kept per key for "as of" lookups. Pipeline position: inside
//! [`crate::keyed_features::KeyedFeatures`], between a window group's firings and the rows the
//! window operator emits. Two readers use it:
//! - the close trigger: secondary windows are recorded here and looked up at the primary
//!   window's end;
//! - the schedule trigger ([`crate::schedule`]): every window group is recorded here and looked
//!   up at each schedule point.
//!
//! Only windows that had records are recorded, so "no entry" means "the empty window".

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::row::FeatureRow;
use crate::snapshot_row::RowsByKey;
use crate::vocab::{EventTime, Key};
use crate::window::WindowSpec;

/// Closed windows of one window group: key → window end → the window's row.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ClosedWindows {
    #[serde(with = "crate::snapshot_row")]
    by_key: RowsByKey,
    /// Horizon of the last [`ClosedWindows::prune`] (not persisted: a restored state prunes
    /// once more).
    #[serde(skip)]
    pruned_through: Option<EventTime>,
}

impl ClosedWindows {
    /// Records a fired window (a revision replaces the earlier firing of the same window).
    pub fn record(&mut self, row: FeatureRow) {
        self.by_key
            .entry(row.key.clone())
            .or_default()
            .insert(row.window_end, row);
    }

    /// Forgets every window of `key`.
    pub fn remove_key(&mut self, key: &Key) {
        self.by_key.remove(key);
    }

    /// Every key with its closed windows by end.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &BTreeMap<EventTime, FeatureRow>)> {
        self.by_key.iter()
    }

    /// The close trigger's lookup: `key`'s latest window closed at or before `end`. For an
    /// aligned window that is exactly the window ending at the latest aligned end `<= end`
    /// (`None` when it had no records); for a session, the latest session ending at or
    /// before `end`, however old.
    pub fn latest_at_or_before(
        &self,
        spec: &WindowSpec,
        key: &Key,
        end: EventTime,
    ) -> Option<&FeatureRow> {
        let windows = self.by_key.get(key)?;
        match spec.aligned() {
            Some(aligned) => {
                let latest_end = aligned.next_end_after(end).saturating_sub(aligned.slide);
                windows.get(&latest_end)
            }
            None => windows.range(..=end).next_back().map(|(_, row)| row),
        }
    }

    /// The schedule trigger's lookup at schedule point `at`: for an aligned window, the window
    /// ending at the latest aligned end `<= at`; for a session, the latest session that ended
    /// in `(at - every, at]` (one closed during the last schedule interval).
    pub fn as_of_schedule(
        &self,
        spec: &WindowSpec,
        every: i64,
        key: &Key,
        at: EventTime,
    ) -> Option<&FeatureRow> {
        match spec.aligned() {
            Some(_) => self.latest_at_or_before(spec, key, at),
            None => self
                .by_key
                .get(key)?
                .range(at.saturating_sub(every).saturating_add(1)..=at)
                .next_back()
                .map(|(_, row)| row),
        }
    }

    /// Keeps, per key, every window ending at or after `horizon` plus (when
    /// `keep_latest_before` is set) the latest one before it; drops keys left empty. Returns
    /// whether anything was dropped. Does nothing when `horizon` did not move since the last
    /// call: a window recorded since then with an end before it (a late revision) is never
    /// looked up and goes at the next horizon, so the scan over every key runs once per
    /// horizon instead of once per tick.
    pub fn prune(&mut self, horizon: EventTime, keep_latest_before: bool) -> bool {
        if self.pruned_through == Some(horizon) {
            return false;
        }
        self.pruned_through = Some(horizon);
        let mut dropped = false;
        self.by_key.retain(|_, windows| {
            let latest_before = windows
                .range(..horizon)
                .next_back()
                .map(|(end, _)| *end)
                .filter(|_| keep_latest_before);
            let before = windows.len();
            windows.retain(|end, _| *end >= horizon || Some(*end) == latest_before);
            dropped |= windows.len() != before;
            !windows.is_empty()
        });
        dropped
    }

    /// Number of recorded windows.
    pub fn len(&self) -> usize {
        self.by_key.values().map(BTreeMap::len).sum()
    }
}

impl ClosedWindows {
    /// Keeps only the keys `keep` accepts (restore at a new parallelism).
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        self.by_key.retain(|k, _| keep(k));
    }

    /// Adds the keys of `other` (disjoint from ours) to this state.
    pub fn absorb(&mut self, other: ClosedWindows) {
        self.by_key.extend(other.by_key);
    }
}
