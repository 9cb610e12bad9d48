//! How two model versions' scores of the same windows differ, for `weir replay`
//! ([`crate::replay`]): read from score records that carry both (the primary's `score` and the
//! shadow's `shadow.score`), it counts the windows compared, the mean and largest absolute
//! difference, the agreement at a decision threshold and the PSI of the second version's
//! score histogram against the first's, in the bins of the first's manifest baseline. A
//! window re-emitted by a late record (a higher `revision`) counts once, as its latest revision.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use weir_score::psi::{psi, shares, ScoreBins};

/// The parts of a score record the comparison reads.
#[derive(Deserialize)]
struct ScoreRecord {
    key: String,
    window_end: i64,
    #[serde(default)]
    revision: u64,
    score: Option<f64>,
    shadow: Option<ShadowPart>,
}

#[derive(Deserialize)]
struct ShadowPart {
    score: Option<f64>,
}

/// The largest difference seen, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct LargestDifference {
    /// `|a − b|`.
    pub difference: f64,
    /// The window's key.
    pub key: String,
    /// The window's end (epoch ms).
    pub window_end: i64,
}

/// Both versions' scores of one window's latest revision (`None`: that version failed).
type LatestScores = (u64, Option<f64>, Option<f64>);

/// The comparison: the records read so far, one per window (a window re-emitted by a late
/// record counts once, with its latest revision), and the figures computed from them.
#[derive(Clone, Debug)]
pub struct ScoreComparison {
    bins: ScoreBins,
    threshold: f64,
    windows: BTreeMap<(String, i64), LatestScores>,
    /// Windows both versions scored.
    pub compared: u64,
    /// Windows the first version failed to score (not compared).
    pub first_failed: u64,
    /// Windows the second version failed to score (not compared).
    pub second_failed: u64,
    sum_difference: f64,
    /// The largest `|a − b|`.
    pub largest: Option<LargestDifference>,
    /// Windows where the first version is at or above the threshold and the second below.
    pub only_first_above: u64,
    /// Windows where the second version is at or above the threshold and the first below.
    pub only_second_above: u64,
    first_histogram: Vec<u64>,
    second_histogram: Vec<u64>,
}

impl ScoreComparison {
    /// A comparison in `bins`, agreement at `threshold`.
    pub fn new(bins: ScoreBins, threshold: f64) -> Self {
        let n = bins.len();
        ScoreComparison {
            bins,
            threshold,
            windows: BTreeMap::new(),
            compared: 0,
            first_failed: 0,
            second_failed: 0,
            sum_difference: 0.0,
            largest: None,
            only_first_above: 0,
            only_second_above: 0,
            first_histogram: vec![0; n],
            second_histogram: vec![0; n],
        }
    }

    /// Adds one score record (a JSON line of the score file); a later revision of a window
    /// replaces an earlier one.
    pub fn add_record(&mut self, line: &[u8]) -> Result<()> {
        let record: ScoreRecord = serde_json::from_slice(line).context("not a score record")?;
        let Some(shadow) = record.shadow else {
            bail!("a score record without the second version's score (`shadow`)");
        };
        let latest = (record.revision, record.score, shadow.score);
        let window = self
            .windows
            .entry((record.key, record.window_end))
            .or_insert(latest);
        if latest.0 > window.0 {
            *window = latest;
        }
        Ok(())
    }

    /// Computes the figures over the windows read (call after the last [`Self::add_record`];
    /// the counts and figures read before are those of the previous tally).
    pub fn tally(&mut self) {
        let fresh = ScoreComparison::new(self.bins.clone(), self.threshold);
        let windows = std::mem::take(&mut self.windows);
        *self = fresh;
        for ((key, window_end), (_, a, b)) in &windows {
            match (a, b) {
                (None, second) => {
                    self.first_failed += 1;
                    self.second_failed += u64::from(second.is_none());
                }
                (Some(_), None) => self.second_failed += 1,
                (Some(a), Some(b)) => self.add(key, *window_end, *a, *b),
            }
        }
        self.windows = windows;
    }

    fn add(&mut self, key: &str, window_end: i64, a: f64, b: f64) {
        self.compared += 1;
        let difference = (a - b).abs();
        self.sum_difference += difference;
        if self
            .largest
            .as_ref()
            .is_none_or(|l| difference > l.difference)
        {
            self.largest = Some(LargestDifference {
                difference,
                key: key.to_owned(),
                window_end,
            });
        }
        match (a >= self.threshold, b >= self.threshold) {
            (true, false) => self.only_first_above += 1,
            (false, true) => self.only_second_above += 1,
            _ => {}
        }
        self.first_histogram[self.bins.bin_of(a)] += 1;
        self.second_histogram[self.bins.bin_of(b)] += 1;
    }

    /// Mean `|a − b|` (`None` before any window was compared).
    pub fn mean_difference(&self) -> Option<f64> {
        (self.compared > 0).then(|| self.sum_difference / self.compared as f64)
    }

    /// Share of compared windows on the same side of the threshold.
    pub fn agreement(&self) -> Option<f64> {
        let disagree = self.only_first_above + self.only_second_above;
        (self.compared > 0).then(|| 1.0 - disagree as f64 / self.compared as f64)
    }

    /// PSI of the second version's histogram against the first's.
    pub fn psi(&self) -> Option<f64> {
        psi(&self.second_histogram, &shares(&self.first_histogram))
    }

    /// The report, naming the versions `first` and `second`.
    pub fn render(&self, first: &str, second: &str) -> String {
        let mut out = format!(
            "compared {} window(s) scored by both {first} (A) and {second} (B)",
            self.compared
        );
        let (Some(mean), Some(agreement), Some(psi), Some(largest)) = (
            self.mean_difference(),
            self.agreement(),
            self.psi(),
            &self.largest,
        ) else {
            let _ = write!(
                out,
                "\n  nothing to compare (A failed {}, B failed {})",
                self.first_failed, self.second_failed
            );
            return out;
        };
        let _ = write!(
            out,
            "\n  |A − B|: mean {mean:.6}, max {:.6} (key {}, window ending {})\
             \n  agreement at threshold {}: {:.2} % ({} window(s) with A ≥ threshold > B, {} with B ≥ threshold > A)\
             \n  PSI of B against A in A's {} baseline bins: {psi:.6}\
             \n  not compared: A failed {}, B failed {}",
            largest.difference,
            largest.key,
            largest.window_end,
            self.threshold,
            agreement * 100.0,
            self.only_first_above,
            self.only_second_above,
            self.bins.len(),
            self.first_failed,
            self.second_failed,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use weir_score::manifest::Baseline;
    use weir_score::psi::ScoreBins;

    use super::ScoreComparison;

    fn comparison() -> ScoreComparison {
        let bins = ScoreBins::of(&Baseline {
            bin_edges: vec![0.0, 0.5, 1.0],
            counts: vec![1, 1],
        });
        ScoreComparison::new(bins, 0.5)
    }

    fn record(key: &str, a: Option<f64>, b: Option<f64>) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "key": key, "window_end": 60_000, "score": a, "shadow": { "score": b }
        }))
        .expect("json")
    }

    #[test]
    fn differences_agreement_and_failures_are_counted() {
        let mut c = comparison();
        for line in [
            record("a", Some(0.2), Some(0.3)),
            record("b", Some(0.6), Some(0.4)),
            record("c", Some(0.9), Some(0.9)),
            record("d", None, Some(0.1)),
            record("e", Some(0.1), None),
        ] {
            c.add_record(&line).expect("record");
        }
        c.tally();
        assert_eq!((c.compared, c.first_failed, c.second_failed), (3, 1, 1));
        let mean = c.mean_difference().unwrap_or_default();
        assert!((mean - 0.1).abs() < 1e-12, "{mean}");
        let largest = c.largest.clone().expect("largest");
        assert_eq!(largest.key, "b");
        assert!((largest.difference - 0.2).abs() < 1e-12);
        assert_eq!((c.only_first_above, c.only_second_above), (1, 0));
        let agreement = c.agreement().unwrap_or_default();
        assert!((agreement - 2.0 / 3.0).abs() < 1e-12);
        let report = c.render("m v1", "m v2");
        assert!(report.contains("compared 3 window(s) scored by both m v1 (A) and m v2 (B)"));
        assert!(
            report.contains("not compared: A failed 1, B failed 1"),
            "{report}"
        );
    }

    #[test]
    fn a_version_against_itself_has_no_difference_and_zero_psi() {
        let mut c = comparison();
        for (key, s) in [("a", 0.1), ("b", 0.7), ("c", 0.8)] {
            c.add_record(&record(key, Some(s), Some(s)))
                .expect("record");
        }
        c.tally();
        assert_eq!(c.mean_difference(), Some(0.0));
        assert_eq!(c.agreement(), Some(1.0));
        assert!(c.psi().unwrap_or(1.0).abs() < 1e-12);
    }

    #[test]
    fn a_window_re_emitted_by_a_late_record_counts_once_with_its_latest_revision() {
        let mut c = comparison();
        let revision = |n: u64, a: f64, b: f64| {
            serde_json::to_vec(&serde_json::json!({
                "key": "a", "window_end": 60_000, "revision": n,
                "score": a, "shadow": { "score": b }
            }))
            .expect("json")
        };
        for line in [
            revision(1, 0.9, 0.1),
            revision(0, 0.2, 0.2),
            revision(2, 0.3, 0.35),
        ] {
            c.add_record(&line).expect("record");
        }
        c.tally();
        assert_eq!(c.compared, 1);
        let mean = c.mean_difference().unwrap_or_default();
        assert!(
            (mean - 0.05).abs() < 1e-12,
            "revision 2 is the one compared: {mean}"
        );
    }

    #[test]
    fn a_record_without_the_second_score_is_refused() {
        let mut c = comparison();
        let line = br#"{"key":"a","window_end":1,"score":0.5}"#;
        assert!(c.add_record(line).is_err());
    }
}
