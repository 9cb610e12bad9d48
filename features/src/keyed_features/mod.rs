//! Several windows per key in one pass (issue #3 item 3): a job's features are grouped by the
//! window they are computed over. The *primary* window (`[window]`, used by every feature without
//! `window = "..."`) triggers emission: each time it fires for a key, one feature vector is
//! assembled in the model's input order, where every feature of another (*secondary*) window
//! takes the value of that window's latest window closed at or before the primary window's end
//! ("as of" semantics; an aligned secondary window without records gives the empty-window values,
//! e.g. a count of 0). Secondary windows are fired before the primary in every pass, so the
//! lookup only sees closed windows and the result does not depend on tick batching.
//! Limitation: a late revision of a secondary window does not revise primary rows already emitted.
//! With `[trigger] on = "schedule"` no window is primary for emission: every window group fires
//! into its closed windows and [`crate::schedule`] emits rows at each schedule point.
//!
//! The job's definition is [`crate::job_features`]; this module holds the per-key state of an
//! operator instance, and [`codec`] its snapshot format.

mod codec;
pub use codec::STATE_VERSION;

use serde::{Deserialize, Serialize};

use crate::closed_windows::ClosedWindows;
use crate::error::{FeatureError, Result};
use crate::feature::FeatureSet;
use crate::job_features::{place, JobFeatures, Trigger};
use crate::key_activity::KeyActivity;
use crate::record::Event;
use crate::row::{FeatureRow, RowValues};
use crate::schedule::Schedule;
use crate::vocab::{Key, Watermark};
use crate::window_state::{Applied, KeyedWindows};

/// Keyed state of every window of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyedFeatures {
    states: Vec<KeyedWindows>,
    /// Closed windows per group: secondaries only under the close trigger, every group under
    /// the schedule trigger.
    closed: Vec<ClosedWindows>,
    empty: Vec<Vec<f64>>,
    schedule: Option<Schedule>,
    /// When each key last had a record, for TTL expiry: one entry per key for every window
    /// group (the groups' own tables stay off). Snapshots hold it beside the rest ([`codec`]).
    #[serde(skip)]
    activity: KeyActivity,
    /// Changed since the last [`KeyedFeatures::take_changed`] (not persisted).
    #[serde(skip)]
    changed: bool,
}

impl KeyedFeatures {
    /// Empty state for `job`.
    pub fn new(job: &JobFeatures, allowed_lateness_ms: i64) -> Self {
        let states = job
            .groups()
            .iter()
            .map(|g| KeyedWindows::new(g.spec.clone(), allowed_lateness_ms))
            .collect();
        let closed = job
            .groups()
            .iter()
            .map(|_| ClosedWindows::default())
            .collect();
        let empty = job
            .groups()
            .iter()
            .map(|g| {
                let mut values = RowValues::new();
                g.features.values(g.features.empty().view(), &mut values);
                values.to_vec()
            })
            .collect();
        let schedule = match job.trigger() {
            Trigger::Close => None,
            Trigger::Schedule { every } => Some(Schedule::new(every)),
        };
        KeyedFeatures {
            states,
            closed,
            empty,
            schedule,
            activity: KeyActivity::default(),
            changed: true,
        }
    }

    /// Whether the state changed since the last call (records applied, windows fired or
    /// dropped, keys expired or restored); clears the flag. A new state counts as changed. An
    /// incremental checkpoint re-writes a shard only when this is true: a state that did not
    /// change restores to the same outputs from its older snapshot.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Marks the state changed (its last snapshot was lost, so the next one must be written).
    pub fn mark_changed(&mut self) {
        self.changed = true;
    }

    /// Open (key, window) slots over all windows.
    pub fn open_slots(&self) -> usize {
        self.states.iter().map(KeyedWindows::open_slots).sum()
    }

    /// Sessions forgotten by expiry whose revision numbers are kept (see
    /// [`KeyedWindows::expire`]).
    pub fn forgotten_windows(&self) -> usize {
        self.states
            .iter()
            .map(KeyedWindows::forgotten_windows)
            .sum()
    }

    /// Closed windows kept for as-of lookups.
    pub fn closed_windows(&self) -> usize {
        self.closed.iter().map(ClosedWindows::len).sum()
    }

    /// Restored state joins a run at processing time `now_ms` (see
    /// [`KeyActivity::resume`]), from a checkpoint taken at window watermark `watermark` (see
    /// [`Schedule::resume_through`]; `None`: not recorded).
    pub fn resume(&mut self, now_ms: i64, watermark: Option<i64>) {
        self.activity.resume(now_ms);
        if let (Some(schedule), Some(watermark)) = (&mut self.schedule, watermark) {
            schedule.resume_through(watermark);
        }
    }

    /// Sets the processing time of the records applied next and turns on TTL tracking (see
    /// [`KeyActivity::set_processing_time`]).
    pub fn set_processing_time(&mut self, now_ms: i64) {
        self.activity.set_processing_time(now_ms);
    }

    /// Applies one record to every window (lateness does not depend on the window).
    #[inline]
    pub fn apply(&mut self, job: &JobFeatures, event: &Event, watermark: Watermark) -> Applied {
        let mut groups = job.groups().iter().zip(self.states.iter_mut());
        let Some((group, state)) = groups.next() else {
            return Applied::Updated;
        };
        if let late @ Applied::Late { .. } = state.apply(&group.features, event, watermark) {
            return late;
        }
        self.changed = true;
        self.activity.touch(&event.key);
        for (group, state) in groups {
            state.apply(&group.features, event, watermark);
        }
        Applied::Updated
    }

    /// Fires every window the watermark passed and appends to `rows` the rows of the job's
    /// trigger: one assembled row per primary firing, or the rows of every schedule point
    /// passed.
    pub fn fire(&mut self, job: &JobFeatures, watermark: Watermark, rows: &mut Vec<FeatureRow>) {
        let mut changed = false;
        let primary_rows = self.close_windows(job, rows, |state, features, closed| {
            changed |= state.fire(features, watermark, closed);
        });
        if let Some(schedule) = &mut self.schedule {
            changed |= schedule.emit_through(job, &mut self.closed, &self.empty, watermark.0, rows);
        } else {
            self.assemble(job, primary_rows, rows);
            changed |= self.prune(job, watermark);
        }
        self.changed |= changed;
    }

    /// Closes windows of keys quiet for `ttl_ms` (see [`KeyedWindows::expire`]). Under the
    /// close trigger the primary window's force-closed windows are appended to `rows` at once;
    /// under the schedule trigger every force-closed window waits for the next schedule points.
    pub fn expire(
        &mut self,
        job: &JobFeatures,
        now_ms: i64,
        ttl_ms: i64,
        rows: &mut Vec<FeatureRow>,
    ) -> usize {
        let quiet = self.activity.take_quiet(now_ms, ttl_ms);
        if quiet.is_empty() {
            return 0;
        }
        let primary_rows = self.close_windows(job, rows, |state, features, closed| {
            state.expire_keys(features, &quiet, closed);
        });
        for row in &primary_rows {
            self.closed.iter_mut().for_each(|c| c.remove_key(&row.key));
        }
        self.changed = true;
        self.assemble(job, primary_rows, rows);
        quiet.len()
    }

    /// The trigger driver of [`KeyedFeatures::fire`] and [`KeyedFeatures::expire`]: runs
    /// `close` (a firing or a forced close, appending the rows of the windows it closes) on
    /// every window group and routes those rows by the job's trigger. Under the schedule
    /// trigger every group's go to its closed windows; under the close trigger the
    /// secondaries' do (for the as-of lookups) and the primary's are returned, to be assembled
    /// once every group has closed — or, when the job has only the primary window (nothing to
    /// assemble), they are the output rows, appended to `rows` as they close.
    fn close_windows(
        &mut self,
        job: &JobFeatures,
        rows: &mut Vec<FeatureRow>,
        mut close: impl FnMut(&mut KeyedWindows, &FeatureSet, &mut Vec<FeatureRow>),
    ) -> Vec<FeatureRow> {
        let scheduled = self.schedule.is_some();
        let direct = job.groups().len() == 1;
        let (mut primary_rows, mut closed_rows) = (Vec::new(), Vec::new());
        let groups = job
            .groups()
            .iter()
            .zip(&mut self.states)
            .zip(&mut self.closed);
        for (g, ((group, state), closed)) in groups.enumerate() {
            if g == 0 && !scheduled {
                let to = if direct {
                    &mut *rows
                } else {
                    &mut primary_rows
                };
                close(state, &group.features, to);
            } else {
                close(state, &group.features, &mut closed_rows);
                closed_rows.drain(..).for_each(|row| closed.record(row));
            }
        }
        primary_rows
    }

    /// Fills each primary row with the secondary windows' values as of its end and appends it
    /// to `out` (a job with only the primary window appended its rows as they closed: `rows`
    /// is empty).
    fn assemble(&self, job: &JobFeatures, rows: Vec<FeatureRow>, out: &mut Vec<FeatureRow>) {
        for mut row in rows {
            let mut values: RowValues = smallvec::smallvec![f64::NAN; job.names().len()];
            if let Some(primary) = job.groups().first() {
                place(&mut values, primary, &row.values);
            }
            for (g, group) in job.groups().iter().enumerate().skip(1) {
                let found = self
                    .closed
                    .get(g)
                    .and_then(|c| c.latest_at_or_before(&group.spec, &row.key, row.window_end));
                let empty = self.empty.get(g).map_or(&[][..], Vec::as_slice);
                place(&mut values, group, found.map_or(empty, |r| &r.values));
            }
            row.values = values;
            out.push(row);
        }
    }

    /// Drops closed secondary windows no future primary row can ask for; returns whether any
    /// was dropped. A primary window can still be emitted (revised) while its end is after
    /// `watermark − allowed_lateness`, and it asks as of its end: the horizon is the latest
    /// secondary end at or before that point, not before the watermark.
    fn prune(&mut self, job: &JobFeatures, watermark: Watermark) -> bool {
        let lateness = self
            .states
            .first()
            .map_or(0, KeyedWindows::allowed_lateness);
        let watermark = Watermark(watermark.0.saturating_sub(lateness));
        let mut dropped = false;
        for (group, closed) in job.groups().iter().zip(self.closed.iter_mut()).skip(1) {
            let horizon = match group.spec.aligned() {
                Some(aligned) => aligned
                    .next_end_after(watermark.0)
                    .saturating_sub(aligned.slide),
                None => watermark.0,
            };
            dropped |= closed.prune(horizon, true);
        }
        dropped
    }
}

impl KeyedFeatures {
    /// Keeps only the keys `keep` accepts (restore at a new parallelism).
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        self.changed = true;
        self.states.iter_mut().for_each(|s| s.retain_keys(keep));
        self.closed.iter_mut().for_each(|c| c.retain_keys(keep));
        self.activity.retain_keys(keep);
    }

    /// Adds the keys of `other` (disjoint from ours, same job) to this state: merging the
    /// snapshots of several old instances into one new instance.
    pub fn absorb(&mut self, other: KeyedFeatures) -> Result<()> {
        if other.states.len() != self.states.len() {
            return Err(FeatureError::Window(format!(
                "a snapshot with {} window groups cannot be merged into a job with {}",
                other.states.len(),
                self.states.len()
            )));
        }
        self.changed = true;
        for (mine, theirs) in self.states.iter_mut().zip(other.states) {
            mine.absorb(theirs);
        }
        for (mine, theirs) in self.closed.iter_mut().zip(other.closed) {
            mine.absorb(theirs);
        }
        if let (Some(mine), Some(theirs)) = (&mut self.schedule, other.schedule) {
            mine.absorb(&theirs);
        }
        self.activity.absorb(other.activity);
        Ok(())
    }
}
