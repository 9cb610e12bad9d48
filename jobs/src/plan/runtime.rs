//! The process shape and timing every stage shares: `[runtime]`, checked.

use std::time::Duration;

use weir_operators::Placement;

/// `[runtime]` as the run uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimePlan {
    /// Timely worker threads per process.
    pub workers: usize,
    /// Processes of the run.
    pub processes: usize,
    /// The job's worker layout (`workers × processes` workers).
    pub placement: Placement,
    /// Processing-time tick (positive).
    pub tick: Duration,
    /// Key groups (fixed for the life of a job).
    pub key_groups: u32,
    /// Sources hold back while the scores lag more than this (`None`: no bound).
    pub max_lag: Option<Duration>,
    /// How long a process of a cluster waits for the others (`None`: forever).
    pub connect_timeout: Option<Duration>,
}
