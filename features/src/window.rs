//! Event-time window definitions (`[window]` / `[windows.<name>]` in the job file) and the
//! arithmetic of aligned windows. Pipeline position: the window operator's state
//! ([`crate::window_state::KeyedWindows`]) asks this module which pane an event updates and
//! which windows a pane belongs to; sessions are data-driven and live in [`crate::sessions`].
//!
//! Aligned windows are aligned to the Unix epoch. A tumbling window of `size` is a hopping
//! window whose slide equals its size. A hopping window `[k*slide, k*slide + size)` is made of
//! panes of `gcd(size, slide)`: every event updates exactly one pane, and a window's value is
//! the merge of its `size / pane` panes, computed when it fires.

use serde::{Deserialize, Serialize};

use crate::error::{FeatureError, Result};
use crate::vocab::EventTime;

/// A window definition from the job file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WindowSpec {
    /// Fixed-size, non-overlapping windows aligned to the Unix epoch: `[k*size, (k+1)*size)`.
    Tumbling {
        /// Window length, e.g. `"1m"`.
        #[serde(with = "crate::duration_ms")]
        size: i64,
    },
    /// Overlapping windows `[k*slide, k*slide + size)` aligned to the Unix epoch; every event
    /// belongs to `size / slide` of them (rounded up). Requires `0 < slide <= size`.
    Hopping {
        /// Window length, e.g. `"1h"`.
        #[serde(with = "crate::duration_ms")]
        size: i64,
        /// Distance between window starts, e.g. `"1m"`.
        #[serde(with = "crate::duration_ms")]
        slide: i64,
    },
    /// Per-key sessions: events closer than `gap` to a session belong to it. A session is
    /// `[first ts, last ts + gap)` and never longer than `max_length`; see
    /// [`crate::sessions`] for the exact merge and split rules.
    Session {
        /// Inactivity gap that closes a session, e.g. `"30m"`.
        #[serde(with = "crate::duration_ms")]
        gap: i64,
        /// Longest a session may be (`end - start`), e.g. `"4h"`; must be `>= gap`.
        #[serde(with = "crate::duration_ms")]
        max_length: i64,
    },
    /// Per-event trigger: every event emits a row over the key's events in
    /// `(ts - range, ts]` (Flink OVER RANGE); see [`crate::over_range`].
    OverRange {
        /// Trailing range, e.g. `"5m"`.
        #[serde(with = "crate::duration_ms")]
        range: i64,
    },
}

/// The bounds of one window: `[start, end)` in event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WindowBounds {
    /// Inclusive start.
    pub start: EventTime,
    /// Exclusive end.
    pub end: EventTime,
}

/// Geometry of an aligned (tumbling or hopping) window: windows `[k*slide, k*slide + size)`
/// built from panes of `pane = gcd(size, slide)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aligned {
    /// Window length.
    pub size: i64,
    /// Distance between window starts (`== size` for tumbling windows).
    pub slide: i64,
    /// Pane length: `gcd(size, slide)`.
    pub pane: i64,
}

impl WindowSpec {
    /// Checks the definition; the message says how to fix it.
    pub fn validate(&self) -> Result<()> {
        let fail = |m: String| Err(FeatureError::Window(m));
        match *self {
            WindowSpec::Tumbling { size } if size <= 0 => {
                fail(format!("tumbling window size must be > 0, got {size} ms"))
            }
            WindowSpec::Hopping { size, slide } if size <= 0 || slide <= 0 || slide > size => {
                fail(format!(
                    "hopping window needs 0 < slide <= size, got size {size} ms, slide {slide} ms"
                ))
            }
            WindowSpec::Session { gap, max_length } if gap <= 0 || max_length < gap => fail(
                format!("session window needs 0 < gap <= max_length, got gap {gap} ms, max_length {max_length} ms"),
            ),
            WindowSpec::OverRange { range } if range <= 0 => {
                fail(format!("over_range window needs range > 0, got {range} ms"))
            }
            _ => Ok(()),
        }
    }

    /// The geometry of a tumbling or hopping window; `None` for sessions.
    pub fn aligned(&self) -> Option<Aligned> {
        match *self {
            WindowSpec::Tumbling { size } => Some(Aligned::new(size, size)),
            WindowSpec::Hopping { size, slide } => Some(Aligned::new(size, slide)),
            WindowSpec::Session { .. } | WindowSpec::OverRange { .. } => None,
        }
    }
}

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a.rem_euclid(b));
    }
    a.abs()
}

impl Aligned {
    /// Geometry of windows of `size` every `slide` (both > 0, validated by the spec).
    pub fn new(size: i64, slide: i64) -> Self {
        let (size, slide) = (size.max(1), slide.max(1));
        Aligned {
            size,
            slide,
            pane: gcd(size, slide).max(1),
        }
    }

    /// Start of the one pane an event at `ts` updates.
    #[inline]
    pub fn pane_start(&self, ts: EventTime) -> EventTime {
        ts.div_euclid(self.pane).saturating_mul(self.pane)
    }

    /// The smallest window end strictly after `t`.
    pub fn next_end_after(&self, t: EventTime) -> EventTime {
        let k = t.saturating_sub(self.size).div_euclid(self.slide) + 1;
        k.saturating_mul(self.slide).saturating_add(self.size)
    }

    /// End of the earliest window containing the pane that starts at `pane_start`.
    pub fn first_end(&self, pane_start: EventTime) -> EventTime {
        self.next_end_after(pane_start.saturating_add(self.pane) - 1)
    }

    /// End of the latest window containing the pane that starts at `pane_start`.
    pub fn last_end(&self, pane_start: EventTime) -> EventTime {
        pane_start
            .div_euclid(self.slide)
            .saturating_mul(self.slide)
            .saturating_add(self.size)
    }

    /// Every window containing `ts`, earliest first.
    pub fn windows_containing(&self, ts: EventTime) -> impl Iterator<Item = WindowBounds> {
        let pane = self.pane_start(ts);
        let (first, last, slide, size) = (
            self.first_end(pane),
            self.last_end(pane),
            self.slide,
            self.size,
        );
        (0..)
            .map(move |i: i64| first.saturating_add(i.saturating_mul(slide)))
            .take_while(move |&end| end <= last)
            .map(move |end| WindowBounds {
                start: end - size,
                end,
            })
    }
}
