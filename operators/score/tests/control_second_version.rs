//! Acceptance tests of the second model version driven by the registry's `CONTROL` file: a
//! canary started, ramped and stopped under load, a shadow started and stopped, second
//! versions that do not load (what served keeps serving), the job file's fixed second version
//! overridden while a `CONTROL` line is present, and the second version at start. No timing
//! assertions: every wait is "until the thing happened", bounded by a tick budget that only
//! fails a broken build.

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::bail;
use weir_features::row::ScoredRow;
use weir_score::canary::canary_bucket;
use weir_score::counters::ScoreCounters;
use weir_score::secondary::{SecondaryModel, SecondaryRole};

use support::{
    assert_exactly_once, config, registry_source, step, with_score_dataflow, write_control,
    write_version, Driver, TICK_BUDGET,
};
use weir_testkit::files::scratch_dir;

/// Steps until a score emitted from now on satisfies `found`; the tick it was emitted at.
fn wait_for(driver: &mut Driver, found: impl Fn(&ScoredRow) -> bool) -> anyhow::Result<u64> {
    let from = driver.scored();
    for _ in 0..TICK_BUDGET {
        step(driver);
        if let Some((tick, _)) = driver.scores_since(from).iter().find(|(_, s)| found(s)) {
            return Ok(*tick);
        }
    }
    bail!("no such score within {TICK_BUDGET} ticks")
}

/// Steps until `done()`; the first tick sent after it was seen.
fn wait_until(driver: &mut Driver, done: impl Fn() -> bool) -> anyhow::Result<u64> {
    for _ in 0..TICK_BUDGET {
        step(driver);
        if done() {
            return Ok(driver.sent());
        }
    }
    bail!("not done within {TICK_BUDGET} ticks")
}

/// Steps `n` ticks.
fn steps(driver: &mut Driver, n: usize) {
    for _ in 0..n {
        step(driver);
    }
}

/// The version that scores `key` under a canary of v2 at `share` beside v1.
fn split(key: &str, share: f64) -> &'static str {
    if canary_bucket(key, share) {
        "v2"
    } else {
        "v1"
    }
}

/// Registry `pp` under a fresh temp dir with v1 (logreg) and v2 (linear_1d, another model,
/// so the two score differently), pinned to v1 by `control`.
fn registry(label: &str, control: &str) -> anyhow::Result<std::path::PathBuf> {
    let root = scratch_dir(label);
    let dir = root.join("pp");
    write_version("logreg", &dir.join("v1"), "pp", "v1")?;
    write_version("linear_1d", &dir.join("v2"), "pp", "v2")?;
    write_control(&dir, control)?;
    Ok(root)
}

#[test]
fn a_canary_started_ramped_and_stopped_by_control_under_load() -> anyhow::Result<()> {
    let root = registry("control-canary", "pin v1\n")?;
    let dir = root.join("pp");
    let cfg = config(registry_source(&root), None);
    let counters = cfg.counters.clone();
    let seen = counters.clone();
    // Ticks: written = the first tick sent after a CONTROL write; on = the tick the change
    // showed in a score (rows of that tick may have been scored before and after it).
    let (marks, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<[u64; 6]> {
        steps(driver, 3);
        let start_written = driver.sent();
        write_control(&dir, "pin v1\ncanary v2 20%\n")?;
        let started = wait_for(driver, |s| s.model.version == "v2")?;
        steps(driver, 10);
        let ramp_written = driver.sent();
        write_control(&dir, "pin v1\ncanary v2 50%   # ramp\n")?;
        let ramped = wait_for(driver, |s| {
            s.model.version == "v2" && !canary_bucket(&s.row.key, 0.2)
        })?;
        steps(driver, 10);
        let stop_written = driver.sent();
        write_control(&dir, "pin v1\n")?;
        // Removed on the thread (start, ramp, stop: three changes): every batch after is v1.
        let stopped = wait_until(driver, || ScoreCounters::get(&seen.secondary_changes) == 3)?;
        steps(driver, 10);
        Ok([
            start_written,
            started,
            ramp_written,
            ramped,
            stop_written,
            stopped,
        ])
    })?;
    let [start_written, started, ramp_written, ramped, stop_written, stopped] = marks?;
    let ticks = stopped + 10;
    assert_exactly_once(&out.scores, ticks);
    let (mut keys_at_20, mut keys_at_50) = (BTreeSet::new(), BTreeSet::new());
    for (tick, s) in &out.scores {
        let (key, version, tick) = (s.row.key.as_str(), s.model.version.as_str(), *tick);
        let expected = if tick < start_written || tick >= stopped {
            Some("v1")
        } else if tick > started && tick < ramp_written {
            keys_at_20.insert((key.to_owned(), version.to_owned()));
            Some(split(key, 0.2))
        } else if tick > ramped && tick < stop_written {
            keys_at_50.insert((key.to_owned(), version.to_owned()));
            Some(split(key, 0.5))
        } else {
            None // a change was on its way: either state
        };
        if let Some(expected) = expected {
            assert_eq!(version, expected, "tick {tick} key {key}");
        }
        if version == "v2" {
            assert!(
                canary_bucket(key, 0.5),
                "tick {tick}: {key} outside every share"
            );
        }
        if tick > started && tick < stop_written && canary_bucket(key, 0.2) {
            // In the 20 % canary and so in the 50 % one: the ramp never moved it back.
            assert_eq!(version, "v2", "tick {tick}: {key} left the canary");
        }
    }
    // Each phase split the keys, and ramping up only added keys to the canary.
    let canary_keys = |keys: &BTreeSet<(String, String)>| {
        let v2: BTreeSet<&str> = keys
            .iter()
            .filter(|(_, v)| v == "v2")
            .map(|(k, _)| k.as_str())
            .collect();
        assert!(!v2.is_empty() && v2.len() < keys.len(), "{keys:?}");
        v2.into_iter()
            .map(str::to_owned)
            .collect::<BTreeSet<String>>()
    };
    let (at_20, at_50) = (canary_keys(&keys_at_20), canary_keys(&keys_at_50));
    assert!(at_20.len() < at_50.len(), "{at_20:?} vs {at_50:?}");
    let canary_rows = out.scores.iter().filter(|(_, s)| s.model.version == "v2");
    assert_eq!(
        ScoreCounters::get(&counters.canary_rows),
        canary_rows.count() as u64
    );
    assert_eq!(ScoreCounters::get(&counters.secondary_changes), 3);
    assert_eq!(ScoreCounters::get(&counters.reloads), 0);
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 0);
    assert!(out.dead.is_empty());
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn a_shadow_started_and_stopped_by_control_scores_beside_the_primary() -> anyhow::Result<()> {
    let root = registry("control-shadow", "pin v1\n")?;
    let dir = root.join("pp");
    let cfg = config(registry_source(&root), None);
    let counters = cfg.counters.clone();
    let (marks, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<[u64; 4]> {
        steps(driver, 3);
        let start_written = driver.sent();
        write_control(&dir, "pin v1\nshadow v2\n")?;
        let started = wait_for(driver, |s| s.shadow.is_some())?;
        steps(driver, 10);
        let stop_written = driver.sent();
        write_control(&dir, "pin v1\n")?;
        let stopped = wait_for(driver, |s| s.shadow.is_none())?;
        steps(driver, 5);
        Ok([start_written, started, stop_written, stopped])
    })?;
    let [start_written, started, stop_written, stopped] = marks?;
    let ticks = stopped + 6;
    assert_exactly_once(&out.scores, ticks);
    for (tick, s) in &out.scores {
        assert_eq!(
            s.model.version, "v1",
            "the shadow never scores for the primary"
        );
        match &s.shadow {
            Some(shadow) => {
                assert!(*tick >= start_written && *tick <= stopped, "tick {tick}");
                assert_eq!(shadow.model.version, "v2");
                assert!(shadow.score.is_some() && shadow.error.is_none());
                assert_ne!(shadow.score, s.score, "two different models scored alike");
            }
            None => assert!(
                *tick <= started || *tick >= stop_written,
                "tick {tick}: a row without its shadow score"
            ),
        }
    }
    assert_eq!(ScoreCounters::get(&counters.secondary_changes), 2);
    assert_eq!(ScoreCounters::get(&counters.shadow_errors), 0);
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 0);
    assert_eq!(ScoreCounters::get(&counters.canary_rows), 0);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// `case` as registry version `version` of `pp`, with its manifest edited by `edit`.
fn write_edited(
    case: &str,
    dir: &Path,
    version: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> anyhow::Result<()> {
    let at = dir.join(version);
    write_version(case, &at, "pp", version)?;
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(at.join("manifest.json"))?)?;
    edit(&mut manifest);
    std::fs::write(at.join("manifest.json"), serde_json::to_vec(&manifest)?)?;
    Ok(())
}

#[test]
fn a_second_version_that_does_not_load_leaves_what_served_serving() -> anyhow::Result<()> {
    let root = registry("control-corrupt", "pin v1\n")?;
    let dir = root.join("pp");
    // v3: not an ONNX graph; v4: features the job does not compute; v5: a manifest that
    // names another version than its directory.
    write_version("logreg", &dir.join("v3"), "pp", "v3")?;
    std::fs::write(dir.join("v3").join("model.onnx"), b"not an onnx graph")?;
    write_edited("logreg", &dir, "v4", |m| {
        m["features"][2]["name"] = "basket_adds".into()
    })?;
    write_edited("linear_1d", &dir, "v5", |m| m["version"] = "v9".into())?;
    let cfg = config(registry_source(&root), None);
    let counters = cfg.counters.clone();
    let seen = counters.clone();
    let (marks, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<[u64; 4]> {
        let failures = || ScoreCounters::get(&seen.reload_failures);
        steps(driver, 2);
        // No second version yet: a corrupt canary leaves the primary scoring every row.
        write_control(&dir, "pin v1\ncanary v3 50%\n")?;
        wait_until(driver, || failures() == 1)?;
        // Polls that see the same broken canary do not count it again: the poll that swaps
        // the primary to v2, and the one that swaps it back, both look at it.
        write_control(&dir, "pin v2\ncanary v3 50%\n")?;
        let pinned = wait_for(driver, |s| s.model.version == "v2")?;
        write_control(&dir, "pin v1\ncanary v3 50%\n")?;
        let unpinned = wait_for(driver, |s| s.model.version == "v1")?;
        anyhow::ensure!(failures() == 1, "the same broken canary was counted again");
        // A good shadow, then three bad changes: each leaves the shadow v2 serving.
        write_control(&dir, "pin v1\nshadow v2\n")?;
        let started = wait_for(driver, |s| s.shadow.is_some())?;
        let bad = [
            "pin v1\nshadow v4\n",
            "pin v1\ncanary v5 10%\n",
            "pin v1\nshadow v2\ncanary v2\n",
        ];
        for (n, control) in bad.into_iter().enumerate() {
            write_control(&dir, control)?;
            wait_until(driver, || failures() == n as u64 + 2)?;
            steps(driver, 5);
        }
        Ok([pinned, unpinned, started, driver.sent()])
    })?;
    let [pinned, unpinned, started, ticks] = marks?;
    assert_exactly_once(&out.scores, ticks);
    for (tick, s) in &out.scores {
        if *tick > pinned && *tick < unpinned {
            assert_eq!(s.model.version, "v2", "tick {tick}");
        } else if *tick > unpinned || *tick < pinned {
            assert_eq!(s.model.version, "v1", "tick {tick}");
        }
        let shadow = s.shadow.as_ref().map(|s| s.model.version.as_str());
        if *tick < started {
            assert_eq!(shadow, None, "tick {tick}");
        } else if *tick > started {
            assert_eq!(
                shadow,
                Some("v2"),
                "tick {tick}: the shadow stopped serving"
            );
        }
    }
    assert!(out.dead.is_empty());
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 4);
    assert_eq!(ScoreCounters::get(&counters.reloads), 2);
    assert_eq!(ScoreCounters::get(&counters.secondary_changes), 1);
    assert_eq!(ScoreCounters::get(&counters.canary_rows), 0);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn a_control_line_overrides_the_job_files_second_version_while_present() -> anyhow::Result<()> {
    let root = registry("control-override", "pin v1\n")?;
    let dir = root.join("pp");
    // The job file's fixed shadow, outside the watched registry directory.
    write_version("linear_1d", &root.join("next"), "pp", "next")?;
    let fixed = SecondaryModel {
        role: SecondaryRole::Shadow,
        dir: root.join("next"),
    };
    let cfg = config(registry_source(&root), Some(fixed));
    let counters = cfg.counters.clone();
    let (marks, out) = with_score_dataflow(cfg, move |driver| -> anyhow::Result<[u64; 4]> {
        steps(driver, 3);
        let canary_written = driver.sent();
        write_control(&dir, "pin v1\ncanary v2 50%\n")?;
        let canary = wait_for(driver, |s| s.model.version == "v2")?;
        steps(driver, 5);
        let removed = driver.sent();
        write_control(&dir, "pin v1\n")?;
        let back = wait_for(driver, |s| s.shadow.is_some())?;
        steps(driver, 5);
        Ok([canary_written, canary, removed, back])
    })?;
    let [canary_written, canary, removed, back] = marks?;
    assert_exactly_once(&out.scores, back + 6);
    for (tick, s) in &out.scores {
        let shadow = s.shadow.as_ref().map(|s| s.model.version.as_str());
        if *tick < canary_written || *tick > back {
            assert_eq!((s.model.version.as_str(), shadow), ("v1", Some("next")));
        } else if *tick > canary && *tick < removed {
            // The canary replaced the job file's shadow.
            assert_eq!(s.model.version, split(&s.row.key, 0.5), "tick {tick}");
            assert_eq!(shadow, None, "tick {tick}");
        }
    }
    assert_eq!(ScoreCounters::get(&counters.secondary_changes), 2);
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 0);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn a_control_second_version_serves_from_the_first_row() -> anyhow::Result<()> {
    let root = registry("control-start", "pin v1\ncanary v2 0.5\n")?;
    let cfg = config(registry_source(&root), None);
    let counters = cfg.counters.clone();
    let (ticks, out) = with_score_dataflow(cfg, |driver| {
        steps(driver, 5);
        driver.sent()
    })?;
    assert_exactly_once(&out.scores, ticks);
    for (tick, s) in &out.scores {
        assert_eq!(s.model.version, split(&s.row.key, 0.5), "tick {tick}");
    }
    assert_eq!(ScoreCounters::get(&counters.secondary_changes), 0);
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

#[test]
fn a_control_second_version_that_does_not_load_at_start_stops_the_start() -> anyhow::Result<()> {
    let root = registry("control-start-bad", "pin v1\nshadow v3\n")?;
    let dir = root.join("pp");
    write_edited("linear_1d", &dir, "v3", |m| m["version"] = "v9".into())?;
    let error = match with_score_dataflow(config(registry_source(&root), None), |_| ()) {
        Ok(_) => bail!("a second version that does not match its directory was served"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("version `v9`") && error.contains("pp/v3"),
        "{error}"
    );
    write_control(&dir, "pin v1\nshadow v7\n")?;
    let error = match with_score_dataflow(config(registry_source(&root), None), |_| ()) {
        Ok(_) => bail!("a missing second version was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("names as its shadow version `v7`, which is not in"),
        "{error}"
    );
    std::fs::remove_dir_all(&root)?;
    Ok(())
}
