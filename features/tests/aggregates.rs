//! Aggregates against a naive recomputation and under merging (proptest), plus their edge
//! cases: empty windows, missing and non-finite input, overflow, first/last ties, ratio
//! validation, and the accuracy and memory bound of `distinct`.
//!
//! Tolerances (n values, ε = f64::EPSILON): counts, min, max, first, last, distinct and
//! ratios of counts compare exactly, both against the naive computation and merged against
//! sequential. Sums and means equal the naive arrival-order computation bit for bit; merged,
//! they differ only by rounding: |Δ| ≤ 2nε·Σ|x| for sums, 3nε·max|x| for means. Variances
//! (Welford, merged with Chan et al.) are within 16nε·max|x|·(max x − min x) of a two-pass
//! computation, standard deviations within the square root of that. The bound scales with
//! the spread, not with x²: values like 1e9 + U(0, 1) (in the generator) would fail it with
//! the textbook Σx² − (Σx)²/n formula.

use std::collections::HashSet;

use proptest::prelude::*;
use weir_features::aggregate::AggKind;
use weir_features::feature::{Accumulators, FeatureSet, FeatureSpec};
use weir_features::hll::{hash_value, Distinct, EXACT_LIMIT};
use weir_features::ratio::divide;
use weir_features::record::Value;
use weir_features::row::RowValues;
use weir_features::schema::RecordSchema;
use weir_testkit::schema::{F64_OPTIONAL, STRING};
use weir_testkit::spec::{over, ratio, spec};

fn schema() -> RecordSchema {
    let others = [("kind", STRING), ("s", STRING), ("x", F64_OPTIONAL)];
    weir_testkit::schema::schema("k", "ts", &others)
}

/// Every kind. The first ratio comes before its inputs; the last reads two ratios.
fn specs() -> Vec<FeatureSpec> {
    use AggKind::*;
    vec![
        ratio("a_rate", "n_a", "n"),
        spec("n", Count, None, None),
        spec("n_a", CountIf, None, Some("kind == 'a'")),
        spec("x_sum", Sum, Some("x"), None),
        spec("x_sum_b", Sum, Some("x"), Some("kind == 'b'")),
        spec("x_mean", Mean, Some("x"), None),
        spec("x_min", Min, Some("x"), None),
        spec("x_max", Max, Some("x"), None),
        spec("x_var_pop", VarPop, Some("x"), None),
        spec("x_var_samp", VarSamp, Some("x"), None),
        spec("x_sd_pop", StddevPop, Some("x"), None),
        spec("x_sd_samp", StddevSamp, Some("x"), None),
        spec("x_first", First, Some("x"), None),
        spec("x_last", Last, Some("x"), None),
        spec("s_distinct", Distinct, Some("s"), None),
        spec("x_distinct", Distinct, Some("x"), None),
        ratio("b_share", "x_sum_b", "x_sum"),
        ratio("rr", "b_share", "a_rate"),
    ]
}

fn features() -> FeatureSet {
    FeatureSet::compile(&specs(), &schema()).unwrap_or_else(|e| panic!("features: {e}"))
}

/// One input record: event time, kind 'a' or 'b', optional x, string s.
#[derive(Clone, Debug)]
struct Rec {
    ts: i64,
    a: bool,
    x: Option<f64>,
    s: u32,
}

fn record() -> impl Strategy<Value = Rec> {
    let x = prop_oneof![
        (-20i32..20).prop_map(|i| f64::from(i) * 0.5),
        -1e6f64..1e6,
        (0.0f64..1.0).prop_map(|d| 1e9 + d),
    ];
    (
        0i64..30,
        any::<bool>(),
        proptest::option::weighted(0.8, x),
        0u32..40,
    )
        .prop_map(|(ts, a, x, s)| Rec { ts, a, x, s })
}

fn aggregate(fs: &FeatureSet, recs: &[Rec]) -> Accumulators {
    let schema = schema();
    let mut accs = fs.empty();
    for r in recs {
        let mut values = vec![Value::Missing; schema.fields().len()];
        let mut put = |name: &str, v: Value| {
            let slot = schema.index_of(name).unwrap_or_else(|| panic!("{name}"));
            values[slot] = v;
        };
        put("kind", Value::Str((if r.a { "a" } else { "b" }).into()));
        put("s", Value::Str(format!("s{}", r.s).into()));
        put("ts", Value::Num(r.ts as f64));
        if let Some(x) = r.x {
            put("x", Value::Num(x));
        }
        fs.add(&mut accs, &values, r.ts);
    }
    accs
}

fn values(fs: &FeatureSet, accs: &Accumulators) -> Vec<f64> {
    let mut out = RowValues::new();
    fs.values(accs.view(), &mut out);
    out.to_vec()
}

/// The naive computation, feature by feature, in `specs()` order.
fn naive(recs: &[Rec]) -> Vec<f64> {
    let nan = f64::NAN;
    let xs: Vec<(i64, f64)> = recs.iter().filter_map(|r| r.x.map(|x| (r.ts, x))).collect();
    let n = recs.len() as f64;
    let n_a = recs.iter().filter(|r| r.a).count() as f64;
    let sum = |it: &mut dyn Iterator<Item = f64>| {
        it.fold(None, |s: Option<f64>, x| Some(s.unwrap_or(0.0) + x))
    };
    let x_sum = sum(&mut xs.iter().map(|p| p.1)).unwrap_or(nan);
    let x_sum_b = sum(&mut recs.iter().filter(|r| !r.a).filter_map(|r| r.x)).unwrap_or(nan);
    let len = xs.len() as f64;
    let mean = x_sum / len;
    let m2: f64 = xs.iter().map(|p| (p.1 - mean).powi(2)).sum();
    let (var_pop, var_samp) = match xs.len() {
        0 => (nan, nan),
        1 => (0.0, nan),
        _ => (m2 / len, m2 / (len - 1.0)),
    };
    let mut first: Option<(i64, f64)> = None;
    let mut last: Option<(i64, f64)> = None;
    for &(ts, x) in &xs {
        if first.is_none_or(|(t, _)| ts < t) {
            first = Some((ts, x));
        }
        if last.is_none_or(|(t, _)| ts >= t) {
            last = Some((ts, x));
        }
    }
    let s_distinct = recs.iter().map(|r| r.s).collect::<HashSet<_>>().len() as f64;
    let x_distinct = xs
        .iter()
        .map(|p| (p.1 + 0.0).to_bits())
        .collect::<HashSet<_>>()
        .len();
    let b_share = divide(x_sum_b, x_sum);
    let a_rate = divide(n_a, n);
    let opt = |x: Option<f64>| x.unwrap_or(nan);
    vec![
        a_rate,
        n,
        n_a,
        x_sum,
        x_sum_b,
        if xs.is_empty() { nan } else { mean },
        opt(xs.iter().map(|p| p.1).reduce(f64::min)),
        opt(xs.iter().map(|p| p.1).reduce(f64::max)),
        var_pop,
        var_samp,
        var_pop.sqrt(),
        var_samp.sqrt(),
        opt(first.map(|p| p.1)),
        opt(last.map(|p| p.1)),
        s_distinct,
        x_distinct as f64,
        b_share,
        divide(b_share, a_rate),
    ]
}

/// Per feature: the allowed |Δ| between two computations over `recs` (0 = exact); see the
/// module docs.
fn tolerances(recs: &[Rec], merged: bool) -> Vec<f64> {
    let xs: Vec<f64> = recs.iter().filter_map(|r| r.x).collect();
    let (k, eps) = (xs.len() as f64, f64::EPSILON);
    let abs_sum: f64 = xs.iter().map(|x| x.abs()).sum();
    let max = xs.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let spread = xs.iter().copied().reduce(f64::max).unwrap_or(0.0)
        - xs.iter().copied().reduce(f64::min).unwrap_or(0.0);
    let (sum, mean) = if merged {
        (2.0 * k * eps * abs_sum, 3.0 * k * eps * max)
    } else {
        (0.0, 0.0)
    };
    let var = 16.0 * k * eps * max * spread;
    let sd = var.sqrt();
    // Ratios of sums inherit the sums' rounding: checked against their inputs instead.
    let skip = f64::INFINITY;
    vec![
        0.0, 0.0, 0.0, sum, sum, mean, 0.0, 0.0, var, var, sd, sd, 0.0, 0.0, 0.0, 0.0, skip, skip,
    ]
}

fn assert_close(got: &[f64], want: &[f64], tol: &[f64]) -> Result<(), TestCaseError> {
    let names = specs();
    prop_assert_eq!(got.len(), want.len());
    for (i, ((g, w), t)) in got.iter().zip(want).zip(tol).enumerate() {
        let name = &names[i].name;
        if t.is_infinite() {
            continue;
        }
        prop_assert_eq!(g.is_nan(), w.is_nan(), "{}: got {}, want {}", name, g, w);
        if !g.is_nan() {
            prop_assert!(
                (g - w).abs() <= *t,
                "{}: got {}, want {} (tolerance {})",
                name,
                g,
                w,
                t
            );
        }
    }
    // Ratios agree with the inputs they were computed from.
    prop_assert_eq!(got[16].to_bits(), divide(got[4], got[3]).to_bits());
    prop_assert_eq!(got[17].to_bits(), divide(got[16], got[0]).to_bits());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_kind_matches_a_naive_computation(recs in proptest::collection::vec(record(), 0..60)) {
        let fs = features();
        let got = values(&fs, &aggregate(&fs, &recs));
        assert_close(&got, &naive(&recs), &tolerances(&recs, false))?;
    }

    #[test]
    fn merge_equals_aggregate_of_concatenation(
        recs in proptest::collection::vec(record(), 0..60),
        cut in 0.0f64..=1.0,
    ) {
        let fs = features();
        let cut = ((recs.len() as f64) * cut) as usize;
        let (a, b) = recs.split_at(cut);
        let mut merged = aggregate(&fs, a);
        fs.absorb(&mut merged, &aggregate(&fs, b));
        let whole = values(&fs, &aggregate(&fs, &recs));
        assert_close(&values(&fs, &merged), &whole, &tolerances(&recs, true))?;
        // Merging an empty state changes nothing, on either side.
        let mut left = fs.empty();
        fs.absorb(&mut left, &merged);
        fs.absorb(&mut merged, &fs.empty());
        prop_assert_eq!(left, merged);
    }

    #[test]
    fn distinct_merge_is_exact_across_the_sketch_threshold(
        a in proptest::collection::vec(0u32..1_500, 0..400),
        b in proptest::collection::vec(0u32..1_500, 0..400),
    ) {
        let state = |xs: &[u32]| {
            let mut d = Distinct::default();
            xs.iter().filter_map(|x| hash_value(&Value::Num(f64::from(*x)))).for_each(|h| d.insert(h));
            d
        };
        let mut merged = state(&a);
        merged.merge(&state(&b));
        let whole: Vec<u32> = a.iter().chain(&b).copied().collect();
        prop_assert_eq!(&merged, &state(&whole));
        let exact = whole.iter().collect::<HashSet<_>>().len();
        if exact <= EXACT_LIMIT {
            prop_assert_eq!(merged.count(), exact as f64);
        }
    }
}

#[path = "aggregates/edge_cases.rs"]
mod edge_cases;
