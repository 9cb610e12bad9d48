//! Loading, validating and scoring with the committed fixture models.

mod common;

use common::{assert_close, expected, fixture, job_features, load_err, opts};
use rand::{Rng, SeedableRng};
use weir_score::{ModelSession, ScoreError, SessionOptions};

#[test]
fn logreg_scores_match_onnxruntime_python() -> anyhow::Result<()> {
    let exp = expected("logreg")?;
    let mut s = ModelSession::load(&fixture("logreg"), &job_features(), &opts())?;
    assert_eq!(s.name(), "purchase_propensity");
    assert_eq!(s.version(), "2026-11-30.1");
    assert_eq!(s.features().len(), 3);
    assert_eq!(s.manifest().output.column, 1);
    assert_eq!(s.defaults_used_total(), 0, "warm-up must not count");

    let mut out = vec![99.0; 3];
    let stats = s.score_batch(&exp.values, exp.n_rows, &mut out)?;
    assert_close(&out, &exp.scores, 1e-6);
    assert_eq!(stats.rows, exp.n_rows);
    assert_eq!(stats.defaults_used, exp.defaults_used);
    assert_eq!(s.defaults_used_total(), exp.defaults_used as u64);

    // A missing value scores exactly like its default written out.
    let (first, all_missing) = (&out[0], &out[4]);
    assert_eq!(first, all_missing);
    Ok(())
}

#[test]
fn one_d_output_uses_column_zero() -> anyhow::Result<()> {
    let exp = expected("linear_1d")?;
    let mut s = ModelSession::load(&fixture("linear_1d"), &job_features(), &opts())?;
    let mut out = Vec::new();
    let stats = s.score_batch(&exp.values, exp.n_rows, &mut out)?;
    assert_close(&out, &exp.scores, 1e-6);
    assert_eq!(stats.defaults_used, exp.defaults_used);
    Ok(())
}

/// Oracle: seeded random rows with random gaps, against a naive f64 recomputation of
/// the `linear_1d` graph (sigmoid(0.5 a - 0.25 b + c - 0.5), defaults 0 / 30 / 0).
#[test]
fn random_batches_match_naive_recomputation() -> anyhow::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let options = SessionOptions {
        max_batch_rows: 16,
        ..opts()
    };
    let mut s = ModelSession::load(&fixture("linear_1d"), &job_features(), &options)?;
    let defaults = [0.0, 30.0, 0.0];
    let mut out = Vec::new();
    let mut total_missing = 0u64;
    for _ in 0..50 {
        // Sometimes larger than max_batch_rows: the buffer must grow, not fail.
        let n_rows = rng.random_range(1..40);
        let values: Vec<f64> = (0..n_rows * 3)
            .map(|_| {
                if rng.random_bool(0.2) {
                    f64::NAN
                } else {
                    rng.random_range(-20.0..20.0)
                }
            })
            .collect();
        let stats = s.score_batch(&values, n_rows, &mut out)?;
        let naive: Vec<f32> = values
            .chunks(3)
            .map(|row| {
                let v: Vec<f64> = (0..3)
                    .map(|c| if row[c].is_nan() { defaults[c] } else { row[c] })
                    .map(|x| x as f32 as f64)
                    .collect();
                let z = 0.5 * v[0] - 0.25 * v[1] + v[2] - 0.5;
                (1.0 / (1.0 + (-z).exp())) as f32
            })
            .collect();
        assert_close(&out, &naive, 1e-5);
        let missing = values.iter().filter(|v| v.is_nan()).count();
        assert_eq!(stats.defaults_used, missing);
        total_missing += missing as u64;
    }
    assert_eq!(s.defaults_used_total(), total_missing);
    Ok(())
}

#[test]
fn bad_batches_are_errors_not_panics() -> anyhow::Result<()> {
    let mut s = ModelSession::load(&fixture("logreg"), &job_features(), &opts())?;
    let mut out = vec![1.0];
    let err = s.score_batch(&[1.0, 2.0], 1, &mut out).err();
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("2 values for 1 rows of 3 features"), "{msg}");
    assert!(out.is_empty());

    let stats = s.score_batch(&[], 0, &mut out)?;
    assert_eq!(stats.rows, 0);
    assert!(out.is_empty());
    Ok(())
}

fn assert_msg(err: &ScoreError, wanted: &str) {
    let msg = err.to_string();
    assert!(msg.contains(wanted), "expected `{wanted}` in:\n{msg}");
}

#[test]
fn wrong_input_name_is_named() {
    let err = load_err("wrong_input_name", &job_features());
    assert!(matches!(err, ScoreError::ModelMismatch { .. }), "{err:?}");
    assert_msg(
        &err,
        "manifest.json names input `features` but the model's input is `input`",
    );
}

#[test]
fn wrong_width_is_named() {
    let err = load_err("wrong_width", &job_features());
    assert_msg(
        &err,
        "input `input` has 4 columns but manifest.json lists 3 features",
    );
}

#[test]
fn bad_output_column_is_named() {
    let err = load_err("bad_column", &job_features());
    assert_msg(
        &err,
        "output.column is 2 but output `probabilities` has only 2 columns",
    );
}

#[test]
fn wrong_input_type_is_named() {
    let err = load_err("wrong_input_type", &job_features());
    assert_msg(
        &err,
        "input `x` has element type float64 but manifest.json says float32",
    );
}

#[test]
fn job_feature_order_mismatch_is_named() {
    let job = ["clicks_5m", "cart_adds", "dwell_s"].map(String::from);
    let err = load_err("logreg", &job);
    assert!(matches!(err, ScoreError::FeatureMismatch { .. }), "{err:?}");
    assert_msg(
        &err,
        "feature `cart_adds` is at input index 2 in manifest.json but the job computes it at index 1",
    );
    assert_msg(
        &err,
        "feature `dwell_s` is at input index 1 in manifest.json but the job computes it at index 2",
    );
}

#[test]
fn job_feature_set_mismatch_is_named() {
    let job = ["clicks_5m", "dwell_s", "views_1h"].map(String::from);
    let err = load_err("logreg", &job);
    assert_msg(
        &err,
        "job computes feature `views_1h` that manifest.json does not list",
    );
    assert_msg(
        &err,
        "manifest.json lists feature `cart_adds` that the job does not compute",
    );
    let dup = ["clicks_5m", "dwell_s", "cart_adds", "dwell_s"].map(String::from);
    assert_msg(
        &load_err("logreg", &dup),
        "the job computes feature `dwell_s` twice (at index 1 and 3)",
    );
}

#[test]
fn missing_model_file_is_named() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-score-no-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(
        fixture("logreg").join("manifest.json"),
        dir.join("manifest.json"),
    )?;
    let result = ModelSession::load(&dir, &job_features(), &opts());
    std::fs::remove_dir_all(&dir)?;
    let err = result.err().ok_or(anyhow::anyhow!("load should fail"))?;
    assert!(matches!(err, ScoreError::ModelMissing { .. }), "{err:?}");
    assert_msg(&err, "model.onnx does not exist");
    Ok(())
}

/// The operator loads a new version on a background thread and swaps it in.
#[test]
fn model_session_can_move_between_threads() -> anyhow::Result<()> {
    fn assert_send<T: Send>(_: &T) {}
    let s = ModelSession::load(&fixture("logreg"), &job_features(), &opts())?;
    assert_send(&s);
    let name = std::thread::spawn(move || s.name().to_owned())
        .join()
        .map_err(|_| anyhow::anyhow!("thread panicked"))?;
    assert_eq!(name, "purchase_propensity");
    Ok(())
}

/// Categories, clipping and scaling from the manifest give the scores Python computes through
/// `scripts/weir_preprocess.py` (the export scripts' copy of the same steps).
#[test]
fn manifest_preprocessing_matches_the_python_twin() -> anyhow::Result<()> {
    let exp = expected("preprocessed")?;
    let mut s = ModelSession::load(&fixture("preprocessed"), &job_features(), &opts())?;
    let mut out = Vec::new();
    let stats = s.score_batch(&exp.values, exp.n_rows, &mut out)?;
    assert_close(&out, &exp.scores, 1e-6);
    assert_eq!(stats.defaults_used, exp.defaults_used);
    Ok(())
}

/// The job's preprocessing and `scripts/weir_preprocess.py` (what the export scripts train
/// on) give the same model inputs and count the same defaults, on seeded random rows with
/// missing values, known and unknown codes, values outside the clip bounds, both with a
/// categorical column (the general loop) and without (the vectorized one). Runs the twin
/// with the project's virtualenv (`scripts/setup.sh` creates it).
#[test]
fn preprocessing_matches_the_python_twin_on_random_rows() -> anyhow::Result<()> {
    use weir_score::manifest::FeatureSpec;
    use weir_score::preprocess::Preprocessor;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".cache/venv/bin/python");
    anyhow::ensure!(
        python.is_file(),
        "{} is missing: run scripts/setup.sh",
        python.display()
    );
    let numeric = serde_json::json!([
        {"name": "a", "type": "float32", "default": 1.5},
        {"name": "b", "type": "float32", "default": -2.0, "clip": {"min": -10.0, "max": 10.0}},
        {"name": "c", "type": "float32", "default": 0.0, "scale": {"mean": 3.25, "std": 1.7}},
        {"name": "d", "type": "float32", "default": 7.0, "clip": {"max": 50.0},
         "scale": {"mean": -4.0, "std": 0.3}},
        {"name": "e", "type": "float32", "default": 0.1, "clip": {"min": 0.0}}
    ]);
    let mut categorical = numeric.clone();
    if let Some(list) = categorical.as_array_mut() {
        list.push(
            serde_json::json!({"name": "f", "type": "float32", "default": 3.0,
            "categories": {"values": [1.0, 3.0, 7.0, 11.0], "unknown": -1.0},
            "scale": {"mean": 1.0, "std": 2.0}}),
        );
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    for features in [numeric, categorical] {
        let specs: Vec<FeatureSpec> = serde_json::from_value(features.clone())?;
        let rows: Vec<Vec<Option<f64>>> = (0..300)
            .map(|_| {
                (0..specs.len())
                    .map(|_| match rng.random_range(0..10) {
                        0 | 1 => None,
                        2 => Some(f64::from(rng.random_range(0..12))),
                        3 => Some(rng.random_range(-1e6..1e6)),
                        _ => Some(rng.random_range(-60.0..60.0)),
                    })
                    .collect()
            })
            .collect();
        let input = std::env::temp_dir().join(format!(
            "weir-twin-{}-{}.json",
            std::process::id(),
            specs.len()
        ));
        std::fs::write(
            &input,
            serde_json::to_vec(&serde_json::json!({"features": features, "rows": rows}))?,
        )?;
        let script = "import json, sys\n\
                      sys.path.insert(0, sys.argv[1])\n\
                      from weir_preprocess import preprocess\n\
                      d = json.load(open(sys.argv[2]))\n\
                      out, used = preprocess(d['rows'], d['features'])\n\
                      print(json.dumps({'values': [float(x) for x in out.ravel()], 'used': int(used)}))";
        let output = std::process::Command::new(&python)
            .arg("-c")
            .arg(script)
            .arg(root.join("scripts"))
            .arg(&input)
            .output()?;
        std::fs::remove_file(&input)?;
        anyhow::ensure!(
            output.status.success(),
            "the Python twin failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let twin: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        let want: Vec<f32> = twin["values"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_f64())
                    .map(|x| x as f32)
                    .collect()
            })
            .unwrap_or_default();
        let values: Vec<f64> = rows
            .iter()
            .flatten()
            .map(|v| v.unwrap_or(f64::NAN))
            .collect();
        let mut got = Vec::new();
        let used = Preprocessor::new(&specs).fill(&values, &mut got);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // `==`: the same number (a zero's sign is not compared).
            assert!(
                g == w,
                "value {i} (row {}, column {}): job {g}, twin {w}",
                i / specs.len(),
                i % specs.len()
            );
        }
        assert_eq!(Some(used as u64), twin["used"].as_u64());
    }
    Ok(())
}
