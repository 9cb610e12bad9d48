//! Turning the job's feature values into the model's input tensor.
//!
//! Third step of the scoring stage, run on every micro-batch: the job hands over
//! row-major `f64` feature values with NaN for "missing"; [`Preprocessor::fill`] replaces
//! missing values by the manifest's defaults, applies each feature's transforms in a fixed
//! order — categorical encoding, clipping, standardisation — and writes `f32`s into a reused
//! buffer. `scripts/weir_preprocess.py` is the same function for the export scripts, so the
//! model is trained on exactly what the job feeds it.
//!
//! Each feature compiles to a [`ColumnPlan`]: a default plus an ordered list of
//! [`Transform`]s. A new step is a manifest field and a `Transform` variant. The hot loop
//! runs the plans fused; when no column is categorical, over parameter arrays the compiler
//! vectorizes, built for AVX2 too and picked when the CPU has it (the same bits either way).
//! It runs on the inference thread for every batch: for a small model a real share of the
//! time per row (BENCHMARKS.md, "vectorized preprocessing").

use crate::manifest::FeatureSpec;

/// One step applied to a (non-missing or defaulted) feature value.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Transform {
    /// The index of `x` among the column's codes ([`ColumnPlan::codes`], exact match),
    /// else `unknown`.
    Categories {
        /// Value of an unknown code.
        unknown: f64,
    },
    /// `x.clamp(min, max)` with absent bounds at ±infinity.
    Clip {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
    },
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
    fn apply(self, x: f64, codes: &[f64]) -> f64 {
        match self {
            Transform::Categories { unknown } => codes
                .iter()
                .position(|c| *c == x)
                .map_or(unknown, |i| i as f64),
            Transform::Clip { min, max } => x.max(min).min(max),
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
    /// Known categorical codes (see [`Transform::Categories`]).
    pub codes: Vec<f64>,
}

impl ColumnPlan {
    /// Compiles a manifest feature: categories, then clip, then scale.
    pub fn from_spec(spec: &FeatureSpec) -> Self {
        let mut transforms = Vec::new();
        let mut codes = Vec::new();
        if let Some(c) = &spec.categories {
            codes.extend_from_slice(&c.values);
            transforms.push(Transform::Categories { unknown: c.unknown });
        }
        if let Some(c) = spec.clip {
            transforms.push(Transform::Clip {
                min: c.min.unwrap_or(f64::NEG_INFINITY),
                max: c.max.unwrap_or(f64::INFINITY),
            });
        }
        if let Some(s) = spec.scale {
            transforms.push(Transform::Scale {
                mean: s.mean,
                inv_std: 1.0 / s.std,
            });
        }
        ColumnPlan {
            default: spec.default,
            transforms,
            codes,
        }
    }

    /// Applies the transforms in order (the reference for [`Preprocessor::fill`]'s fused loop).
    pub fn apply(&self, raw: f64) -> f64 {
        self.transforms
            .iter()
            .fold(raw, |x, t| t.apply(x, &self.codes))
    }
}

/// A column's steps folded into straight-line arithmetic for the hot loop: the optional code
/// lookup, then `clamp(lo, hi)` and `(x - mean) * inv_std`, whose neutral values (±infinity,
/// 0 and 1) leave a value bit-for-bit unchanged, so absent steps cost no branch.
#[derive(Debug, Clone, PartialEq)]
struct Fused {
    default: f64,
    codes: Option<(Vec<f64>, f64)>,
    lo: f64,
    hi: f64,
    mean: f64,
    inv_std: f64,
}

impl Fused {
    fn from_spec(spec: &FeatureSpec) -> Self {
        let clip = spec.clip.unwrap_or(crate::manifest::Clip {
            min: None,
            max: None,
        });
        Fused {
            default: spec.default,
            codes: spec
                .categories
                .as_ref()
                .map(|c| (c.values.clone(), c.unknown)),
            lo: clip.min.unwrap_or(f64::NEG_INFINITY),
            hi: clip.max.unwrap_or(f64::INFINITY),
            mean: spec.scale.map_or(0.0, |s| s.mean),
            inv_std: spec.scale.map_or(1.0, |s| 1.0 / s.std),
        }
    }

    #[inline(always)]
    fn apply(&self, mut x: f64) -> f64 {
        if let Some((codes, unknown)) = &self.codes {
            x = codes
                .iter()
                .position(|c| *c == x)
                .map_or(*unknown, |i| i as f64);
        }
        (x.max(self.lo).min(self.hi) - self.mean) * self.inv_std
    }
}

/// The numeric columns' steps (no categorical column in the model) laid out for a loop the
/// compiler vectorizes: each parameter in its own array, repeated so that one pass covers
/// whole rows and [`NUMERIC_TILE`] or more values (e.g. 4 rows of 8 features: 32 values).
#[derive(Debug, Clone, PartialEq)]
struct Numeric {
    /// Whether this CPU runs AVX2 (checked once, when the plan is built).
    avx2: bool,
    default: Vec<f64>,
    lo: Vec<f64>,
    hi: Vec<f64>,
    mean: Vec<f64>,
    inv_std: Vec<f64>,
}

/// At least this many values go through one pass of [`Numeric::fill`].
const NUMERIC_TILE: usize = 32;

impl Numeric {
    /// `None` when a column has categorical codes (the general loop handles those).
    fn of(fused: &[Fused]) -> Option<Self> {
        if fused.is_empty() || fused.iter().any(|f| f.codes.is_some()) {
            return None;
        }
        let rows = NUMERIC_TILE.div_ceil(fused.len());
        let tiled = |param: fn(&Fused) -> f64| -> Vec<f64> {
            fused
                .iter()
                .map(param)
                .cycle()
                .take(rows * fused.len())
                .collect()
        };
        Some(Numeric {
            #[cfg(target_arch = "x86_64")]
            avx2: std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            avx2: false,
            default: tiled(|f| f.default),
            lo: tiled(|f| f.lo),
            hi: tiled(|f| f.hi),
            mean: tiled(|f| f.mean),
            inv_std: tiled(|f| f.inv_std),
        })
    }

    /// [`Preprocessor::fill`] for numeric columns: `values` and `out` hold whole rows and
    /// have the same length. Runs the loop compiled for AVX2 (four `f64`s per instruction)
    /// when the CPU has it, else the baseline build's (two, with SSE2): the same operations
    /// in the same order, so both give the same bits.
    fn fill(&self, values: &[f64], out: &mut [f32]) -> usize {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // The workspace denies unsafe code; this call is its one use in the scoring stage.
            #[allow(unsafe_code)]
            // SAFETY: `fill_avx2` needs nothing but AVX2, and `avx2` is set only when
            // `is_x86_feature_detected!("avx2")` found it on this CPU.
            return unsafe { self.fill_avx2(values, out) };
        }
        self.fill_rows(values, out)
    }

    /// [`Self::fill_rows`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn fill_avx2(&self, values: &[f64], out: &mut [f32]) -> usize {
        self.fill_rows(values, out)
    }

    /// The loop of [`Self::fill`], inlined into each build of it.
    #[inline(always)]
    fn fill_rows(&self, values: &[f64], out: &mut [f32]) -> usize {
        let tile = self.default.len();
        let mut defaults_used = 0;
        for (src, dst) in values.chunks(tile).zip(out.chunks_mut(tile)) {
            // A last, shorter chunk still starts at a row's first column.
            let steps = self
                .default
                .iter()
                .zip(&self.lo)
                .zip(&self.hi)
                .zip(&self.mean)
                .zip(&self.inv_std);
            for ((&raw, slot), ((((&default, &lo), &hi), &mean), &inv_std)) in
                src.iter().zip(dst.iter_mut()).zip(steps)
            {
                let missing = raw.is_nan();
                defaults_used += usize::from(missing);
                let x = if missing { default } else { raw };
                // Narrowing to the model's f32 input is intended.
                *slot = ((x.max(lo).min(hi) - mean) * inv_std) as f32;
            }
        }
        defaults_used
    }
}

/// All columns of the input tensor, in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessor {
    columns: Vec<ColumnPlan>,
    fused: Vec<Fused>,
    /// The vectorizable loop's layout when every column is numeric.
    numeric: Option<Numeric>,
}

impl Preprocessor {
    /// Compiles the manifest's features (already validated by the manifest).
    pub fn new(features: &[FeatureSpec]) -> Self {
        let fused: Vec<Fused> = features.iter().map(Fused::from_spec).collect();
        Preprocessor {
            columns: features.iter().map(ColumnPlan::from_spec).collect(),
            numeric: Numeric::of(&fused),
            fused,
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
        out.resize(values.len(), 0.0);
        if let Some(numeric) = &self.numeric {
            return numeric.fill(values, out);
        }
        let width = self.fused.len().max(1);
        let mut defaults_used = 0;
        for (row, dst) in values.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
            for ((&raw, column), slot) in row.iter().zip(&self.fused).zip(dst) {
                let missing = raw.is_nan();
                defaults_used += usize::from(missing);
                let x = if missing { column.default } else { raw };
                // Narrowing to the model's f32 input is intended.
                *slot = column.apply(x) as f32;
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
            categories: None,
            clip: None,
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
    fn categories_then_clip_then_scale() {
        use crate::manifest::{Categories, Clip};
        let mut code = feature("code", 7.0, None);
        code.categories = Some(Categories {
            values: vec![3.0, 7.0, 11.0],
            unknown: -1.0,
        });
        let mut amount = feature(
            "amount",
            0.0,
            Some(Scale {
                mean: 10.0,
                std: 5.0,
            }),
        );
        amount.clip = Some(Clip {
            min: Some(0.0),
            max: Some(100.0),
        });
        let p = Preprocessor::new(&[code, amount]);
        let mut out = Vec::new();
        let used = p.fill(&[11.0, 500.0, 4.0, -3.0, f64::NAN, 20.0], &mut out);
        assert_eq!(used, 1);
        // 11 -> index 2; 500 -> clip 100 -> (100-10)/5 = 18
        // 4 -> unknown -1; -3 -> clip 0 -> -2
        // missing -> default 7 -> index 1; 20 -> 2
        assert_eq!(out, vec![2.0, 18.0, -1.0, -2.0, 1.0, 2.0]);
    }

    /// The fused hot loop gives bit-for-bit the values of the step-by-step plans.
    #[test]
    fn fused_loop_equals_the_step_by_step_plans() {
        use crate::manifest::{Categories, Clip};
        let mut a = feature("a", 2.0, None);
        a.categories = Some(Categories {
            values: vec![0.0, 2.0, 5.0],
            unknown: 9.0,
        });
        let mut b = feature(
            "b",
            -1.0,
            Some(Scale {
                mean: 0.3,
                std: 7.0,
            }),
        );
        b.clip = Some(Clip {
            min: None,
            max: Some(40.0),
        });
        let c = feature("c", 0.5, None);
        let specs = [a, b, c];
        let p = Preprocessor::new(&specs);
        let raw = [
            0.0,
            -0.0,
            1e300,
            5.0,
            123.456,
            f64::NAN,
            f64::NAN,
            f64::INFINITY,
            -3.25,
            2.0,
            40.5,
            -0.0,
        ];
        let mut out = Vec::new();
        p.fill(&raw, &mut out);
        for (i, (&x, got)) in raw.iter().zip(&out).enumerate() {
            let plan = &p.columns()[i % 3];
            let x = if x.is_nan() { plan.default } else { x };
            assert_eq!(got.to_bits(), (plan.apply(x) as f32).to_bits(), "value {i}");
        }
    }

    /// Numeric columns take the tiled loop (AVX2 where the CPU has it), which gives
    /// bit-for-bit the values of the step-by-step plans and of the baseline build, for
    /// widths that do and do not divide the tile and row counts that end mid-tile.
    #[test]
    fn numeric_loop_equals_the_plans_and_the_baseline_build() {
        use crate::manifest::Clip;
        let specials = [
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e300,
            -1e-300,
            41.5,
            -7.25,
        ];
        for width in [1, 3, 8, 11] {
            let specs: Vec<FeatureSpec> = (0..width)
                .map(|c| {
                    let mut f = feature(
                        &format!("f{c}"),
                        c as f64 - 1.5,
                        (c % 2 == 0).then_some(Scale {
                            mean: 0.25 * c as f64,
                            std: 3.0,
                        }),
                    );
                    f.clip = (c % 3 != 1).then_some(Clip {
                        min: (c % 3 == 0).then_some(-0.0),
                        max: Some(40.0),
                    });
                    f
                })
                .collect();
            let p = Preprocessor::new(&specs);
            let numeric = p
                .numeric
                .as_ref()
                .expect("numeric columns take the tiled loop");
            for rows in [1, 5, 37] {
                let raw: Vec<f64> = (0..rows * width)
                    .map(|i| specials[(i * 7 + rows) % specials.len()])
                    .collect();
                let mut out = Vec::new();
                let used = p.fill(&raw, &mut out);
                assert_eq!(used, raw.iter().filter(|x| x.is_nan()).count());
                let mut baseline = vec![0.0f32; raw.len()];
                assert_eq!(numeric.fill_rows(&raw, &mut baseline), used);
                for (i, (&x, got)) in raw.iter().zip(&out).enumerate() {
                    let plan = &p.columns()[i % width];
                    let x = if x.is_nan() { plan.default } else { x };
                    let want = (plan.apply(x) as f32).to_bits();
                    assert_eq!(got.to_bits(), want, "width {width}, value {i}");
                    assert_eq!(baseline[i].to_bits(), want, "width {width}, value {i}");
                }
            }
        }
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
