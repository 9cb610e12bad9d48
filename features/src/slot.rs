//! The contents of one (key, pane) or (key, session): the features' accumulators plus the
//! record count and the first/last source positions (in arrival order) that a
//! [`FeatureRow`] reports. Panes and sessions merge slots when a window fires or two sessions
//! join; merging equals aggregating the union of both inputs.

use crate::feature::{Accumulators, FeatureSet};
use crate::record::Event;
use crate::row::{FeatureRow, RowValues};
use crate::vocab::{Key, KeyGroup, SourcePosition};
use crate::window::WindowBounds;
use serde::{Deserialize, Serialize};

/// Accumulated state of one key in one pane or session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Slot {
    pub key_group: KeyGroup,
    pub accs: Accumulators,
    pub records: u64,
    /// Arrival sequence number and position of the first record.
    pub first: (u64, SourcePosition),
    /// Arrival sequence number and position of the last record.
    pub last: (u64, SourcePosition),
    /// Latest ingest time of its records ([`Event::ingested_ms`]); not in snapshots (records
    /// restored from one were read by an earlier run: 0, unknown).
    #[serde(skip)]
    pub ingested_ms: u64,
}

impl Slot {
    /// A slot holding `event` only (`seq` = its arrival number in this state).
    pub fn new(features: &FeatureSet, event: &Event, seq: u64) -> Slot {
        let mut slot = Slot {
            key_group: event.key_group,
            accs: features.empty(),
            records: 0,
            first: (seq, event.position),
            last: (seq, event.position),
            ingested_ms: 0,
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
        if seq < self.first.0 {
            self.first = (seq, event.position);
        }
        if seq >= self.last.0 {
            self.last = (seq, event.position);
        }
    }

    /// Merges `other` in: the result describes the union of both slots' records. Pass the
    /// earlier pane or session as `self` (see [`FeatureSet::merge`]).
    pub fn absorb(&mut self, features: &FeatureSet, other: &Slot) {
        features.merge(&mut self.accs, &other.accs);
        self.records += other.records;
        self.ingested_ms = self.ingested_ms.max(other.ingested_ms);
        if other.first.0 < self.first.0 {
            self.first = other.first;
        }
        if other.last.0 > self.last.0 {
            self.last = other.last;
        }
    }

    /// The feature row of this slot for `key` over `bounds`.
    pub fn row(
        &self,
        features: &FeatureSet,
        key: &Key,
        bounds: WindowBounds,
        revision: u32,
        closed_by_timeout: bool,
    ) -> FeatureRow {
        let mut values = RowValues::new();
        features.values(&self.accs, &mut values);
        FeatureRow {
            key: key.clone(),
            key_group: self.key_group,
            window_start: bounds.start,
            window_end: bounds.end,
            revision,
            values,
            records: self.records,
            first: self.first.1,
            last: self.last.1,
            fired_at_ns: 0,
            closed_by_timeout,
            ingested_at_ms: self.ingested_ms,
        }
    }
}
