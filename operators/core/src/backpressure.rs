//! The scoring stage's backpressure signal to the sources of its process (DESIGN.md §4): a
//! score instance at its in-flight bound says so here, and every source instance of the
//! process reads nothing while any is (`crate::source_operator`, "Backpressure"). Made once
//! per process and handed to both stages where the job is wired (`jobs/src/pipeline.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How many score instances of this process are at their in-flight bound right now.
#[derive(Clone, Debug, Default)]
pub struct ScoreBacklog {
    at_bound: Arc<AtomicU64>,
}

impl ScoreBacklog {
    /// A score instance reached its in-flight bound: the sources pause.
    pub fn enter(&self) {
        self.at_bound.fetch_add(1, Ordering::Relaxed);
    }

    /// A score instance that had reached its bound has room again (or stopped).
    pub fn leave(&self) {
        self.at_bound.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether any score instance is at its bound (the sources read nothing meanwhile).
    pub fn is_backlogged(&self) -> bool {
        self.instances_at_bound() > 0
    }

    /// Number of score instances at their bound.
    pub fn instances_at_bound(&self) -> u64 {
        self.at_bound.load(Ordering::Relaxed)
    }
}
