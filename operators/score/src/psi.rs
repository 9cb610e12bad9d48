//! The population stability index of two score histograms in the bins of a model manifest's
//! `baseline`: the live drift monitor compares live scores with the baseline
//! ([`crate::drift`]), `weir replay` compares one model version's scores with another's. A
//! pseudo count in every bin keeps an empty bin from making the index infinite.

use crate::manifest::Baseline;

/// Added to every bin's count before shares are taken.
pub const PSEUDO_COUNT: f64 = 0.5;

/// The bins of a baseline: `bin_edges` strictly increasing, bin `i` = `[edges[i], edges[i+1])`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreBins {
    edges: Vec<f64>,
}

impl ScoreBins {
    /// The bins of `baseline`.
    pub fn of(baseline: &Baseline) -> Self {
        ScoreBins {
            edges: baseline.bin_edges.clone(),
        }
    }

    /// Number of bins.
    pub fn len(&self) -> usize {
        self.edges.len().saturating_sub(1)
    }

    /// Whether there are no bins.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bin of `score`: scores below the first edge count in the first bin, at or above
    /// the last in the last.
    pub fn bin_of(&self, score: f64) -> usize {
        let last = self.len().saturating_sub(1);
        // Edges are strictly increasing: the bin is the number of inner edges at or below.
        self.edges[1..self.edges.len() - 1]
            .partition_point(|e| *e <= score)
            .min(last)
    }

    /// The lower edge of each bin.
    pub fn lower_edges(&self) -> &[f64] {
        &self.edges[..self.len()]
    }
}

/// Each bin's share of `counts`, with [`PSEUDO_COUNT`] added to every bin.
pub fn shares(counts: &[u64]) -> Vec<f64> {
    let total = counts.iter().sum::<u64>() as f64 + PSEUDO_COUNT * counts.len() as f64;
    counts
        .iter()
        .map(|c| (*c as f64 + PSEUDO_COUNT) / total)
        .collect()
}

/// `Σ (a_i − e_i) · ln(a_i / e_i)` over bins, `a` the shares of `actual` counts, `e` the
/// `expected` shares (from [`shares`]); `None` when `actual` is empty.
pub fn psi(actual: &[u64], expected: &[f64]) -> Option<f64> {
    if actual.iter().sum::<u64>() == 0 {
        return None;
    }
    Some(
        shares(actual)
            .iter()
            .zip(expected)
            .map(|(a, e)| (a - e) * (a / e).ln())
            .sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::{psi, shares, ScoreBins};
    use crate::manifest::Baseline;

    #[test]
    fn equal_histograms_have_zero_psi_and_shifted_ones_a_large_one() {
        let expected = shares(&[100, 200, 300, 400]);
        assert!(psi(&[100, 200, 300, 400], &expected).unwrap_or(1.0).abs() < 1e-12);
        assert!(psi(&[1, 2, 3, 4], &expected).unwrap_or(1.0).abs() < 0.01);
        let shifted = psi(&[400, 300, 200, 100], &expected).unwrap_or(0.0);
        assert!(
            shifted > 0.25,
            "a reversed histogram is a major shift: {shifted}"
        );
        assert_eq!(psi(&[0, 0, 0, 0], &expected), None);
        let empty_bin = psi(&[0, 0, 0, 1000], &expected).unwrap_or(f64::INFINITY);
        assert!(empty_bin.is_finite(), "pseudo counts keep it finite");
    }

    #[test]
    fn scores_fall_into_bins_clamped_at_both_ends() {
        let bins = ScoreBins::of(&Baseline {
            bin_edges: vec![0.0, 0.25, 0.5, 1.0],
            counts: vec![1, 1, 1],
        });
        assert_eq!(bins.len(), 3);
        let binned: Vec<usize> = [-1.0, 0.0, 0.24, 0.25, 0.7, 1.0, 7.0]
            .iter()
            .map(|s| bins.bin_of(*s))
            .collect();
        assert_eq!(binned, [0, 0, 0, 1, 2, 2, 2]);
        assert_eq!(bins.lower_edges(), [0.0, 0.25, 0.5]);
    }
}
