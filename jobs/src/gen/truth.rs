//! The generator's ground truth: hidden per-user state and the purchase model.
//!
//! Each user has a fixed `engagement` in `[0, 1)` (a hash of the seed and the user index),
//! the true event times of its clicks in the last [`CLICK_WINDOW_MS`] of event time, and an
//! exponentially weighted mean of its dwell times ([`EWMA_ALPHA`], starting at
//! [`EWMA_START_MS`]). The next valid event of a user is a purchase with probability
//!
//! ```text
//! p = sigmoid(A + B * min(recent_clicks, CLICK_CAP) + C * (ewma_dwell_ms - 3000) / 1000)
//! ```
//!
//! otherwise a click with probability `0.15 + 0.30 * engagement`, otherwise a view. Dwell is
//! lognormal with mean `1500 + 4000 * engagement` ms (σ = [`DWELL_SIGMA`]); purchase amounts
//! are lognormal with mean [`AMOUNT_MEAN`]. A purchase empties the user's recent clicks (the
//! cart converted). Malformed records never touch this state.

use std::collections::VecDeque;

/// How far back (event time, ms) the clicks that drive purchases are counted.
pub const CLICK_WINDOW_MS: i64 = 60_000;
/// Recent clicks above this count add nothing more to the purchase logit.
pub const CLICK_CAP: usize = 8;
/// Weight of the newest dwell in the exponentially weighted mean.
pub const EWMA_ALPHA: f64 = 0.2;
/// The dwell mean a user starts with before its first event.
pub const EWMA_START_MS: f64 = 3000.0;
/// Purchase logit intercept.
pub const A: f64 = -5.7;
/// Purchase logit weight per recent click.
pub const B: f64 = 0.45;
/// Purchase logit weight per second of mean dwell above 3 s.
pub const C: f64 = 0.6;
/// Log-space standard deviation of dwell times.
pub const DWELL_SIGMA: f64 = 0.5;
/// Mean purchase amount.
pub const AMOUNT_MEAN: f64 = 40.0;
/// Log-space standard deviation of purchase amounts.
pub const AMOUNT_SIGMA: f64 = 0.8;

/// The logistic function.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The type of a valid event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A page view.
    View,
    /// A click.
    Click,
    /// A purchase (carries an `amount`).
    Purchase,
}

impl EventType {
    /// The value of the JSON `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::View => "view",
            EventType::Click => "click",
            EventType::Purchase => "purchase",
        }
    }
}

/// One user's hidden state.
#[derive(Debug, Clone)]
pub(crate) struct UserState {
    engagement: f64,
    recent_clicks: VecDeque<i64>,
    ewma_dwell_ms: f64,
}

impl UserState {
    /// A user that has not acted yet.
    pub(crate) fn new(engagement: f64) -> Self {
        Self {
            engagement,
            recent_clicks: VecDeque::new(),
            ewma_dwell_ms: EWMA_START_MS,
        }
    }

    /// Probability that the user's event at true time `now_ms` is a purchase.
    pub(crate) fn purchase_probability(&mut self, now_ms: i64) -> f64 {
        while self
            .recent_clicks
            .front()
            .is_some_and(|&t| t <= now_ms - CLICK_WINDOW_MS)
        {
            self.recent_clicks.pop_front();
        }
        let clicks = self.recent_clicks.len().min(CLICK_CAP) as f64;
        sigmoid(A + B * clicks + C * (self.ewma_dwell_ms - 3000.0) / 1000.0)
    }

    /// Probability that a non-purchase event is a click.
    pub(crate) fn click_probability(&self) -> f64 {
        0.15 + 0.30 * self.engagement
    }

    /// Mean dwell (ms) of this user's events.
    pub(crate) fn dwell_mean_ms(&self) -> f64 {
        1500.0 + 4000.0 * self.engagement
    }

    /// Applies a valid event at true time `now_ms`.
    pub(crate) fn observe(&mut self, event_type: EventType, dwell_ms: f64, now_ms: i64) {
        match event_type {
            EventType::Click => self.recent_clicks.push_back(now_ms),
            EventType::Purchase => self.recent_clicks.clear(),
            EventType::View => {}
        }
        self.ewma_dwell_ms += EWMA_ALPHA * (dwell_ms - self.ewma_dwell_ms);
    }
}
