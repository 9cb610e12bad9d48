//! The naive oracle: recomputes every (user, 1-minute window) of the clickstream job directly
//! from the generated events with plain loops and `serde_json::Value` — none of the engine's
//! decoder, window or aggregate code — and scores the result with a raw ONNX Runtime session.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// Features of one (user, window), in the clickstream job's order:
/// events, views, clicks, purchases, dwell_mean, dwell_max, amount_sum, amount_max (NaN = missing).
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// Feature values.
    pub features: Vec<f64>,
}

/// Window size of the clickstream job.
pub const WINDOW_MS: i64 = 60_000;

/// Recomputes all windows from payloads (in production order). Payloads that are not a valid
/// event (the generator's malformed records) are skipped; the caller checks them separately.
pub fn expected_windows(payloads: &[Vec<u8>]) -> BTreeMap<(String, i64), Expected> {
    struct Acc {
        events: f64,
        views: f64,
        clicks: f64,
        purchases: f64,
        dwell_sum: f64,
        dwell_n: f64,
        dwell_max: f64,
        amount_sum: f64,
        amount_n: f64,
        amount_max: f64,
    }
    let mut windows: BTreeMap<(String, i64), Acc> = BTreeMap::new();
    for payload in payloads {
        let Ok(Value::Object(event)) = serde_json::from_slice::<Value>(payload) else {
            continue;
        };
        let (Some(user), Some(ts), Some(kind), Some(dwell)) = (
            event.get("user").and_then(Value::as_str),
            event.get("ts").and_then(Value::as_i64),
            event.get("type").and_then(Value::as_str),
            event.get("dwell_ms").and_then(Value::as_f64),
        ) else {
            continue;
        };
        let start = ts.div_euclid(WINDOW_MS) * WINDOW_MS;
        let acc = windows.entry((user.to_owned(), start)).or_insert(Acc {
            events: 0.0,
            views: 0.0,
            clicks: 0.0,
            purchases: 0.0,
            dwell_sum: 0.0,
            dwell_n: 0.0,
            dwell_max: f64::NEG_INFINITY,
            amount_sum: 0.0,
            amount_n: 0.0,
            amount_max: f64::NEG_INFINITY,
        });
        acc.events += 1.0;
        match kind {
            "view" => acc.views += 1.0,
            "click" => acc.clicks += 1.0,
            "purchase" => acc.purchases += 1.0,
            _ => {}
        }
        acc.dwell_sum += dwell;
        acc.dwell_n += 1.0;
        acc.dwell_max = acc.dwell_max.max(dwell);
        if let Some(amount) = event.get("amount").and_then(Value::as_f64) {
            acc.amount_sum += amount;
            acc.amount_n += 1.0;
            acc.amount_max = acc.amount_max.max(amount);
        }
    }
    windows
        .into_iter()
        .map(|(k, a)| {
            let missing_if_empty = |n: f64, x: f64| if n == 0.0 { f64::NAN } else { x };
            let features = vec![
                a.events,
                a.views,
                a.clicks,
                a.purchases,
                a.dwell_sum / a.dwell_n,
                a.dwell_max,
                missing_if_empty(a.amount_n, a.amount_sum),
                missing_if_empty(a.amount_n, a.amount_max),
            ];
            (k, Expected { features })
        })
        .collect()
}

/// Scores feature rows with a raw ONNX Runtime session on `model_dir`, applying the manifest's
/// defaults for missing values and its `categories`, `clip` and `scale` steps (re-read here
/// from the JSON, not through weir-score's preprocessor); returns the manifest's score column
/// per row. One intra-op thread, as the job's session uses: ONNX Runtime's tree ensembles sum
/// trees in a different order when they parallelise, which changes the last bits of the score.
pub fn raw_ort_scores(model_dir: &Path, rows: &[Vec<f64>]) -> Result<Vec<f64>> {
    let manifest: Value = serde_json::from_slice(&std::fs::read(model_dir.join("manifest.json"))?)?;
    let features = manifest["features"]
        .as_array()
        .context("manifest features")?
        .clone();
    let input_name = manifest["input"]["name"]
        .as_str()
        .context("input name")?
        .to_owned();
    let output_name = manifest["output"]["name"]
        .as_str()
        .context("output name")?
        .to_owned();
    let column = manifest["output"]["column"].as_u64().unwrap_or(0) as usize;
    let width = features.len();
    let mut data = Vec::with_capacity(rows.len() * width);
    for row in rows {
        for (x, feature) in row.iter().zip(&features) {
            data.push(preprocess_naively(*x, feature) as f32);
        }
    }
    let environment = weir_score::onnx_environment()?;
    let mut session = ort::session::Session::builder(&environment)
        .and_then(|b| Ok(b.with_intra_threads(1)?))
        .and_then(|mut b| b.commit_from_file(model_dir.join("model.onnx")))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let input = ort::value::TensorRef::from_array_view(([rows.len(), width], &data[..]))?;
    let outputs = session.run(ort::inputs![input_name.as_str() => input])?;
    let (shape, values) = outputs[output_name.as_str()].try_extract_tensor::<f32>()?;
    let columns = if shape.len() == 2 {
        shape[1] as usize
    } else {
        1
    };
    Ok((0..rows.len())
        .map(|r| f64::from(values[r * columns + column]))
        .collect())
}

/// One value through a manifest feature's steps: default, categories, clip, scale.
fn preprocess_naively(raw: f64, feature: &Value) -> f64 {
    let mut x = if raw.is_nan() {
        feature["default"].as_f64().unwrap_or(0.0)
    } else {
        raw
    };
    if let Some(values) = feature["categories"]["values"].as_array() {
        let unknown = feature["categories"]["unknown"].as_f64().unwrap_or(-1.0);
        x = values
            .iter()
            .position(|v| v.as_f64() == Some(x))
            .map_or(unknown, |i| i as f64);
    }
    if let Some(min) = feature["clip"]["min"].as_f64() {
        x = x.max(min);
    }
    if let Some(max) = feature["clip"]["max"].as_f64() {
        x = x.min(max);
    }
    if let (Some(mean), Some(std)) = (
        feature["scale"]["mean"].as_f64(),
        feature["scale"]["std"].as_f64(),
    ) {
        x = (x - mean) * (1.0 / std);
    }
    x
}
