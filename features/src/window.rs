//! Event-time window assignment. Issue #2 ships tumbling windows; hopping (panes of
//! gcd(size, slide)) and session windows extend [`WindowSpec`] without changing its users.

use serde::Deserialize;

use crate::error::{FeatureError, Result};
use crate::vocab::EventTime;

/// A window definition from the job file (`[window]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WindowSpec {
    /// Fixed-size, non-overlapping windows aligned to the Unix epoch: `[k*size, (k+1)*size)`.
    Tumbling {
        /// Window length, e.g. `"1m"`.
        #[serde(with = "crate::duration_ms")]
        size: i64,
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

impl WindowSpec {
    /// Checks the definition.
    pub fn validate(&self) -> Result<()> {
        match self {
            WindowSpec::Tumbling { size } if *size <= 0 => Err(FeatureError::Window(format!(
                "tumbling window size must be > 0, got {size} ms"
            ))),
            WindowSpec::Tumbling { .. } => Ok(()),
        }
    }

    /// The window an event at `ts` belongs to.
    pub fn assign(&self, ts: EventTime) -> WindowBounds {
        match *self {
            WindowSpec::Tumbling { size } => {
                let start = ts.div_euclid(size) * size;
                WindowBounds {
                    start,
                    end: start.saturating_add(size),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn tumbling_window_contains_its_events(ts in -1_000_000_000_000i64..4_000_000_000_000i64, size in 1i64..86_400_000) {
            let w = WindowSpec::Tumbling { size }.assign(ts);
            prop_assert!(w.start <= ts && ts < w.end);
            prop_assert_eq!(w.end - w.start, size);
            prop_assert_eq!(w.start.rem_euclid(size), 0);
        }
    }

    #[test]
    fn zero_size_is_rejected() {
        assert!(WindowSpec::Tumbling { size: 0 }.validate().is_err());
    }
}
