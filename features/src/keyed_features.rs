//! Several windows per key in one pass (issue #3 item 3): a job's features are grouped by the
//! window they are computed over. The *primary* window (`[window]`, used by every feature without
//! `window = "..."`) triggers emission: each time it fires for a key, one feature vector is
//! assembled in the model's input order, where every feature of another (*secondary*) window
//! takes the value of that window's latest window closed at or before the primary window's end
//! ("as of" semantics; an aligned secondary window without records gives the empty-window values,
//! e.g. a count of 0). Secondary windows are fired before the primary in every pass, so the
//! lookup only sees closed windows and the result does not depend on tick batching.
//! Limitation: a late revision of a secondary window does not revise primary rows already emitted.

use std::collections::{BTreeMap, HashMap};

use crate::error::{FeatureError, Result};
use crate::feature::{FeatureSet, FeatureSpec};
use crate::panes::FastHash;
use crate::record::Event;
use crate::row::FeatureRow;
use crate::schema::RecordSchema;
use crate::vocab::{EventTime, Key, Watermark};
use crate::window::WindowSpec;
use crate::window_state::{Applied, KeyedWindows};

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
        })
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

/// Closed secondary windows per key: window end → values (in the group's feature order).
type History = HashMap<Key, BTreeMap<EventTime, Vec<f64>>, FastHash>;

/// Keyed state of every window of a job.
#[derive(Clone, Debug)]
pub struct KeyedFeatures {
    states: Vec<KeyedWindows>,
    history: Vec<History>,
    empty: Vec<Vec<f64>>,
}

impl KeyedFeatures {
    /// Empty state for `job`.
    pub fn new(job: &JobFeatures, allowed_lateness_ms: i64) -> Self {
        let states = job
            .groups
            .iter()
            .map(|g| KeyedWindows::new(g.spec.clone(), allowed_lateness_ms))
            .collect();
        let history = job.groups.iter().map(|_| History::default()).collect();
        let empty = job
            .groups
            .iter()
            .map(|g| {
                let mut values = Vec::new();
                g.features.values(&g.features.empty(), &mut values);
                values
            })
            .collect();
        KeyedFeatures {
            states,
            history,
            empty,
        }
    }

    /// Open (key, window) slots over all windows.
    pub fn open_slots(&self) -> usize {
        self.states.iter().map(KeyedWindows::open_slots).sum()
    }

    /// See [`KeyedWindows::set_processing_time`].
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
        for (group, state) in groups {
            state.apply(&group.features, event, watermark);
        }
        Applied::Updated
    }

    /// Fires every window the watermark passed; emits one assembled row per primary firing.
    pub fn fire(&mut self, job: &JobFeatures, watermark: Watermark, emit: impl FnMut(FeatureRow)) {
        self.fire_secondaries(job, |state, features, history| {
            state.fire(features, watermark, |row| record(history, row))
        });
        let mut primary_rows = Vec::new();
        if let (Some(group), Some(state)) = (job.groups.first(), self.states.first_mut()) {
            state.fire(&group.features, watermark, |row| primary_rows.push(row));
        }
        self.assemble(job, primary_rows, emit);
        self.prune(job, watermark);
    }

    /// Closes windows of keys quiet for `ttl_ms` (see [`KeyedWindows::expire`]).
    pub fn expire(
        &mut self,
        job: &JobFeatures,
        now_ms: i64,
        ttl_ms: i64,
        emit: impl FnMut(FeatureRow),
    ) -> usize {
        self.fire_secondaries(job, |state, features, history| {
            state.expire(features, now_ms, ttl_ms, |row| record(history, row));
        });
        let mut primary_rows = Vec::new();
        let mut expired = 0;
        if let (Some(group), Some(state)) = (job.groups.first(), self.states.first_mut()) {
            expired = state.expire(&group.features, now_ms, ttl_ms, |row| {
                primary_rows.push(row)
            });
        }
        for row in &primary_rows {
            self.history.iter_mut().for_each(|h| {
                h.remove(&row.key);
            });
        }
        self.assemble(job, primary_rows, emit);
        expired
    }

    fn fire_secondaries(
        &mut self,
        job: &JobFeatures,
        mut each: impl FnMut(&mut KeyedWindows, &FeatureSet, &mut History),
    ) {
        for ((group, state), history) in job
            .groups
            .iter()
            .zip(self.states.iter_mut())
            .zip(self.history.iter_mut())
            .skip(1)
        {
            each(state, &group.features, history);
        }
    }

    fn assemble(&self, job: &JobFeatures, rows: Vec<FeatureRow>, mut emit: impl FnMut(FeatureRow)) {
        if job.groups.len() == 1 {
            rows.into_iter().for_each(emit);
            return;
        }
        for mut row in rows {
            let mut values = vec![f64::NAN; job.names.len()];
            if let Some(primary) = job.groups.first() {
                for (value, &at) in row.values.iter().zip(&primary.positions) {
                    values[at] = *value;
                }
            }
            for (g, group) in job.groups.iter().enumerate().skip(1) {
                let found = self.as_of(g, group, &row.key, row.window_end);
                for (value, &at) in found.iter().zip(&group.positions) {
                    values[at] = *value;
                }
            }
            row.values = values;
            emit(row);
        }
    }

    /// Values of group `g`'s latest window closed at or before `end` for `key`.
    fn as_of(&self, g: usize, group: &WindowGroup, key: &Key, end: EventTime) -> &[f64] {
        let empty = self.empty.get(g).map_or(&[][..], Vec::as_slice);
        let Some(history) = self.history.get(g).and_then(|h| h.get(key)) else {
            return empty;
        };
        match group.spec.aligned() {
            Some(aligned) => {
                let latest_end = aligned.next_end_after(end).saturating_sub(aligned.slide);
                history.get(&latest_end).map_or(empty, Vec::as_slice)
            }
            None => history
                .range(..=end)
                .next_back()
                .map_or(empty, |(_, v)| v.as_slice()),
        }
    }

    /// Drops closed secondary windows no future primary row can ask for.
    fn prune(&mut self, job: &JobFeatures, watermark: Watermark) {
        for (group, history) in job.groups.iter().zip(self.history.iter_mut()).skip(1) {
            let horizon = match group.spec.aligned() {
                Some(aligned) => aligned
                    .next_end_after(watermark.0)
                    .saturating_sub(aligned.slide),
                None => watermark.0,
            };
            history.retain(|_, windows| {
                // Keep everything at or after the horizon, plus the latest window before it.
                let latest_before = windows.range(..horizon).next_back().map(|(end, _)| *end);
                windows.retain(|end, _| *end >= horizon || Some(*end) == latest_before);
                !windows.is_empty()
            });
        }
    }
}

fn record(history: &mut History, row: FeatureRow) {
    history
        .entry(row.key)
        .or_default()
        .insert(row.window_end, row.values);
}
