//! Which model versions the score instances of this process serve right now.
//!
//! One table per process, made where the job is wired (`jobs/src/pipeline.rs`) and handed to
//! both sides: each scoring-stage inference thread (`weir-score`) writes its instance's
//! versions when it starts and whenever a hot reload changes them; the checkpoint committer
//! (`crate::committer`) reads them into every manifest's `model_versions`, so a checkpoint
//! names what served when its epoch committed, not what served at start.
//!
//! Entries are keyed by role: the primary version under the model's name (`fraud` → `v3`),
//! a second version under the name and its role (`fraud:canary` → `v4`, `fraud:shadow`).
//! While instances disagree (one has swapped, another not yet), the value lists every
//! version served, sorted and comma-separated (`v3,v4`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// The versions each score instance of this process serves (see the module header).
#[derive(Debug, Default)]
pub struct ServingModels {
    by_instance: Mutex<BTreeMap<usize, BTreeMap<String, String>>>,
}

impl ServingModels {
    /// Records what score instance `instance` serves now, by role key (module header).
    pub fn set(&self, instance: usize, versions: BTreeMap<String, String>) {
        self.by_instance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(instance, versions);
    }

    /// What each score instance serves, by instance (for the `weir_model_serving` gauge).
    pub fn by_instance(&self) -> BTreeMap<usize, BTreeMap<String, String>> {
        self.by_instance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// What the instances serve together: one entry per role key, the versions of the
    /// instances that serve that role joined with `,` when they differ. Empty when no score
    /// instance has started in this process.
    pub fn versions(&self) -> BTreeMap<String, String> {
        let by_instance = self
            .by_instance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut merged: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (key, version) in by_instance.values().flatten() {
            merged.entry(key).or_default().insert(version);
        }
        merged
            .into_iter()
            .map(|(key, versions)| {
                let versions: Vec<&str> = versions.into_iter().collect();
                (key.to_owned(), versions.join(","))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn no_instance_serves_nothing() {
        assert!(ServingModels::default().versions().is_empty());
    }

    #[test]
    fn agreeing_instances_give_one_version_per_role() {
        let serving = ServingModels::default();
        serving.set(0, map(&[("fraud", "v3"), ("fraud:canary", "v4")]));
        serving.set(1, map(&[("fraud", "v3"), ("fraud:canary", "v4")]));
        assert_eq!(
            serving.versions(),
            map(&[("fraud", "v3"), ("fraud:canary", "v4")])
        );
    }

    #[test]
    fn an_instance_mid_reload_shows_both_versions_until_it_catches_up() {
        let serving = ServingModels::default();
        serving.set(0, map(&[("fraud", "v4")]));
        serving.set(1, map(&[("fraud", "v3"), ("fraud:shadow", "v5")]));
        assert_eq!(
            serving.versions(),
            map(&[("fraud", "v3,v4"), ("fraud:shadow", "v5")])
        );
        serving.set(1, map(&[("fraud", "v4")]));
        assert_eq!(serving.versions(), map(&[("fraud", "v4")]));
    }
}
