//! Turning the job's feature values into the model's input tensor.
//!
//! Third step of the scoring stage, run on every micro-batch: the job hands over
//! row-major `f64` feature values with NaN for "missing"; [`Preprocessor::fill`] replaces
//! missing values by the manifest's defaults, applies each feature's transforms
//! (today only standardisation) and writes `f32`s into a reused buffer.
//!
//! Each feature compiles to a [`ColumnPlan`]: a default plus an ordered list of
//! [`Transform`]s. Adding clipping or categorical encoding means adding a manifest field
//! and a `Transform` variant; nothing else changes.

use crate::manifest::FeatureSpec;

/// One step applied to a (non-missing or defaulted) feature value.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Transform {
    /// `(x - mean) * inv_std`, from the manifest's `scale: {mean, std}`.
    Scale {
        /// Subtracted first.
        mean: f64,
        /// `1 / std`.
        inv_std: f64,
    },
}

impl Transform {
    #[inline]
    fn apply(self, x: f64) -> f64 {
        match self {
            Transform::Scale { mean, inv_std } => (x - mean) * inv_std,
        }
    }
}

/// How one input column is produced from one job value.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnPlan {
    /// Raw value substituted for a missing (NaN) job value, before the transforms.
    pub default: f64,
    /// Applied in order to every value, defaulted or not.
    pub transforms: Vec<Transform>,
}

impl ColumnPlan {
    /// Compiles a manifest feature.
    pub fn from_spec(spec: &FeatureSpec) -> Self {
        let transforms = spec
            .scale
            .iter()
            .map(|s| Transform::Scale {
                mean: s.mean,
                inv_std: 1.0 / s.std,
            })
            .collect();
        ColumnPlan {
            default: spec.default,
            transforms,
        }
    }

    #[inline]
    fn apply(&self, raw: f64) -> f64 {
        self.transforms.iter().fold(raw, |x, t| t.apply(x))
    }
}

/// All columns of the input tensor, in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessor {
    columns: Vec<ColumnPlan>,
}

impl Preprocessor {
    /// Compiles the manifest's features (already validated by the manifest).
    pub fn new(features: &[FeatureSpec]) -> Self {
        Preprocessor {
            columns: features.iter().map(ColumnPlan::from_spec).collect(),
        }
    }

    /// Number of input columns.
    pub fn width(&self) -> usize {
        self.columns.len()
    }

    /// The compiled plans, in input order.
    pub fn columns(&self) -> &[ColumnPlan] {
        &self.columns
    }

    /// Clears `out` and fills it with the model input for `values`, which holds whole rows
    /// of [`Self::width`] values each, row-major, NaN meaning "missing".
    ///
    /// Returns how many missing values were replaced by defaults. `out` keeps its
    /// capacity, so a reused buffer does not reallocate once it has seen the largest batch.
    /// The caller checks that `values.len()` is a multiple of the width.
    pub fn fill(&self, values: &[f64], out: &mut Vec<f32>) -> usize {
        out.clear();
        out.reserve(values.len());
        let mut defaults_used = 0;
        for row in values.chunks_exact(self.columns.len().max(1)) {
            for (&raw, plan) in row.iter().zip(&self.columns) {
                let x = if raw.is_nan() {
                    defaults_used += 1;
                    plan.default
                } else {
                    raw
                };
                // Narrowing to the model's f32 input is intended.
                out.push(plan.apply(x) as f32);
            }
        }
        defaults_used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{ElementType, Scale};

    fn feature(name: &str, default: f64, scale: Option<Scale>) -> FeatureSpec {
        FeatureSpec {
            name: name.into(),
            ty: ElementType::Float32,
            default,
            scale,
        }
    }

    #[test]
    fn defaults_then_scale_row_major() {
        let p = Preprocessor::new(&[
            feature("a", 1.0, None),
            feature(
                "b",
                4.0,
                Some(Scale {
                    mean: 2.0,
                    std: 0.5,
                }),
            ),
        ]);
        let mut out = Vec::new();
        let used = p.fill(&[f64::NAN, 3.0, 5.0, f64::NAN], &mut out);
        assert_eq!(used, 2);
        // row 0: a missing -> 1.0; b = (3-2)/0.5 = 2.0
        // row 1: a = 5.0;          b missing -> 4.0 -> (4-2)/0.5 = 4.0
        assert_eq!(out, vec![1.0, 2.0, 5.0, 4.0]);
    }

    #[test]
    fn reused_buffer_does_not_reallocate() {
        let p = Preprocessor::new(&[feature("a", 0.0, None)]);
        let mut out = Vec::new();
        p.fill(&[1.0; 64], &mut out);
        let ptr = out.as_ptr();
        p.fill(&[2.0; 16], &mut out);
        assert_eq!(out.len(), 16);
        assert_eq!(out.as_ptr(), ptr);
    }
}
