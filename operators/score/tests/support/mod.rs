//! A one-worker dataflow around the score operator, driven tick by tick, and a throwaway
//! model registry built from the committed fixtures.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

use weir_features::dead_letter::DeadLetter;
use weir_features::row::{score_id, FeatureRow, ScoredRow};
use weir_features::vocab::Tick;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::Placement;
use weir_score::config::{BatchLimits, ModelSettings};
use weir_score::counters::ScoreCounters;
use weir_score::operator::{Score, ScoreConfig};
use weir_score::registry::ModelSource;
use weir_score::secondary::SecondaryModel;
use weir_score::SessionOptions;
use weir_testkit::row::feature_row;

pub const KEY_GROUPS: u32 = 64;
/// Rows [`step`] sends per tick.
pub const ROWS_PER_TICK: usize = 20;
/// Ticks a reload may take before the test gives up (polls run every 5 ms, ticks step ≥ 5 ms).
pub const TICK_BUDGET: usize = 4_000;

/// Registry `root`, model `pp`, polled every 5 ms.
pub fn registry_source(root: &Path) -> ModelSource {
    ModelSource::Registry {
        root: root.to_path_buf(),
        name: "pp".into(),
        poll: Duration::from_millis(5),
    }
}

/// The rows of tick `tick`: [`ROWS_PER_TICK`] rows of keys `u000`..`u096`, a sliding window.
pub fn rows_of(tick: u64) -> Vec<FeatureRow> {
    (0..ROWS_PER_TICK)
        .map(|i| row(&format!("u{:03}", (tick as usize * 7 + i) % 97), tick, i))
        .collect()
}

/// Sends the next tick's [`rows_of`]; returns the ticks sent so far.
pub fn step(driver: &mut Driver) -> u64 {
    driver.tick(rows_of(driver.sent()));
    driver.sent()
}

/// Every row sent is scored exactly once, at the tick it was sent, with a unique score id.
pub fn assert_exactly_once(scores: &[(u64, ScoredRow)], ticks: u64) {
    assert_eq!(
        scores.len(),
        ticks as usize * ROWS_PER_TICK,
        "lost or extra scores"
    );
    let mut seen = HashSet::new();
    let mut ids = HashSet::new();
    for (tick, s) in scores {
        assert_eq!(
            s.row.window_end as u64 / 1000,
            *tick,
            "emitted at another tick"
        );
        assert!(s.score.is_some() && s.error.is_none(), "{:?}", s.error);
        assert!(
            seen.insert((s.row.key.clone(), s.row.window_end)),
            "duplicate score"
        );
        assert!(ids.insert(score_id(&s.row.key, s.row.window_end, &s.model.version)));
    }
}

/// A score config for one instance on one worker.
pub fn config(source: ModelSource, secondary: Option<SecondaryModel>) -> ScoreConfig {
    ScoreConfig {
        model: ModelSettings {
            source,
            secondary,
            session: SessionOptions {
                intra_threads: 1,
                warmup_batches: 1,
                max_batch_rows: 8,
                intra_thread_affinities: None,
            },
        },
        batching: BatchLimits {
            max_batch_delay: Duration::from_millis(1),
            max_in_flight: 2,
        },
        job_features: ["clicks_5m", "dwell_s", "cart_adds"]
            .map(String::from)
            .to_vec(),
        cores: None,
        parallelism: 1,
        placement: Placement::new(1, 1),
        key_groups: KEY_GROUPS,
        source_name: "test".into(),
        metrics: Arc::new(JobMetrics::default()),
        counters: Arc::new(ScoreCounters::default()),
        backlog: ScoreBacklog::default(),
        serving: Arc::default(),
    }
}

/// Row `i` of tick `tick` for `key`: window end = tick × 1000 + i, so (key, window_end) is unique.
pub fn row(key: &str, tick: Tick, i: usize) -> FeatureRow {
    let values = [(i % 7) as f64, 20.0 + (tick % 5) as f64, f64::NAN];
    feature_row(key, KEY_GROUPS, (tick * 1000 + i as u64) as i64, &values)
}

/// What came out of the operator, with the tick each record was emitted at.
#[derive(Default)]
pub struct Output {
    pub scores: Vec<(Tick, ScoredRow)>,
    pub dead: Vec<(Tick, DeadLetter)>,
}

/// Drives the dataflow: one call to [`Driver::tick`] per tick.
pub struct Driver<'w> {
    worker: &'w mut Worker,
    input: InputHandle<Tick, CapacityContainerBuilder<Vec<FeatureRow>>>,
    probe: ProbeHandle<Tick>,
    out: Rc<RefCell<Output>>,
    next: Tick,
}

impl Driver<'_> {
    /// Sends `rows` at the next tick and steps until the tick is complete downstream (all its
    /// scores are out).
    pub fn tick(&mut self, rows: Vec<FeatureRow>) -> Tick {
        let tick = self.next;
        for r in rows {
            self.input.send(r);
        }
        self.next += 1;
        self.input.advance_to(self.next);
        while self.probe.less_than(&self.next) {
            self.worker.step_or_park(Some(Duration::from_millis(5)));
        }
        tick
    }

    /// Ticks sent so far (the next [`Driver::tick`] sends tick `sent()`).
    pub fn sent(&self) -> Tick {
        self.next
    }

    /// Scores seen so far.
    pub fn scores(&self) -> Vec<(Tick, ScoredRow)> {
        self.out.borrow().scores.clone()
    }

    /// Scores seen so far, from the `from`-th on.
    pub fn scores_since(&self, from: usize) -> Vec<(Tick, ScoredRow)> {
        self.out
            .borrow()
            .scores
            .get(from..)
            .unwrap_or_default()
            .to_vec()
    }

    /// Number of scores seen so far.
    pub fn scored(&self) -> usize {
        self.out.borrow().scores.len()
    }
}

/// Builds `rows.score(config)` on a single worker and runs `body` with a driver; closes the
/// input and runs the dataflow to completion afterwards.
pub fn with_score_dataflow<R: Send + 'static>(
    config: ScoreConfig,
    body: impl FnOnce(&mut Driver) -> R + Send + Sync + 'static,
) -> anyhow::Result<(R, Output)> {
    timely::execute_directly(move |worker| {
        let out = Rc::new(RefCell::new(Output::default()));
        let mut input = InputHandle::new();
        let probe = ProbeHandle::new();
        let (s_out, d_out) = (out.clone(), out.clone());
        let built = worker.dataflow::<Tick, _, _>(|scope| {
            let scored = input.to_stream(scope).score(config)?;
            scored
                .scores
                .inspect_core(move |event| {
                    if let Ok((stamp, data)) = event {
                        let tick = stamp.least().copied().unwrap_or_default();
                        let mut out = s_out.borrow_mut();
                        out.scores.extend(
                            data.iter()
                                .flat_map(|b| b.views().map(|s| (tick, s.to_record()))),
                        );
                    }
                })
                .probe_with(&probe);
            scored.dead_letters.inspect_core(move |event| {
                if let Ok((stamp, data)) = event {
                    let tick = stamp.least().copied().unwrap_or_default();
                    let mut out = d_out.borrow_mut();
                    out.dead.extend(data.iter().map(|d| (tick, d.clone())));
                }
            });
            anyhow::Ok(())
        });
        built?;
        let mut driver = Driver {
            worker,
            input,
            probe,
            out: out.clone(),
            next: 0,
        };
        let result = body(&mut driver);
        let Driver { worker, input, .. } = driver;
        drop(input);
        while worker.step_or_park(Some(Duration::from_millis(5))) {}
        let output = std::mem::take(&mut *out.borrow_mut());
        Ok((result, output))
    })
}

/// Writes fixture `case` as `<dir>` with its manifest's name and version replaced.
pub fn write_version(case: &str, dir: &Path, name: &str, version: &str) -> anyhow::Result<()> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(case);
    std::fs::create_dir_all(dir)?;
    std::fs::copy(fixture.join("model.onnx"), dir.join("model.onnx"))?;
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture.join("manifest.json"))?)?;
    manifest["name"] = name.into();
    manifest["version"] = version.into();
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    Ok(())
}

/// Publishes a version the safe way: written under a hidden name, then renamed into place.
pub fn publish(case: &str, model_dir: &Path, name: &str, version: &str) -> anyhow::Result<()> {
    let staging = model_dir.join(format!(".incoming-{version}"));
    write_version(case, &staging, name, version)?;
    std::fs::rename(&staging, model_dir.join(version))?;
    Ok(())
}

/// Replaces `<model_dir>/CONTROL` the safe way (written aside, then renamed over it), so no
/// poll reads it half-written.
pub fn write_control(model_dir: &Path, text: &str) -> anyhow::Result<()> {
    let staging = model_dir.join(".CONTROL.new");
    std::fs::write(&staging, text)?;
    std::fs::rename(&staging, model_dir.join("CONTROL"))?;
    Ok(())
}
