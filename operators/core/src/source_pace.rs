//! Whether a source may read: the `max_lag` rule of the source operator
//! (`crate::source_operator`), as a pure function of two probed frontiers — the job's output
//! (the scores, or the feature rows) and the sources' own progress — both cluster-wide.

use weir_features::vocab::Tick;

/// How the job's output keeps pace with its sources, for the `max_lag` bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Some worker has not started its dataflow: every frontier is still at Timely's
    /// minimum, tick 0 (no source tick is 0). Nothing read now could get past it.
    Starting,
    /// The output is more than the bound behind the slowest source.
    Lagging,
    /// Reading is fine.
    Keeping,
}

/// Compares the probed `output` frontier with the `sources`' frontier (the slowest source
/// instance's tick), both cluster-wide, so hosts whose clocks disagree do not read as lag:
/// the output can only be as far as the slowest source. An empty frontier (that stage or
/// every source has ended) never holds a source back.
pub(crate) fn pace(output: &[Tick], sources: &[Tick], lag: Tick) -> Pace {
    let (Some(&out), Some(&slowest)) = (output.iter().min(), sources.iter().min()) else {
        return Pace::Keeping;
    };
    if out == 0 || slowest == 0 {
        Pace::Starting
    } else if out.saturating_add(lag) < slowest {
        Pace::Lagging
    } else {
        Pace::Keeping
    }
}

#[cfg(test)]
mod tests {
    use super::{pace, Pace};

    #[test]
    fn output_more_than_the_bound_behind_the_slowest_source_lags() {
        assert_eq!(pace(&[100], &[120], 20), Pace::Keeping);
        assert_eq!(pace(&[100], &[121], 20), Pace::Lagging);
        assert_eq!(pace(&[121], &[121], 20), Pace::Keeping);
    }

    #[test]
    fn a_source_clock_ahead_of_the_others_is_not_lag() {
        // This source's own tick may be far ahead (its host's clock); the output cannot pass
        // the slowest source, so only the distance to that counts.
        assert_eq!(pace(&[1_000], &[1_005], 20), Pace::Keeping);
    }

    #[test]
    fn tick_zero_means_a_worker_has_not_started() {
        assert_eq!(pace(&[0], &[500], 20), Pace::Starting);
        assert_eq!(pace(&[0], &[0], 20), Pace::Starting);
        assert_eq!(pace(&[480], &[0], 20), Pace::Starting);
    }

    #[test]
    fn ended_stages_hold_nothing_back() {
        assert_eq!(pace(&[], &[500], 20), Pace::Keeping);
        assert_eq!(pace(&[100], &[], 20), Pace::Keeping);
    }
}
