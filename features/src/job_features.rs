//! The job's feature definition, compiled: its features grouped by the window they are
//! computed over (group 0 is the primary `[window]`, whose firings emit the feature vectors
//! under the close trigger), where each feature's value goes in the model's input vector, and
//! the job's [`Trigger`]. Read by the per-key state ([`crate::keyed_features`]) and the
//! schedule trigger ([`crate::schedule`]); it holds no state of its own.

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::error::{FeatureError, Result};
use crate::feature::{FeatureSet, FeatureSpec};
use crate::schema::RecordSchema;
use crate::window::WindowSpec;

/// When feature vectors are emitted (`[trigger]` in the job file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(tag = "on", rename_all = "snake_case", deny_unknown_fields)]
pub enum Trigger {
    /// On each close (and allowed-late revision) of the primary window.
    #[default]
    Close,
    /// Every `every` of event time: each feature's latest closed window as of that time.
    Schedule {
        /// Schedule period, e.g. `"1m"`.
        #[serde(with = "crate::duration_ms")]
        every: i64,
    },
}

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

/// Writes `group`'s values (in the group's feature order) to their places in `out`.
pub(crate) fn place(out: &mut [f64], group: &WindowGroup, values: &[f64]) {
    for (value, &at) in values.iter().zip(&group.positions) {
        if let Some(slot) = out.get_mut(at) {
            *slot = *value;
        }
    }
}
