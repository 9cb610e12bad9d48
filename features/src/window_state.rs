//! Keyed window state of one window definition: for every key, its open panes (tumbling and
//! hopping windows, [`crate::panes`]) or sessions ([`crate::sessions`]). Records are applied
//! one at a time (no allocation unless a (key, pane) or session is new); `fire` emits every
//! window whose end the watermark passed; `expire` force-closes the windows of keys that went
//! quiet. The Timely window operator and the batch `weir features` command both run this same
//! code, so online and training features cannot disagree.
//!
//! Lateness (DESIGN.md §2): a record with `ts < watermark - allowed_lateness` is
//! [`Applied::Late`] and changes nothing. A record within the allowed lateness updates its
//! pane or session; windows that had already fired re-emit on the next `fire` with
//! `revision + 1`. State is dropped once `watermark - allowed_lateness` passes the end of the
//! last window it belongs to.

use crate::error::{FeatureError, Result};
use crate::feature::FeatureSet;
use crate::key_activity::{KeyActivity, QuietKeys};
use crate::over_range::OverRange;
use crate::panes::PaneWindows;
use crate::record::Event;
use crate::row::FeatureRow;
use crate::sessions::{ForgottenSessions, SessionWindows};
use crate::vocab::{Key, Watermark};
use crate::window::WindowSpec;
use serde::{Deserialize, Serialize};

/// What happened to an applied record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Folded into its pane or session.
    Updated,
    /// Behind the watermark by more than the allowed lateness: route to the dead-letter topic.
    Late {
        /// The watermark it was late against.
        watermark: Watermark,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Kind {
    Panes(PaneWindows),
    Sessions(SessionWindows),
    Range(OverRange),
}

/// All open windows of one window definition for the keys owned by one operator instance.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyedWindows {
    kind: Kind,
    allowed_lateness: i64,
    /// Arrival counter: orders records for the rows' first/last positions.
    seq: u64,
    /// When each key last had a record, for [`KeyedWindows::expire`] (tracked once
    /// [`KeyedWindows::set_processing_time`] is called; the window groups of a
    /// [`crate::keyed_features::KeyedFeatures`] leave it off and share one table).
    activity: KeyActivity,
}

impl KeyedWindows {
    /// Empty state for windows of `spec` (validate it first: invalid sizes are clamped to
    /// 1 ms); records up to `allowed_lateness_ms` behind the watermark still update (and
    /// re-emit) their window.
    pub fn new(spec: WindowSpec, allowed_lateness_ms: i64) -> Self {
        let kind = match (spec.aligned(), spec) {
            (Some(geom), _) => Kind::Panes(PaneWindows::new(geom)),
            (None, WindowSpec::Session { gap, max_length }) => {
                Kind::Sessions(SessionWindows::new(gap.max(1), max_length.max(gap).max(1)))
            }
            (None, WindowSpec::OverRange { range }) => Kind::Range(OverRange::new(range)),
            (None, _) => Kind::Panes(PaneWindows::new(crate::window::Aligned::new(1, 1))),
        };
        KeyedWindows {
            kind,
            allowed_lateness: allowed_lateness_ms.max(0),
            seq: 0,
            activity: KeyActivity::default(),
        }
    }

    /// Number of open (key, pane) slots, or of open sessions.
    pub fn open_slots(&self) -> usize {
        match &self.kind {
            Kind::Panes(p) => p.open_slots(),
            Kind::Sessions(s) => s.open_slots(),
            Kind::Range(r) => r.open_slots(),
        }
    }

    /// How far behind the watermark a record may be and still update its window.
    pub fn allowed_lateness(&self) -> i64 {
        self.allowed_lateness
    }

    /// Number of sessions expiry forgot whose revisions are kept (see [`KeyedWindows::expire`]).
    pub fn forgotten_windows(&self) -> usize {
        self.forgotten_sessions().map_or(0, ForgottenSessions::len)
    }

    /// Number of keys whose last-record time is tracked for [`KeyedWindows::expire`].
    pub fn tracked_keys(&self) -> usize {
        self.activity.len()
    }

    /// Sets the processing time (Unix ms) of the records applied next, and turns on per-key
    /// tracking of the last record's processing time for [`KeyedWindows::expire`]. The
    /// operator calls it once per tick; without it `expire` has nothing to expire.
    pub fn set_processing_time(&mut self, now_ms: i64) {
        self.activity.set_processing_time(now_ms);
    }

    /// Restored state joins a run at processing time `now_ms`: the time between the snapshot
    /// and now (the job was down, or restoring) is not quiet time for the TTL, so every
    /// key's last-record time moves forward by it. Without this, every key quiet since the
    /// checkpoint would expire on the restored run's first tick, before its replayed records
    /// are read, which the uninterrupted run never does.
    pub fn resume_processing_time(&mut self, now_ms: i64) {
        self.activity.resume(now_ms);
    }

    /// Whether a record at `event.ts` is too late for `watermark`.
    #[inline]
    pub fn is_late(&self, event: &Event, watermark: Watermark) -> bool {
        watermark != Watermark::MIN && event.ts < watermark.0.saturating_sub(self.allowed_lateness)
    }

    /// Applies one record, given the current watermark.
    #[inline]
    pub fn apply(&mut self, features: &FeatureSet, event: &Event, watermark: Watermark) -> Applied {
        if self.is_late(event, watermark) {
            return Applied::Late { watermark };
        }
        self.seq += 1;
        match &mut self.kind {
            Kind::Panes(p) => p.apply(features, event, self.seq),
            Kind::Sessions(s) => s.apply(features, event, self.seq),
            Kind::Range(r) => r.apply(event, self.seq),
        }
        self.activity.touch(&event.key);
        Applied::Updated
    }

    /// Appends to `rows` every window with `end <= watermark` that has unemitted changes
    /// (earliest end first; within an end, aligned windows by their key hash's top 40 bits,
    /// sessions by key), then drops the state no record can reach any more. Returns whether
    /// the state changed (see [`crate::keyed_features::KeyedFeatures::take_changed`]).
    pub fn fire(
        &mut self,
        features: &FeatureSet,
        watermark: Watermark,
        rows: &mut Vec<FeatureRow>,
    ) -> bool {
        let lateness = self.allowed_lateness;
        match &mut self.kind {
            Kind::Panes(p) => p.fire(features, watermark, lateness, rows),
            Kind::Sessions(s) => s.fire(features, watermark, lateness, rows),
            Kind::Range(r) => r.fire(features, watermark, lateness, rows),
        }
    }

    /// Force-closes the windows of every key with no record for `ttl_ms` of processing time
    /// (`last record + ttl_ms <= now_ms`): emits each of its windows that has not been emitted
    /// or changed since (marked [`FeatureRow::closed_by_timeout`], even if the watermark has
    /// not reached its end), then drops all the key's state. A later record of the key starts
    /// from empty state; its windows continue the revision numbers of the forgotten ones
    /// while those can still be touched, so no `(key, window_end, revision)` repeats.
    /// Returns the number of keys expired. Cost is linear in the number of
    /// tracked keys: call it every few seconds, not per tick.
    pub fn expire(
        &mut self,
        features: &FeatureSet,
        now_ms: i64,
        ttl_ms: i64,
        rows: &mut Vec<FeatureRow>,
    ) -> usize {
        let quiet = self.activity.take_quiet(now_ms, ttl_ms);
        if quiet.is_empty() {
            return 0;
        }
        self.expire_keys(features, &quiet, rows);
        quiet.len()
    }

    /// Force-closes the windows of the keys in `quiet` as [`KeyedWindows::expire`] does, for
    /// a caller that tracks key activity itself.
    pub fn expire_keys(
        &mut self,
        features: &FeatureSet,
        quiet: &QuietKeys,
        rows: &mut Vec<FeatureRow>,
    ) {
        match &mut self.kind {
            Kind::Panes(p) => p.expire(features, quiet, rows),
            Kind::Sessions(s) => s.expire(features, quiet, rows),
            Kind::Range(r) => r.expire(features, quiet, rows),
        }
    }
}

impl KeyedWindows {
    /// Keeps only the keys `keep` accepts (restore at a new parallelism).
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        match &mut self.kind {
            Kind::Panes(p) => p.retain_keys(keep),
            Kind::Sessions(s) => s.retain_keys(keep),
            Kind::Range(r) => r.retain_keys(keep),
        }
        self.activity.retain_keys(keep);
    }

    /// The session windows' forgotten sessions, which snapshots hold beside this struct's
    /// serialized form (since `keyed_features::STATE_VERSION` 2); `None` for other window kinds.
    pub(crate) fn forgotten_sessions(&self) -> Option<&ForgottenSessions> {
        match &self.kind {
            Kind::Sessions(s) => Some(s.forgotten()),
            Kind::Panes(_) | Kind::Range(_) => None,
        }
    }

    /// Puts back a snapshot's forgotten sessions; whether this is a session window (else
    /// they cannot belong to it).
    pub(crate) fn restore_forgotten_sessions(&mut self, forgotten: ForgottenSessions) -> bool {
        match &mut self.kind {
            Kind::Sessions(s) => {
                s.restore_forgotten(forgotten);
                true
            }
            Kind::Panes(_) | Kind::Range(_) => false,
        }
    }

    /// Merges the session windows that touch (see `SessionWindows::merge_touching`): state
    /// decoded from a snapshot written before touching sessions merged. Other kinds keep
    /// their state.
    pub(crate) fn merge_touching_sessions(&mut self, features: &FeatureSet) -> bool {
        match &mut self.kind {
            Kind::Sessions(s) => s.merge_touching(features),
            Kind::Panes(_) | Kind::Range(_) => false,
        }
    }

    /// Drops the words of every `count` without `where` from each slot (state decoded from a
    /// snapshot before format 5, where they had words of their own; see
    /// [`FeatureSet::words_without_record_counts`]). Fails, naming the width, when a slot's
    /// words do not have that older layout's length for `features`.
    pub(crate) fn drop_record_count_words(&mut self, features: &FeatureSet) -> Result<()> {
        let convert = |old: &[u64]| features.words_without_record_counts(old);
        let converted = match &mut self.kind {
            Kind::Panes(p) => p.convert_words(features.empty_words().len(), &convert),
            Kind::Sessions(s) => s.convert_words(&convert),
            Kind::Range(_) => Some(()),
        };
        converted.ok_or_else(|| {
            let words = features.words_before_format_5();
            FeatureError::Window(format!(
                "a slot in the window state snapshot does not hold the {words} accumulator \
                 words this job's features took before format 5: it was written for other \
                 features"
            ))
        })
    }

    /// Takes this window's own key-activity table (snapshots of format 2 and older kept one per
    /// window group), leaving tracking off.
    pub(crate) fn take_activity(&mut self) -> KeyActivity {
        std::mem::take(&mut self.activity)
    }

    /// Adds the keys of `other` (disjoint from ours, same window definition) to this state.
    /// Arrival numbers stay comparable within a key, which is all first/last need.
    pub fn absorb(&mut self, other: KeyedWindows) {
        match (&mut self.kind, other.kind) {
            (Kind::Panes(a), Kind::Panes(b)) => a.absorb(b),
            (Kind::Sessions(a), Kind::Sessions(b)) => a.absorb(b),
            (Kind::Range(a), Kind::Range(b)) => a.absorb(b),
            _ => {}
        }
        self.seq = self.seq.max(other.seq);
        self.activity.absorb(other.activity);
    }
}
