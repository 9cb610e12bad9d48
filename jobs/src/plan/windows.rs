//! The window stage's rules beyond the features themselves (those are the compiled
//! `JobFeatures` beside this plan): lateness and state TTL.

use std::time::Duration;

use weir_features::vocab::EventTime;

/// `[watermark] allowed_lateness` and `[state]` as the window operator uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    /// Records this far behind the watermark still update (and re-emit) their window.
    pub allowed_lateness: EventTime,
    /// Close the windows of keys with no record for this long (processing time) and drop
    /// their state (`None`: keep them until their windows fire).
    pub state_ttl: Option<Duration>,
}
