//! Shared helpers for the scoring tests: fixture paths and expected outputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use weir_score::{ModelSession, ScoreError, SessionOptions};

/// `tests/fixtures/<case>`, written by `scripts/make_test_models.py`.
pub fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(case)
}

/// The feature names every fixture uses, in input order.
pub fn job_features() -> Vec<String> {
    ["clicks_5m", "dwell_s", "cart_adds"]
        .map(String::from)
        .to_vec()
}

/// Small options so tests stay quick.
pub fn opts() -> SessionOptions {
    SessionOptions {
        intra_threads: 1,
        warmup_batches: 2,
        max_batch_rows: 8,
        intra_thread_affinities: None,
    }
}

/// `expected.json`: raw job rows (null = missing), scores from ONNX Runtime in Python.
pub struct Expected {
    pub values: Vec<f64>,
    pub n_rows: usize,
    pub scores: Vec<f32>,
    pub defaults_used: usize,
}

pub fn expected(case: &str) -> anyhow::Result<Expected> {
    let text = std::fs::read_to_string(fixture(case).join("expected.json"))?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    let rows = json["rows"].as_array().ok_or(anyhow::anyhow!("rows"))?;
    let values = rows
        .iter()
        .flat_map(|r| r.as_array().into_iter().flatten())
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect();
    let scores = json["scores"]
        .as_array()
        .ok_or(anyhow::anyhow!("scores"))?
        .iter()
        .map(|v| v.as_f64().map(|x| x as f32).ok_or(anyhow::anyhow!("score")))
        .collect::<anyhow::Result<_>>()?;
    let defaults_used = json["defaults_used"]
        .as_u64()
        .ok_or(anyhow::anyhow!("defaults_used"))? as usize;
    Ok(Expected {
        values,
        n_rows: rows.len(),
        scores,
        defaults_used,
    })
}

/// Loads a fixture that must fail and returns the error.
pub fn load_err(case: &str, features: &[String]) -> ScoreError {
    match ModelSession::load(&fixture(case), features, &opts()) {
        Ok(s) => panic!("loading {case} should fail, got {s:?}"),
        Err(e) => e,
    }
}

/// Asserts `a` and `b` agree to within `tol` element-wise.
pub fn assert_close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "lengths differ: {a:?} vs {b:?}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "row {i}: {x} vs {y} (tol {tol})");
    }
}
