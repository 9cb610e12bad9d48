//! Acceptance tests of the scoring operator (issue #5): hot reload under load, a corrupt new
//! version, rollback, the canary split and shadow scores; failed batches and rows a model
//! fails on alone (issue #15). No timing assertions: every wait is
//! "until the thing happened", bounded by a tick budget that only fails a broken build.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};

use weir_operators::metrics::JobMetrics;
use weir_score::budget::{available_cores, cpu_set, InstanceCores};
use weir_score::canary::canary_bucket;
use weir_score::counters::ScoreCounters;
use weir_score::registry::ModelSource;
use weir_score::secondary::{SecondaryModel, SecondaryRole};

use support::{
    assert_exactly_once, config, publish, registry_source, row, step, with_score_dataflow,
    write_version, TICK_BUDGET,
};
use weir_testkit::files::scratch_dir;

#[test]
fn hot_reload_under_load_changes_version_without_losing_or_duplicating_scores() -> anyhow::Result<()>
{
    let root = scratch_dir("reload");
    let model_dir = root.join("pp");
    write_version("logreg", &model_dir.join("v1"), "pp", "v1")?;
    let mut cfg = config(registry_source(&root), None);
    // Pin the one inference thread to a second core when the process has one (1 worker + 1
    // pinned).
    if available_cores() >= 2 {
        let core = cpu_set().ids[1];
        cfg.cores = Some(vec![InstanceCores { cores: vec![core] }]);
    }
    let counters = cfg.counters.clone();
    let served = cfg.serving.clone();
    let serving = move || served.versions();
    let serves = |version: &str| BTreeMap::from([("pp".to_owned(), version.to_owned())]);
    let dir = model_dir.clone();
    let (ticks, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<u64> {
        anyhow::ensure!(serving() == serves("v1"), "at start: {:?}", serving());
        let mut phase = 0; // 0: serving v1, 1: v2 published, 2: rollback to v1 asked
        let mut switched_at = Vec::new();
        for _ in 0..TICK_BUDGET {
            let tick = step(driver);
            let last = driver.scores().last().map(|(_, s)| s.model.version.clone());
            match (phase, last.as_deref()) {
                (0, _) if tick == 5 => {
                    publish("logreg", &dir, "pp", "v2")?;
                    phase = 1;
                }
                (1, Some("v2")) => {
                    // What checkpoint manifests record follows the swap.
                    anyhow::ensure!(serving() == serves("v2"), "after v2: {:?}", serving());
                    switched_at.push(tick);
                    std::fs::write(dir.join("CONTROL"), "rollback v1 # v2 misbehaves\n")?;
                    phase = 2;
                }
                (2, Some("v1")) => {
                    anyhow::ensure!(serving() == serves("v1"), "rolled back: {:?}", serving());
                    switched_at.push(tick);
                    break;
                }
                _ => {}
            }
        }
        anyhow::ensure!(switched_at.len() == 2, "never reloaded: {switched_at:?}");
        // A few more ticks on the rolled-back version.
        for _ in 0..5 {
            step(driver);
        }
        Ok(driver.sent())
    })?;
    let ticks = ticks?;
    assert_exactly_once(&out.scores, ticks);
    // Versions change in order v1 → v2 → v1, each change once (one instance, FIFO batches).
    let mut runs: Vec<&str> = Vec::new();
    for (_, s) in &out.scores {
        if runs.last() != Some(&s.model.version.as_str()) {
            runs.push(&s.model.version);
        }
    }
    assert_eq!(runs, vec!["v1", "v2", "v1"]);
    assert_eq!(ScoreCounters::get(&counters.reloads), 2);
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 0);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn corrupt_new_version_keeps_the_old_one_serving() -> anyhow::Result<()> {
    let root = scratch_dir("corrupt");
    let model_dir = root.join("pp");
    write_version("logreg", &model_dir.join("v1"), "pp", "v1")?;
    let cfg = config(registry_source(&root), None);
    let counters = cfg.counters.clone();
    let dir = model_dir.clone();
    let seen = counters.clone();
    let (ticks, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<u64> {
        step(driver);
        // v2: a valid manifest next to a model.onnx that is not ONNX at all.
        let staging = dir.join(".incoming");
        write_version("logreg", &staging, "pp", "v2")?;
        std::fs::write(staging.join("model.onnx"), b"not an onnx graph")?;
        std::fs::rename(&staging, dir.join("v2"))?;
        for _ in 0..TICK_BUDGET {
            step(driver);
            if ScoreCounters::get(&seen.reload_failures) > 0 {
                break;
            }
        }
        anyhow::ensure!(
            ScoreCounters::get(&seen.reload_failures) > 0,
            "never tried v2"
        );
        for _ in 0..10 {
            step(driver);
        }
        Ok(driver.sent())
    })?;
    let ticks = ticks?;
    assert_exactly_once(&out.scores, ticks);
    assert!(out.scores.iter().all(|(_, s)| s.model.version == "v1"));
    assert!(out.dead.is_empty());
    // Counted once, not once per poll: the same broken files are not retried.
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 1);
    assert_eq!(ScoreCounters::get(&counters.reloads), 0);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn canary_split_is_stable_per_key() -> anyhow::Result<()> {
    let root = scratch_dir("canary");
    write_version("logreg", &root.join("stable"), "pp", "stable")?;
    write_version("linear_1d", &root.join("canary"), "pp", "canary")?;
    let share = 0.3;
    let cfg = config(
        ModelSource::Dir(root.join("stable")),
        Some(SecondaryModel {
            role: SecondaryRole::Canary { share },
            dir: root.join("canary"),
        }),
    );
    let counters = cfg.counters.clone();
    let (ticks, out) = with_score_dataflow(cfg, |driver| {
        for _ in 0..30 {
            step(driver);
        }
        driver.sent()
    })?;
    assert_exactly_once(&out.scores, ticks);
    let mut version_of: HashMap<String, String> = HashMap::new();
    for (_, s) in &out.scores {
        let expected = if canary_bucket(&s.row.key, share) {
            "canary"
        } else {
            "stable"
        };
        assert_eq!(s.model.version, expected, "key {}", s.row.key);
        let first = version_of
            .entry(s.row.key.to_string())
            .or_insert_with(|| s.model.version.to_string());
        assert_eq!(
            *first, s.model.version,
            "key {} switched versions",
            s.row.key
        );
    }
    let canary_keys = version_of.values().filter(|v| *v == "canary").count();
    assert!(canary_keys > 0 && canary_keys < version_of.len());
    let canary_rows = out
        .scores
        .iter()
        .filter(|(_, s)| s.model.version == "canary")
        .count();
    assert_eq!(
        ScoreCounters::get(&counters.canary_rows),
        canary_rows as u64
    );
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn shadow_scores_every_row_beside_the_primary() -> anyhow::Result<()> {
    let root = scratch_dir("shadow");
    write_version("logreg", &root.join("live"), "pp", "live")?;
    write_version("linear_1d", &root.join("next"), "pp", "next")?;
    let cfg = config(
        ModelSource::Dir(root.join("live")),
        Some(SecondaryModel {
            role: SecondaryRole::Shadow,
            dir: root.join("next"),
        }),
    );
    let (ticks, out) = with_score_dataflow(cfg, |driver| {
        for _ in 0..5 {
            step(driver);
        }
        driver.sent()
    })?;
    assert_exactly_once(&out.scores, ticks);
    for (_, s) in &out.scores {
        assert_eq!(s.model.version, "live");
        let shadow = s
            .shadow
            .as_ref()
            .ok_or(anyhow::anyhow!("no shadow score"))?;
        assert_eq!(shadow.model.version, "next");
        assert!(shadow.score.is_some());
        assert_ne!(shadow.score, s.score, "two different models scored alike");
    }
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn a_registry_version_must_match_its_manifest() -> anyhow::Result<()> {
    let root = scratch_dir("mismatch");
    write_version("logreg", &root.join("pp").join("v1"), "pp", "v9")?;
    let result = with_score_dataflow(config(registry_source(&root), None), |_| ());
    let error = match result {
        Ok(_) => anyhow::bail!("a mismatched version directory was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("version `v9`") && error.contains("pp/v1"),
        "{error}"
    );
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn in_flight_batches_stay_within_the_bound() -> anyhow::Result<()> {
    let root = scratch_dir("bound");
    write_version("logreg", &root.join("m"), "pp", "m")?;
    let mut cfg = config(ModelSource::Dir(root.join("m")), None);
    cfg.batching.max_in_flight = 2;
    // 160 rows per tick in batches of 8: 20 batches ready at once, at most 2 sent.
    let counters = cfg.counters.clone();
    let metrics = cfg.metrics.clone();
    let backlog = cfg.backlog.clone();
    let (ticks, out) = with_score_dataflow(cfg, |driver| {
        for tick in 0..10u64 {
            let rows = (0..160).map(|i| row(&format!("k{i}"), tick, i)).collect();
            driver.tick(rows);
        }
        10u64
    })?;
    assert_eq!(out.scores.len(), ticks as usize * 160);
    let unique: HashSet<_> = out
        .scores
        .iter()
        .map(|(_, s)| (s.row.key.clone(), s.row.window_end))
        .collect();
    assert_eq!(unique.len(), out.scores.len());
    assert!(out
        .scores
        .iter()
        .all(|(tick, s)| s.row.window_end as u64 / 1000 == *tick));
    // The bound was reached and never exceeded.
    assert_eq!(ScoreCounters::get(&counters.in_flight_high_water), 2);
    assert_eq!(ScoreCounters::get(&counters.batches), ticks * 20);
    // At the bound the instance told the sources to pause, and let them go again.
    assert!(JobMetrics::get(&metrics.backpressure_episodes) > 0);
    assert_eq!(backlog.instances_at_bound(), 0);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// Rows of one tick in batches of 8: row 3 has a value missing, which fails its whole batch
/// (with a canary, both versions' parts of it: the batch's values are no longer whole rows).
fn rows_with_a_short_one() -> Vec<weir_features::row::FeatureRow> {
    (0..16)
        .map(|i| {
            let mut r = row(&format!("k{i:02}"), 0, i);
            if i == 3 {
                r.values.pop();
            }
            r
        })
        .collect()
}

#[test]
fn a_failed_batch_becomes_error_records_and_dead_letters() -> anyhow::Result<()> {
    let root = scratch_dir("failed");
    write_version("logreg", &root.join("stable"), "pp", "stable")?;
    write_version("linear_1d", &root.join("canary"), "pp", "canary")?;
    let canary = SecondaryModel {
        role: SecondaryRole::Canary { share: 0.5 },
        dir: root.join("canary"),
    };
    for secondary in [None, Some(canary)] {
        let cfg = config(ModelSource::Dir(root.join("stable")), secondary.clone());
        let metrics = cfg.metrics.clone();
        let ((), out) = with_score_dataflow(cfg, |driver| {
            driver.tick(rows_with_a_short_one());
        })?;
        assert_eq!(out.scores.len(), 16);
        let mut scores = out.scores.clone();
        scores.sort_by_key(|(_, s)| s.row.window_end);
        for (i, (tick, s)) in scores.iter().enumerate() {
            assert_eq!(*tick, 0);
            let in_canary = secondary.is_some() && canary_bucket(&s.row.key, 0.5);
            let version = if in_canary { "canary" } else { "stable" };
            assert_eq!(s.model.version, version, "row {i}");
            if i < 8 {
                assert!(s.score.is_none(), "row {i} of the failed batch has a score");
                let error = s.error.as_deref().unwrap_or_default();
                assert!(error.contains("values for"), "row {i}: {error}");
            } else {
                assert!(
                    s.score.is_some() && s.error.is_none(),
                    "row {i}: {:?}",
                    s.error
                );
            }
        }
        let mut dead: Vec<_> = out.dead.iter().map(|(_, d)| d.clone()).collect();
        dead.sort_by_key(|d| d.timestamp);
        assert_eq!(dead.len(), 8);
        for (d, (_, s)) in dead.iter().zip(&scores) {
            assert_eq!(d.key.as_deref(), Some(s.row.key.as_bytes()));
            assert!(
                d.error.contains(&format!("pp {}", s.model.version)),
                "{}",
                d.error
            );
        }
        assert_eq!(JobMetrics::get(&metrics.inference_errors), 8);
        assert_eq!(JobMetrics::get(&metrics.scores), 8);
        assert_eq!(metrics.dead_letters_total(), 8);
    }
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// Rows of one tick in batches of 8 for `tests/fixtures/row_faults`: row 2 makes the run fail
/// (`cart_adds` above 100), row 9 scores `ln(0) = -inf`, row 13 has NaN in the other output
/// column (`sqrt(-1)`); the others score `ln(i + 1)`.
fn rows_with_faults() -> (Vec<weir_features::row::FeatureRow>, HashSet<usize>) {
    let rows = (0..16)
        .map(|i| {
            let mut r = row(&format!("k{i:02}"), 0, i);
            let mut values = [i as f64 + 1.0, 4.0, 0.0];
            match i {
                2 => values[2] = 500.0,
                9 => values[0] = 0.0,
                13 => values[1] = -1.0,
                _ => {}
            }
            r.values = values.into_iter().collect();
            r
        })
        .collect();
    (rows, HashSet::from([2, 9, 13]))
}

#[test]
fn only_the_rows_a_model_fails_on_alone_become_error_records() -> anyhow::Result<()> {
    let root = scratch_dir("row-faults");
    write_version("row_faults", &root.join("m"), "rf", "1")?;
    let cfg = config(ModelSource::Dir(root.join("m")), None);
    let (metrics, counters) = (cfg.metrics.clone(), cfg.counters.clone());
    let (rows, faulty) = rows_with_faults();
    let ((), out) = with_score_dataflow(cfg, |driver| {
        driver.tick(rows);
    })?;
    let mut scores = out.scores.clone();
    scores.sort_by_key(|(_, s)| s.row.window_end);
    assert_eq!(scores.len(), 16);
    for (i, (_, s)) in scores.iter().enumerate() {
        if faulty.contains(&i) {
            assert_eq!(s.score, None, "row {i}");
            assert!(s.error.is_some(), "row {i} has no error");
        } else {
            let score = s.score.unwrap_or(f64::NAN);
            assert!(
                (score - (i as f64 + 1.0).ln()).abs() < 1e-6,
                "row {i}: {score}"
            );
            assert_eq!(s.error, None, "row {i}");
        }
    }
    let dead: HashMap<Vec<u8>, String> = out
        .dead
        .iter()
        .map(|(_, d)| (d.key.clone().unwrap_or_default(), d.error.clone()))
        .collect();
    assert_eq!(dead.len(), faulty.len());
    let error_of = |i: usize| dead.get(format!("k{i:02}").as_bytes()).cloned();
    let error = error_of(2).unwrap_or_default();
    assert!(
        error.contains("scoring 1 row") && error.contains("out of data bounds"),
        "{error}"
    );
    let error = error_of(9).unwrap_or_default();
    assert!(error.contains("is -inf at column 1 of 2"), "{error}");
    let error = error_of(13).unwrap_or_default();
    assert!(error.contains("is NaN at column 0 of 2"), "{error}");
    assert_eq!(JobMetrics::get(&metrics.inference_errors), 3);
    assert_eq!(JobMetrics::get(&metrics.scores), 13);
    // The batch of rows 0..8 failed: both halves, then rows 0..4 and 2..4 were split too.
    assert_eq!(ScoreCounters::get(&counters.split_runs), 6);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}
