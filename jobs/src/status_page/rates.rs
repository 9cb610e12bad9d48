//! Records per second per stage for the status page, from the stages' cumulative in/out
//! counters: each render samples the totals, and the rate is the change since the newest
//! sample at least [`RATE_SPAN_MS`] old (since the server started, in its first seconds).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// The span a rate is measured over, once the server has run that long.
pub const RATE_SPAN_MS: u64 = 5_000;

/// Cumulative (in, out) records of each stage at one time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sample {
    at_ms: u64,
    totals: Vec<(u64, u64)>,
}

/// The samples rates are computed from.
#[derive(Debug)]
pub struct RateMeter {
    samples: Mutex<VecDeque<Sample>>,
}

impl RateMeter {
    /// A meter whose first sample is `stages` zeros at `start_ms` (the counters start at 0).
    pub fn new(stages: usize, start_ms: u64) -> Self {
        let first = Sample {
            at_ms: start_ms,
            totals: vec![(0, 0); stages],
        };
        RateMeter {
            samples: Mutex::new(VecDeque::from([first])),
        }
    }

    /// Records `totals` (one (in, out) per stage) at `now_ms` and returns each stage's
    /// (in, out) records per second (`None` when no time has passed since the base sample).
    pub fn sample(&self, now_ms: u64, totals: &[(u64, u64)]) -> Vec<Option<(f64, f64)>> {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        // The base is the newest sample at least RATE_SPAN_MS old (or the oldest there is).
        while samples
            .get(1)
            .is_some_and(|s| now_ms.saturating_sub(s.at_ms) >= RATE_SPAN_MS)
        {
            samples.pop_front();
        }
        let base = samples.front().cloned();
        samples.push_back(Sample {
            at_ms: now_ms,
            totals: totals.to_vec(),
        });
        let seconds = base
            .as_ref()
            .map_or(0.0, |b| now_ms.saturating_sub(b.at_ms) as f64 / 1e3);
        totals
            .iter()
            .enumerate()
            .map(|(stage, (now_in, now_out))| {
                let (was_in, was_out) = base
                    .as_ref()
                    .and_then(|b| b.totals.get(stage).copied())
                    .unwrap_or((0, 0));
                (seconds > 0.0).then(|| {
                    (
                        now_in.saturating_sub(was_in) as f64 / seconds,
                        now_out.saturating_sub(was_out) as f64 / seconds,
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::RateMeter;

    #[test]
    fn rates_are_measured_since_the_start_then_over_the_last_span() {
        let meter = RateMeter::new(1, 0);
        assert_eq!(
            meter.sample(2_000, &[(200, 100)]),
            vec![Some((100.0, 50.0))]
        );
        assert_eq!(
            meter.sample(2_000, &[(200, 100)]),
            vec![Some((100.0, 50.0))]
        );
        // 6 s in: the base is still the start (the 2 s samples are only 4 s old).
        assert_eq!(
            meter.sample(6_000, &[(600, 300)]),
            vec![Some((100.0, 50.0))]
        );
        // 8 s in: the base is the sample of 2 s, the newest at least 5 s old.
        assert_eq!(
            meter.sample(8_000, &[(800, 400)]),
            vec![Some((100.0, 50.0))]
        );
        // Nothing read in the next 6 s: 0 per second over that span.
        assert_eq!(meter.sample(14_000, &[(800, 400)]), vec![Some((0.0, 0.0))]);
    }

    #[test]
    fn no_time_passed_is_no_rate() {
        let meter = RateMeter::new(2, 1_000);
        assert_eq!(meter.sample(1_000, &[(5, 5), (1, 1)]), vec![None, None]);
    }
}
