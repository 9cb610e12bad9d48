//! Mergeable aggregate accumulators. One [`Moments`] per feature per (key, window) covers
//! count, sum, mean, min and max; merging two accumulators equals aggregating the union,
//! which hopping panes and session merges (issue #3) rely on.

use serde::Deserialize;

/// Which aggregate a feature computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AggKind {
    /// Number of records (that pass the feature's `where`). Never missing: 0 for none.
    Count,
    /// `count` with a required `where` predicate.
    CountIf,
    /// Sum of a field; missing when no record had the field (SQL SUM semantics).
    Sum,
    /// Arithmetic mean of a field; missing when no values.
    Mean,
    /// Minimum of a field; missing when no values.
    Min,
    /// Maximum of a field; missing when no values.
    Max,
}

impl AggKind {
    /// Whether the aggregate reads a field's value.
    pub fn needs_field(&self) -> bool {
        !matches!(self, AggKind::Count | AggKind::CountIf)
    }
}

/// Count, sum, min and max of the values seen. Sums are accumulated in arrival order, so a
/// naive recomputation in the same order gives bit-identical results.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moments {
    /// Number of values (or records, for counts).
    pub count: u64,
    /// Sum of values.
    pub sum: f64,
    /// Minimum value (`+inf` when empty).
    pub min: f64,
    /// Maximum value (`-inf` when empty).
    pub max: f64,
}

impl Default for Moments {
    fn default() -> Self {
        Moments {
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Moments {
    /// Adds one value (for counts, any value, e.g. 0).
    #[inline]
    pub fn add(&mut self, x: f64) {
        self.count += 1;
        self.sum += x;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    /// Combines with another accumulator: the result describes the union of both inputs.
    pub fn merge(&mut self, other: &Moments) {
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The aggregate's value; `NaN` encodes "missing".
    pub fn value(&self, kind: AggKind) -> f64 {
        if self.count == 0 {
            return match kind {
                AggKind::Count | AggKind::CountIf => 0.0,
                _ => f64::NAN,
            };
        }
        match kind {
            AggKind::Count | AggKind::CountIf => self.count as f64,
            AggKind::Sum => self.sum,
            AggKind::Mean => self.sum / self.count as f64,
            AggKind::Min => self.min,
            AggKind::Max => self.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn merge_equals_aggregate_of_union(a in proptest::collection::vec(-1e6f64..1e6, 0..50), b in proptest::collection::vec(-1e6f64..1e6, 0..50)) {
            let mut left = Moments::default();
            a.iter().for_each(|x| left.add(*x));
            let mut right = Moments::default();
            b.iter().for_each(|x| right.add(*x));
            let mut union = Moments::default();
            a.iter().chain(b.iter()).for_each(|x| union.add(*x));
            left.merge(&right);
            prop_assert_eq!(left.count, union.count);
            prop_assert_eq!(left.min, union.min);
            prop_assert_eq!(left.max, union.max);
            prop_assert!((left.sum - union.sum).abs() <= 1e-6 * (1.0 + union.sum.abs()));
        }
    }

    #[test]
    fn empty_values() {
        let m = Moments::default();
        assert_eq!(m.value(AggKind::Count), 0.0);
        assert!(m.value(AggKind::Mean).is_nan());
        assert!(m.value(AggKind::Sum).is_nan());
    }
}
