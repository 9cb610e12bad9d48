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

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::closed_windows::ClosedWindows;
use crate::error::{FeatureError, Result};
use crate::feature::{FeatureSet, FeatureSpec};
use crate::record::Event;
use crate::row::{FeatureRow, RowValues};
use crate::schedule::{Schedule, Trigger};
use crate::schema::RecordSchema;
use crate::sessions::ForgottenSessions;
use crate::vocab::{Key, Watermark};
use crate::window::WindowSpec;
use crate::window_state::{Applied, KeyedWindows};
use bincode::Options;

/// The features of one window and where their values go in the job's vector.
#[derive(Clone, Debug)]
pub struct WindowGroup {
    /// Window name (`None` = the primary `[window]`).
    pub name: Option<String>,
    /// The window.
    pub spec: WindowSpec,
    /// Its features, compiled together (ratios stay within one window).
    pub features: FeatureSet,
    /// Output index of each of those features.
    pub positions: Vec<usize>,
}

/// All features of a job, grouped by window; group 0 is the primary window.
#[derive(Clone, Debug)]
pub struct JobFeatures {
    groups: Vec<WindowGroup>,
    names: Vec<String>,
    trigger: Trigger,
}

impl JobFeatures {
    /// Groups `specs` by window. Features without `window` use `primary`; others name an entry
    /// of `named`.
    pub fn compile(
        specs: &[FeatureSpec],
        schema: &RecordSchema,
        primary: &WindowSpec,
        named: &BTreeMap<String, WindowSpec>,
    ) -> Result<JobFeatures> {
        if specs.is_empty() {
            // Reports "the job defines no [[features]]".
            FeatureSet::compile(specs, schema)?;
        }
        let mut order: Vec<Option<String>> = vec![None];
        for spec in specs {
            if let Some(name) = &spec.window {
                if !named.contains_key(name) {
                    return Err(FeatureError::Feature {
                        feature: spec.name.clone(),
                        message: format!("window `{name}` is not defined; add [windows.{name}]"),
                    });
                }
                if !order.contains(&spec.window) {
                    order.push(spec.window.clone());
                }
            }
        }
        let mut groups = Vec::new();
        for name in order {
            let picked: Vec<(usize, FeatureSpec)> = specs
                .iter()
                .cloned()
                .enumerate()
                .filter(|(_, s)| s.window == name)
                .collect();
            if picked.is_empty() {
                continue;
            }
            let subset: Vec<FeatureSpec> = picked.iter().map(|(_, s)| s.clone()).collect();
            let spec = match &name {
                None => primary.clone(),
                Some(n) => named
                    .get(n)
                    .cloned()
                    .ok_or_else(|| FeatureError::Window(format!("window `{n}` is not defined")))?,
            };
            spec.validate()?;
            groups.push(WindowGroup {
                name,
                spec,
                features: FeatureSet::compile(&subset, schema)?,
                positions: picked.iter().map(|(i, _)| *i).collect(),
            });
        }
        if groups.first().is_none_or(|g| g.name.is_some()) {
            return Err(FeatureError::Window(
                "at least one feature must use the primary [window]: its firings emit the feature vectors".to_owned(),
            ));
        }
        Ok(JobFeatures {
            groups,
            names: specs.iter().map(|s| s.name.clone()).collect(),
            trigger: Trigger::Close,
        })
    }

    /// Uses `trigger` instead of the default [`Trigger::Close`]. A schedule needs `every > 0`
    /// and no `over_range` window (per-event rows have no window to be "as of").
    pub fn with_trigger(mut self, trigger: Trigger) -> Result<JobFeatures> {
        if let Trigger::Schedule { every } = trigger {
            if every <= 0 {
                return Err(FeatureError::Window(format!(
                    "[trigger] every must be > 0, got {every} ms"
                )));
            }
            if let Some(group) = self
                .groups
                .iter()
                .find(|g| matches!(g.spec, WindowSpec::OverRange { .. }))
            {
                let name = group
                    .name
                    .as_deref()
                    .map_or("[window]".to_owned(), |n| format!("[windows.{n}]"));
                return Err(FeatureError::Window(format!(
                    "{name} is an over_range window, which emits per event; it cannot be used with [trigger] on = \"schedule\""
                )));
            }
        }
        self.trigger = trigger;
        Ok(self)
    }

    /// When rows are emitted.
    pub fn trigger(&self) -> Trigger {
        self.trigger
    }

    /// A job with one window: every feature over `spec`.
    pub fn single(spec: WindowSpec, features: FeatureSet) -> JobFeatures {
        let names = features.names();
        let positions = (0..names.len()).collect();
        JobFeatures {
            groups: vec![WindowGroup {
                name: None,
                spec,
                features,
                positions,
            }],
            names,
            trigger: Trigger::Close,
        }
    }

    /// Feature names in output order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The window groups, primary first.
    pub fn groups(&self) -> &[WindowGroup] {
        &self.groups
    }
}

/// Keyed state of every window of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyedFeatures {
    states: Vec<KeyedWindows>,
    /// Closed windows per group: secondaries only under the close trigger, every group under
    /// the schedule trigger.
    closed: Vec<ClosedWindows>,
    empty: Vec<Vec<f64>>,
    schedule: Option<Schedule>,
    /// Changed since the last [`KeyedFeatures::take_changed`] (not persisted).
    #[serde(skip)]
    changed: bool,
}

impl KeyedFeatures {
    /// Empty state for `job`.
    pub fn new(job: &JobFeatures, allowed_lateness_ms: i64) -> Self {
        let states = job
            .groups
            .iter()
            .map(|g| KeyedWindows::new(g.spec.clone(), allowed_lateness_ms))
            .collect();
        let closed = job
            .groups
            .iter()
            .map(|_| ClosedWindows::default())
            .collect();
        let empty = job
            .groups
            .iter()
            .map(|g| {
                let mut values = RowValues::new();
                g.features.values(&g.features.empty(), &mut values);
                values.to_vec()
            })
            .collect();
        let schedule = match job.trigger {
            Trigger::Close => None,
            Trigger::Schedule { every } => Some(Schedule::new(every)),
        };
        KeyedFeatures {
            states,
            closed,
            empty,
            schedule,
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
    /// [`KeyedWindows::resume_processing_time`]), from a checkpoint taken at window watermark
    /// `watermark` (see [`Schedule::resume_through`]; `None`: not recorded).
    pub fn resume(&mut self, now_ms: i64, watermark: Option<i64>) {
        self.states
            .iter_mut()
            .for_each(|s| s.resume_processing_time(now_ms));
        if let (Some(schedule), Some(watermark)) = (&mut self.schedule, watermark) {
            schedule.resume_through(watermark);
        }
    }

    /// Sets the processing time of the records applied next in every window group (see
    /// [`KeyedWindows::set_processing_time`]).
    pub fn set_processing_time(&mut self, now_ms: i64) {
        self.states
            .iter_mut()
            .for_each(|s| s.set_processing_time(now_ms));
    }

    /// Applies one record to every window (lateness does not depend on the window).
    #[inline]
    pub fn apply(&mut self, job: &JobFeatures, event: &Event, watermark: Watermark) -> Applied {
        let mut groups = job.groups.iter().zip(self.states.iter_mut());
        let Some((group, state)) = groups.next() else {
            return Applied::Updated;
        };
        if let late @ Applied::Late { .. } = state.apply(&group.features, event, watermark) {
            return late;
        }
        self.changed = true;
        for (group, state) in groups {
            state.apply(&group.features, event, watermark);
        }
        Applied::Updated
    }

    /// Fires every window the watermark passed and emits the rows of the job's trigger: one
    /// assembled row per primary firing, or the rows of every schedule point passed.
    pub fn fire(
        &mut self,
        job: &JobFeatures,
        watermark: Watermark,
        mut emit: impl FnMut(FeatureRow),
    ) {
        let mut changed = false;
        if let Some(schedule) = &mut self.schedule {
            for ((group, state), closed) in job
                .groups
                .iter()
                .zip(&mut self.states)
                .zip(&mut self.closed)
            {
                changed |= state.fire(&group.features, watermark, |row| closed.record(row));
            }
            changed |= schedule.emit_through(job, &mut self.closed, &self.empty, watermark.0, emit);
            self.changed |= changed;
            return;
        }
        self.fire_secondaries(job, |state, features, closed| {
            changed |= state.fire(features, watermark, |row| closed.record(row));
        });
        let mut primary_rows = Vec::new();
        if let (Some(group), Some(state)) = (job.groups.first(), self.states.first_mut()) {
            changed |= state.fire(&group.features, watermark, |row| primary_rows.push(row));
        }
        self.assemble(job, primary_rows, &mut emit);
        changed |= self.prune(job, watermark);
        self.changed |= changed;
    }

    /// Closes windows of keys quiet for `ttl_ms` (see [`KeyedWindows::expire`]). Under the
    /// close trigger the primary window's force-closed windows are emitted at once; under the
    /// schedule trigger every force-closed window waits for the next schedule points.
    pub fn expire(
        &mut self,
        job: &JobFeatures,
        now_ms: i64,
        ttl_ms: i64,
        emit: impl FnMut(FeatureRow),
    ) -> usize {
        if self.schedule.is_some() {
            let mut expired = 0;
            for ((group, state), closed) in job
                .groups
                .iter()
                .zip(&mut self.states)
                .zip(&mut self.closed)
            {
                expired = expired
                    .max(state.expire(&group.features, now_ms, ttl_ms, |row| closed.record(row)));
            }
            self.changed |= expired > 0;
            return expired;
        }
        let mut expired = 0;
        self.fire_secondaries(job, |state, features, closed| {
            expired = expired.max(state.expire(features, now_ms, ttl_ms, |row| closed.record(row)));
        });
        let mut primary_rows = Vec::new();
        if let (Some(group), Some(state)) = (job.groups.first(), self.states.first_mut()) {
            expired = expired.max(state.expire(&group.features, now_ms, ttl_ms, |row| {
                primary_rows.push(row)
            }));
        }
        for row in &primary_rows {
            self.closed.iter_mut().for_each(|c| c.remove_key(&row.key));
        }
        self.changed |= expired > 0;
        self.assemble(job, primary_rows, emit);
        expired
    }

    fn fire_secondaries(
        &mut self,
        job: &JobFeatures,
        mut each: impl FnMut(&mut KeyedWindows, &FeatureSet, &mut ClosedWindows),
    ) {
        for ((group, state), closed) in job
            .groups
            .iter()
            .zip(self.states.iter_mut())
            .zip(self.closed.iter_mut())
            .skip(1)
        {
            each(state, &group.features, closed);
        }
    }

    fn assemble(&self, job: &JobFeatures, rows: Vec<FeatureRow>, mut emit: impl FnMut(FeatureRow)) {
        if job.groups.len() == 1 {
            rows.into_iter().for_each(emit);
            return;
        }
        for mut row in rows {
            let mut values: RowValues = smallvec::smallvec![f64::NAN; job.names.len()];
            if let Some(primary) = job.groups.first() {
                place(&mut values, primary, &row.values);
            }
            for (g, group) in job.groups.iter().enumerate().skip(1) {
                let found = self
                    .closed
                    .get(g)
                    .and_then(|c| c.latest_at_or_before(&group.spec, &row.key, row.window_end));
                let empty = self.empty.get(g).map_or(&[][..], Vec::as_slice);
                place(&mut values, group, found.map_or(empty, |r| &r.values));
            }
            row.values = values;
            emit(row);
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
        for (group, closed) in job.groups.iter().zip(self.closed.iter_mut()).skip(1) {
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

/// Writes `group`'s values (in the group's feature order) to their places in `out`.
pub(crate) fn place(out: &mut [f64], group: &WindowGroup, values: &[f64]) {
    for (value, &at) in values.iter().zip(&group.positions) {
        if let Some(slot) = out.get_mut(at) {
            *slot = *value;
        }
    }
}

/// Version of the encoding written by [`KeyedFeatures::encode`]; bump it (and keep a decoder
/// for the old one) whenever a state struct changes. After the version tag (`u32`, LE):
///
/// - 1: `KeyedFeatures` in bincode.
/// - 2: the length of that (`u64`, LE), that, then per window group (in order) the session
///   windows' forgotten sessions (`Option<ForgottenSessions>`, bincode), which version 1 did
///   not keep. A version 1 snapshot restores with none: its expired sessions' revisions were
///   already lost.
pub const STATE_VERSION: u32 = 2;

impl KeyedFeatures {
    /// Keeps only the keys `keep` accepts (restore at a new parallelism).
    pub fn retain_keys(&mut self, keep: &dyn Fn(&Key) -> bool) {
        self.changed = true;
        self.states.iter_mut().for_each(|s| s.retain_keys(keep));
        self.closed.iter_mut().for_each(|c| c.retain_keys(keep));
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
        Ok(())
    }

    /// The state as bytes (format [`STATE_VERSION`]).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let fail =
            |e: bincode::Error| FeatureError::Window(format!("cannot encode window state: {e}"));
        let mut out = STATE_VERSION.to_le_bytes().to_vec();
        out.extend_from_slice(&[0; 8]);
        bincode::serialize_into(&mut out, self).map_err(fail)?;
        let length = (out.len() - 12) as u64;
        out[4..12].copy_from_slice(&length.to_le_bytes());
        let forgotten: Vec<Option<&ForgottenSessions>> = self
            .states
            .iter()
            .map(KeyedWindows::forgotten_sessions)
            .collect();
        bincode::serialize_into(&mut out, &forgotten).map_err(fail)?;
        Ok(out)
    }

    /// Puts back a version-2 snapshot's forgotten sessions, one entry per window group.
    fn restore_forgotten_sessions(
        &mut self,
        forgotten: Vec<Option<ForgottenSessions>>,
    ) -> Result<()> {
        if forgotten.len() != self.states.len() {
            return Err(FeatureError::Window(format!(
                "window state snapshot lists forgotten sessions for {} window groups but holds {}",
                forgotten.len(),
                self.states.len()
            )));
        }
        for (group, (windows, forgotten)) in self.states.iter_mut().zip(forgotten).enumerate() {
            if let Some(forgotten) = forgotten {
                if !windows.restore_forgotten_sessions(forgotten) {
                    return Err(FeatureError::Window(format!(
                        "window state snapshot holds forgotten sessions for window group {group}, which is not a session window"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Decodes [`KeyedFeatures::encode`]'s bytes, checking that they fit `job`.
    pub fn decode(job: &JobFeatures, bytes: &[u8]) -> Result<KeyedFeatures> {
        let short =
            || FeatureError::Window("window state snapshot is shorter than its header".to_owned());
        let (version, body) = bytes.split_at_checked(4).ok_or_else(short)?;
        let version = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
        let (main, forgotten) = match version {
            1 => (body, None),
            2 => {
                let (length, rest) = body.split_at_checked(8).ok_or_else(short)?;
                let mut word = [0u8; 8];
                word.copy_from_slice(length);
                let length = usize::try_from(u64::from_le_bytes(word)).unwrap_or(usize::MAX);
                let (main, side) = rest.split_at_checked(length).ok_or_else(|| {
                    FeatureError::Window(format!(
                        "window state snapshot says its state takes {length} bytes but only {} follow",
                        rest.len()
                    ))
                })?;
                (main, Some(side))
            }
            other => {
                return Err(FeatureError::Window(format!(
                    "window state snapshot has format version {other}; this build reads 1 to {STATE_VERSION}"
                )))
            }
        };
        // The wire format of `bincode::serialize`, refusing bytes after the value.
        let exact = bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .reject_trailing_bytes();
        let fail =
            |e: bincode::Error| FeatureError::Window(format!("cannot decode window state: {e}"));
        let mut state: KeyedFeatures = exact.deserialize(main).map_err(fail)?;
        if let Some(side) = forgotten {
            let forgotten: Vec<Option<ForgottenSessions>> =
                exact.deserialize(side).map_err(fail)?;
            state.restore_forgotten_sessions(forgotten)?;
        }
        if state.states.len() != job.groups.len() || state.closed.len() != job.groups.len() {
            return Err(FeatureError::Window(format!(
                "the snapshot holds {} window groups but the job has {}",
                state.states.len(),
                job.groups.len()
            )));
        }
        Ok(state)
    }
}
