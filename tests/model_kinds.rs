//! One job, three kinds of model (issue #5): the clickstream job runs unchanged over JSON Lines
//! files with the XGBoost fixture (`tests/fixtures/model`), a LightGBM model and a scikit-learn
//! MLP with clip + scale preprocessing in its manifest (`tests/fixtures/models/`, all made by
//! `scripts/export_model.py`). Each run must score every window once, and every score must be
//! the one a raw ONNX Runtime session gives the same features after the manifest's
//! preprocessing (re-implemented in the oracle from the JSON). A registry-served model with a
//! shadow version runs through the same `weir run` path, and a version published while a job
//! with two score instances runs reaches both without a restart, no window lost or doubled.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use support::oracle::raw_ort_scores;
use weir::gen::{Clickstream, ClickstreamConfig};
use weir::{run_job, JobFile};
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir, write_lines};

const MODELS: [&str; 3] = [
    "tests/fixtures/model",
    "tests/fixtures/models/lightgbm",
    "tests/fixtures/models/mlp",
];

/// Scores by (key, window_end): (model version, score, feature values in manifest order).
type Scores = BTreeMap<(String, i64), (String, f64, Vec<f64>)>;

fn run_with(model: &Path, events: &Path, out: &Path) -> Result<Scores> {
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.runtime.workers = 1;
    job.model.as_mut().context("the job has no [model]")?.path = Some(std::path::absolute(model)?);
    job.use_input_files(vec![events.to_path_buf()]);
    job.use_output_file(out.to_path_buf(), None);
    let names: Vec<String> = job.features.iter().map(|f| f.name.clone()).collect();
    let summary = run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    ensure!(
        summary.inference_errors == 0,
        "inference errors: {summary:?}"
    );
    let mut scores = Scores::new();
    for line in std::fs::read_to_string(out)?.lines() {
        let record: Value = serde_json::from_str(line)?;
        let key = record["key"].as_str().context("key")?.to_owned();
        let end = record["window_end"].as_i64().context("window_end")?;
        let version = record["model"]["version"].as_str().context("version")?;
        let score = record["score"].as_f64().context("score")?;
        let values = names
            .iter()
            .map(|n| record["features"][n].as_f64().unwrap_or(f64::NAN))
            .collect();
        let previous = scores.insert((key, end), (version.to_owned(), score, values));
        ensure!(previous.is_none(), "a window was scored twice");
    }
    ensure!(scores.len() as u64 == summary.scores, "{summary:?}");
    // Every missing (null) feature value of a scored row was set to the model's default, once.
    let missing = scores
        .values()
        .flat_map(|(_, _, values)| values)
        .filter(|v| v.is_nan())
        .count() as u64;
    ensure!(
        missing > 0 && summary.defaults_used == missing,
        "{missing} missing feature values in the scores, {} defaulted: {summary:?}",
        summary.defaults_used
    );
    Ok(scores)
}

/// Writes a seeded clickstream (no malformed records) to `path`.
fn write_events(path: &Path) -> Result<()> {
    write_clickstream(path, 11, 4_000, 120)
}

/// Writes `events` seeded clickstream events of `users` users (no malformed records) to `path`.
fn write_clickstream(path: &Path, seed: u64, events: u64, users: u32) -> Result<()> {
    let config = ClickstreamConfig {
        seed,
        events,
        users,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    };
    let payloads = Clickstream::new(config)?.map(|event| event.payload);
    Ok(write_lines(path, payloads)?)
}

#[test]
fn xgboost_lightgbm_and_mlp_run_in_the_same_job() -> Result<()> {
    let dir = scratch_dir("kinds");
    let events = dir.join("events.jsonl");
    write_events(&events)?;

    let mut windows = None;
    for (i, model) in MODELS.iter().enumerate() {
        let model = Path::new(model);
        let scores = run_with(model, &events, &dir.join(format!("scores-{i}.jsonl")))?;
        let manifest: Value = serde_json::from_slice(&std::fs::read(model.join("manifest.json"))?)?;
        let rows: Vec<Vec<f64>> = scores.values().map(|(_, _, v)| v.clone()).collect();
        let oracle = raw_ort_scores(model, &rows)?;
        for ((window, (version, score, _)), want) in scores.iter().zip(oracle) {
            ensure!(Some(version.as_str()) == manifest["version"].as_str());
            ensure!(
                (score - want).abs() <= 1e-6,
                "{}: {window:?} scored {score}, raw ONNX Runtime says {want}",
                model.display()
            );
        }
        // The same windows whatever the model.
        let keys: Vec<(String, i64)> = scores.keys().cloned().collect();
        ensure!(!keys.is_empty());
        match &windows {
            None => windows = Some(keys),
            Some(first) => ensure!(*first == keys, "{} scored other windows", model.display()),
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// `weir run` wiring of `[model] registry` and `shadow`: the registry's version serves, the
/// shadow version's score (checked against raw ONNX Runtime) rides along in every record.
#[test]
fn registry_model_with_a_shadow_in_a_whole_job() -> Result<()> {
    registry_run_with_shadow(false)
}

/// The same with the shadow named by the registry's `CONTROL` file (`shadow <version>`)
/// instead of the job file: checked before the run and served from its first record.
#[test]
fn registry_model_with_a_control_shadow_in_a_whole_job() -> Result<()> {
    registry_run_with_shadow(true)
}

/// A registry serving the MLP with the LightGBM model as its shadow: from the job file's
/// `[model] shadow`, or (`from_control`) a registry version named by `CONTROL`.
fn registry_run_with_shadow(from_control: bool) -> Result<()> {
    let dir = scratch_dir("kinds");
    let events = dir.join("events.jsonl");
    write_events(&events)?;
    let registry = dir.join("models/purchase_propensity");
    let mut versions = vec![(MODELS[2], "tiny-mlp-1")];
    if from_control {
        versions.push((MODELS[1], "tiny-lightgbm-1"));
    }
    for (model, version) in versions {
        std::fs::create_dir_all(registry.join(version))?;
        for file in ["model.onnx", "manifest.json"] {
            std::fs::copy(
                Path::new(model).join(file),
                registry.join(version).join(file),
            )?;
        }
    }
    let shadow = std::path::absolute(MODELS[1])?;

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.runtime.workers = 1;
    let model = job.model.as_mut().context("the job has no [model]")?;
    model.path = None;
    model.registry = Some(dir.join("models"));
    model.name = Some("purchase_propensity".into());
    if from_control {
        std::fs::write(
            registry.join("CONTROL"),
            "pin tiny-mlp-1\nshadow tiny-lightgbm-1\n",
        )?;
    } else {
        model.shadow = Some(shadow.clone());
    }
    // A checkpoint every tick, so that the run commits some: their manifests must name
    // what served, the second version included (from the score instances, not the start).
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(
        &dir.join("ckpt"),
        "100ms",
    ))?);
    let out = dir.join("scores.jsonl");
    job.use_input_files(vec![events.clone()]);
    job.use_output_file(out.clone(), None);
    let names: Vec<String> = job.features.iter().map(|f| f.name.clone()).collect();
    let summary = run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;

    let mut rows = Vec::new();
    let mut shadow_scores = Vec::new();
    for line in std::fs::read_to_string(&out)?.lines() {
        let record: Value = serde_json::from_str(line)?;
        ensure!(record["model"]["version"] == "tiny-mlp-1", "{record}");
        ensure!(
            record["shadow"]["model"]["version"] == "tiny-lightgbm-1",
            "{record}"
        );
        shadow_scores.push(record["shadow"]["score"].as_f64().context("shadow score")?);
        rows.push(
            names
                .iter()
                .map(|n| record["features"][n].as_f64().unwrap_or(f64::NAN))
                .collect::<Vec<f64>>(),
        );
    }
    ensure!(!rows.is_empty() && rows.len() as u64 == summary.scores);
    for (got, want) in shadow_scores.iter().zip(raw_ort_scores(&shadow, &rows)?) {
        ensure!(
            (got - want).abs() <= 1e-6,
            "shadow scored {got}, raw ONNX Runtime {want}"
        );
    }
    // Served from the start: no change of the second version while the job ran.
    ensure!(
        summary.models.secondary_changes == 0,
        "{:?}",
        summary.models
    );
    ensure!(summary.models.reload_failures == 0, "{:?}", summary.models);
    let manifest = LocalDirStore::open(dir.join("ckpt"))?
        .latest_valid()?
        .context("the run committed no checkpoint")?;
    let expected = BTreeMap::from([
        ("purchase_propensity".to_owned(), "tiny-mlp-1".to_owned()),
        (
            "purchase_propensity:shadow".to_owned(),
            "tiny-lightgbm-1".to_owned(),
        ),
    ]);
    ensure!(
        manifest.model_versions == expected,
        "manifest of epoch {:?} names {:?}",
        manifest.epoch,
        manifest.model_versions
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Copies `model` into `registry/<version>` with its manifest naming that version.
fn publish_version(model: &str, registry: &Path, version: &str) -> Result<()> {
    let staging = registry.join(".incoming");
    std::fs::create_dir_all(&staging)?;
    std::fs::copy(
        Path::new(model).join("model.onnx"),
        staging.join("model.onnx"),
    )?;
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(Path::new(model).join("manifest.json"))?)?;
    manifest["version"] = version.into();
    std::fs::write(
        staging.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    std::fs::rename(&staging, registry.join(version))?;
    Ok(())
}

/// Hot reload in a whole `weir run` job with two score instances: a new version published
/// while the job scores is picked up by both instances without a restart; every window is
/// scored exactly once; each key's windows switch from the old version to the new one once
/// and never back (a key is scored by one instance, in window order).
#[test]
fn a_version_published_mid_run_reaches_every_score_instance() -> Result<()> {
    let dir = scratch_dir("kinds");
    let events = dir.join("events.jsonl");
    write_clickstream(&events, 23, 200_000, 500)?;
    let registry = dir.join("models/purchase_propensity");
    publish_version(MODELS[0], &registry, "v1")?;

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.runtime.workers = 2;
    job.override_parallelism("score=2")?;
    let model = job.model.as_mut().context("the job has no [model]")?;
    model.path = None;
    model.registry = Some(dir.join("models"));
    model.name = Some("purchase_propensity".into());
    model.poll = 20;
    let out = dir.join("scores.jsonl");
    job.use_input_files(vec![events.clone()]);
    job.use_output_file(out.clone(), None);

    // Publish v2 once the job has written scores with v1.
    let (watched, target) = (out.clone(), registry.clone());
    let publisher = std::thread::spawn(move || -> Result<bool> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while std::fs::metadata(&watched).map_or(0, |m| m.len()) == 0 {
            if std::time::Instant::now() > deadline {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        publish_version(MODELS[0], &target, "v2")?;
        Ok(true)
    });
    let summary = run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    let published = publisher
        .join()
        .map_err(|_| anyhow::anyhow!("the publisher panicked"))??;
    ensure!(published, "the job wrote no scores while it ran");

    // By key: (window_end, version) in window order.
    let mut by_key: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    let mut windows = std::collections::HashSet::new();
    for line in std::fs::read_to_string(&out)?.lines() {
        let record: Value = serde_json::from_str(line)?;
        let key = record["key"].as_str().context("key")?.to_owned();
        let end = record["window_end"].as_i64().context("window_end")?;
        let version = record["model"]["version"].as_str().context("version")?;
        ensure!(
            windows.insert((key.clone(), end)),
            "({key}, {end}) scored twice"
        );
        by_key
            .entry(key)
            .or_default()
            .push((end, version.to_owned()));
    }
    ensure!(windows.len() as u64 == summary.scores, "{summary:?}");
    let count = |v: &str| {
        by_key
            .values()
            .flatten()
            .filter(|(_, version)| version == v)
            .count()
    };
    ensure!(
        count("v1") > 0 && count("v2") > 0 && count("v1") + count("v2") == windows.len(),
        "versions: {} v1, {} v2 of {}",
        count("v1"),
        count("v2"),
        windows.len()
    );
    eprintln!(
        "{} windows: {} scored by v1, {} by v2",
        windows.len(),
        count("v1"),
        count("v2")
    );
    for (key, rows) in &mut by_key {
        rows.sort();
        let versions: Vec<&str> = rows.iter().map(|(_, v)| v.as_str()).collect();
        let switched = versions
            .iter()
            .position(|v| *v == "v2")
            .unwrap_or(versions.len());
        ensure!(
            versions[switched..].iter().all(|v| *v == "v2"),
            "{key} went back to v1 after v2: {versions:?}"
        );
    }
    ensure!(
        summary.models.reloads == 2,
        "expected one reload per score instance: {:?}",
        summary.models
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
