//! Edge cases of the aggregates (part of `tests/aggregates.rs`).

use super::*;

fn rec(ts: i64, x: Option<f64>) -> Rec {
    Rec {
        ts,
        a: true,
        x,
        s: 0,
    }
}

fn value_of(fs: &FeatureSet, accs: &Accumulators, name: &str) -> f64 {
    let at = fs.names().iter().position(|n| n == name);
    values(fs, accs)[at.unwrap_or_else(|| panic!("no feature {name}"))]
}

#[test]
fn empty_window_counts_zero_and_everything_else_is_missing() {
    let fs = features();
    let got = values(&fs, &fs.empty());
    for (spec, v) in specs().iter().zip(&got) {
        match spec.agg {
            AggKind::Count | AggKind::CountIf | AggKind::Distinct => assert_eq!(*v, 0.0),
            _ => assert!(v.is_nan(), "{}: {v}", spec.name),
        }
    }
    // A window whose records all lack x: counts count, x aggregates stay missing.
    let accs = aggregate(&fs, &[rec(1, None), rec(2, None)]);
    assert_eq!(value_of(&fs, &accs, "n"), 2.0);
    assert_eq!(value_of(&fs, &accs, "x_distinct"), 0.0);
    assert!(value_of(&fs, &accs, "x_sum").is_nan());
    assert!(value_of(&fs, &accs, "x_first").is_nan());
}

#[test]
fn non_finite_input_is_ignored_like_a_missing_value() {
    let fs = features();
    let clean = aggregate(&fs, &[rec(1, Some(2.0)), rec(3, None)]);
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let dirty = aggregate(&fs, &[rec(1, Some(2.0)), rec(3, Some(bad))]);
        assert_eq!(dirty, clean, "{bad}");
    }
}

#[test]
fn overflowing_sums_and_variances_are_missing() {
    let fs = features();
    let accs = aggregate(&fs, &[rec(1, Some(f64::MAX)), rec(2, Some(f64::MAX))]);
    // The sum overflows, and the mean is computed from it (documented: missing).
    for name in ["x_sum", "x_mean", "b_share"] {
        assert!(value_of(&fs, &accs, name).is_nan(), "{name}");
    }
    // Welford never forms x²: equal huge values have variance 0.
    assert_eq!(value_of(&fs, &accs, "x_var_pop"), 0.0);
    assert_eq!(value_of(&fs, &accs, "x_max"), f64::MAX);
    assert_eq!(value_of(&fs, &accs, "n"), 2.0);
    let spread = aggregate(&fs, &[rec(1, Some(f64::MAX)), rec(2, Some(-f64::MAX))]);
    assert!(value_of(&fs, &spread, "x_var_samp").is_nan());
}

#[test]
fn first_and_last_break_event_time_ties_by_arrival() {
    let fs = features();
    let recs = [
        (5, 1.0),
        (5, 2.0),
        (3, 7.0),
        (3, 8.0),
        (9, 4.0),
        (9, 5.0),
        (6, 0.0),
    ]
    .map(|(ts, x)| rec(ts, Some(x)));
    let accs = aggregate(&fs, &recs);
    assert_eq!(value_of(&fs, &accs, "x_first"), 7.0);
    assert_eq!(value_of(&fs, &accs, "x_last"), 5.0);
    // Merged: `into` counts as the earlier arrivals.
    let mut merged = aggregate(&fs, &recs[..1]);
    fs.absorb(&mut merged, &aggregate(&fs, &recs[1..2]));
    assert_eq!(value_of(&fs, &merged, "x_first"), 1.0);
    assert_eq!(value_of(&fs, &merged, "x_last"), 2.0);
}

#[test]
fn ratios_follow_their_inputs() {
    let fs = features();
    let accs = aggregate(&fs, &[rec(1, Some(3.0)), rec(2, Some(1.0))]);
    assert_eq!(value_of(&fs, &accs, "a_rate"), 1.0);
    // No 'b' record: x_sum_b is missing, so is its share.
    assert!(value_of(&fs, &accs, "b_share").is_nan());
    let zero = aggregate(&fs, &[rec(1, Some(3.0)), rec(2, Some(-3.0))]);
    assert!(value_of(&fs, &zero, "b_share").is_nan(), "x_sum == 0");
    assert_eq!(divide(3.0, 4.0), 0.75);
    assert!(divide(1.0, 0.0).is_nan() && divide(f64::NAN, 1.0).is_nan());
    assert!(divide(f64::MAX, 0.5).is_nan(), "overflow");
}

fn compile_error(specs: &[FeatureSpec]) -> String {
    match FeatureSet::compile(specs, &schema()) {
        Ok(_) => panic!("compiled: {specs:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn invalid_ratios_are_rejected_with_a_reason() {
    let n = spec("n", AggKind::Count, None, None);
    let on = |window: &str, s: FeatureSpec| over(s, window);
    let cases: Vec<(Vec<FeatureSpec>, &str)> = vec![
        (
            vec![n.clone(), ratio("r", "n", "nope")],
            "the denominator `nope` is not a feature",
        ),
        (
            vec![n.clone(), ratio("r", "r", "n")],
            "the numerator is the ratio itself",
        ),
        (
            vec![n.clone(), ratio("r1", "r2", "n"), ratio("r2", "r1", "n")],
            "ratio cycle",
        ),
        (
            vec![on("5m", n.clone()), on("1h", ratio("r", "n", "n"))],
            "computed over window `5m`, the ratio over `1h`",
        ),
        (
            vec![on("5m", n.clone()), ratio("r", "n", "n")],
            "window `5m`, the ratio over (default)",
        ),
        (
            vec![
                n.clone(),
                FeatureSpec {
                    denominator: None,
                    ..ratio("r", "n", "n")
                },
            ],
            "ratio needs `denominator = ",
        ),
        (
            vec![
                n.clone(),
                FeatureSpec {
                    filter: Some("kind == 'a'".into()),
                    ..ratio("r", "n", "n")
                },
            ],
            "ratio takes no `where`",
        ),
        (
            vec![FeatureSpec {
                numerator: Some("n".into()),
                ..n.clone()
            }],
            "only apply to agg = \"ratio\"",
        ),
        (
            vec![
                n.clone(),
                FeatureSpec {
                    field: Some("x".into()),
                    ..ratio("r", "n", "n")
                },
            ],
            "Ratio takes no field",
        ),
    ];
    for (specs, want) in cases {
        let got = compile_error(&specs);
        assert!(got.contains(want), "{specs:?}: {got}");
    }
    // Same non-default window on all three: fine.
    let ok = [on("5m", n), on("5m", ratio("r", "n", "n"))];
    assert!(FeatureSet::compile(&ok, &schema()).is_ok());
}

#[test]
fn field_types_per_kind() {
    let numeric_only = compile_error(&[spec("v", AggKind::VarSamp, Some("s"), None)]);
    assert!(numeric_only.contains("VarSamp needs a numeric field, `s` is not"));
    let needs_field = compile_error(&[spec("f", AggKind::First, None, None)]);
    assert!(needs_field.contains("First needs `field"));
    let fs = FeatureSet::compile(
        &[
            spec("d", AggKind::Distinct, Some("s"), None),
            spec("t", AggKind::Last, Some("ts"), None),
        ],
        &schema(),
    );
    assert!(fs.is_ok(), "distinct of a string, last of a timestamp");
}

#[test]
fn job_file_names_and_window_are_carried() -> Result<(), serde_json::Error> {
    let names = "count count_if sum mean min max var_pop var_samp stddev_pop stddev_samp \
                 first last distinct ratio";
    for name in names.split_whitespace() {
        let spec: FeatureSpec = serde_json::from_str(&format!(
            r#"{{"name": "f", "agg": "{name}", "window": "5m"}}"#
        ))?;
        assert_eq!(serde_json::to_value(spec.agg)?, name);
    }
    let fs = FeatureSet::compile(
        &[FeatureSpec {
            window: Some("5m".into()),
            ..spec("n", AggKind::Count, None, None)
        }],
        &schema(),
    );
    let window = fs.map(|fs| fs.features()[0].window.clone());
    assert_eq!(window.ok().flatten().as_deref(), Some("5m"));
    Ok(())
}

/// Relative error of `distinct` over `n` distinct strings, each seen twice.
fn distinct_error(n: usize, seed: usize) -> (f64, Distinct) {
    let mut d = Distinct::default();
    for round in 0..2 {
        for i in 0..n {
            let value = Value::Str(format!("user-{seed}-{i}").into());
            d.insert(hash_value(&value).unwrap_or_else(|| panic!("round {round}")));
        }
    }
    ((d.count() - n as f64) / n as f64, d)
}

#[test]
fn distinct_is_within_five_percent_at_1k_and_100k_values_in_4_kib() {
    for n in [1_000, 10_000, 100_000] {
        for seed in 0..3 {
            let (error, state) = distinct_error(n, seed);
            println!("distinct: n = {n}, seed {seed}: relative error {error:+.4}");
            assert!(error.abs() < 0.05, "n = {n}, seed {seed}: error {error}");
            match state {
                Distinct::Sketch(registers) => assert_eq!(registers.len(), 4096),
                Distinct::Exact(_) => panic!("{n} values are past the exact limit"),
            }
        }
    }
    let (error, state) = distinct_error(EXACT_LIMIT, 0);
    assert!(error == 0.0 && state.is_exact());
}

#[test]
fn state_is_sized_per_kind() {
    use AggKind::*;
    // The clickstream job: 3 × count_if, mean, max, sum, max = 3+2+1+2+1 words; its `count`
    // without `where` keeps none (it reads the record count its slot keeps).
    let fs = FeatureSet::compile(
        &[
            spec("n", Count, None, None),
            spec("a", CountIf, None, Some("kind == 'a'")),
            spec("b", CountIf, None, Some("kind == 'b'")),
            spec("c", CountIf, None, Some("kind == 'c'")),
            spec("mean", Mean, Some("x"), None),
            spec("max", Max, Some("x"), None),
            spec("sum", Sum, Some("x"), None),
            spec("max2", Max, Some("x"), Some("kind == 'a'")),
        ],
        &schema(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let accs = fs.empty();
    assert_eq!(accs.words.len(), 9);
    assert!(accs.distinct.is_empty());
    // Every kind together: 18 features, 25 words (the `count` without `where` none).
    assert_eq!(features().empty().words.len(), 25);
}
