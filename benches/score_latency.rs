//! Latency from window close to score emitted, through the Timely score operator (issue #5).
//!
//! Run: `cargo bench --bench score_latency` (plain `main`, no criterion; results: BENCHMARKS.md).
//! Optional: `WEIR_BENCH_SECONDS=10` (default 5) per measurement; `WEIR_BENCH_PIN=0` leaves
//! the inference thread unpinned; `WEIR_BENCH_MODEL=lightgbm` or `mlp` (default `xgboost`).
//!
//! One Timely worker feeds seeded feature rows (8 features, ~10 % missing; XGBoost fixture
//! unless `WEIR_BENCH_MODEL` names another of `score_common::models`)
//! into `rows.score(config)` — the operator the job runs, with its inference thread pinned to
//! core 1 when the machine has two cores (the worker is not pinned: on a shared machine a
//! pinned worker cannot get away from other processes, see BENCHMARKS.md) — one 1 ms tick at
//! a time: a row's `fired_at` is
//! stamped when it is handed to the operator (the window operator's emission), and an
//! `inspect` right after the operator records `emitted − fired_at` into an HDR histogram.
//! 1. max rate: as many rows per tick as the operator takes, until the in-flight bound
//!    holds input back; rate = rows scored / elapsed;
//! 2. half of that rate, paced per 1 ms tick, for the run time: p50 / p99 / max latency.
//!
//! Config: `max_batch_rows = 256`, `max_batch_delay = 1 ms`, `max_in_flight = 16` (the job default;
//! `WEIR_BENCH_MAX_IN_FLIGHT` overrides it).

mod score_common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};

use score_common::{inference_core, models, rows, score_config, BATCH_ROWS};
use weir_features::row::FeatureRow;
use weir_features::vocab::Tick;
use weir_score::budget::InstanceCores;
use weir_score::operator::{Score, ScoreConfig};

/// The model `WEIR_BENCH_MODEL` names (default the first, XGBoost): (label, directory).
fn model() -> (&'static str, std::path::PathBuf) {
    let wanted = std::env::var("WEIR_BENCH_MODEL").unwrap_or_else(|_| "xgboost".into());
    let mut all = models();
    let Some(at) = all.iter().position(|(label, _)| *label == wanted) else {
        let labels: Vec<&str> = all.iter().map(|(label, _)| *label).collect();
        panic!("WEIR_BENCH_MODEL={wanted}: not one of {labels:?}");
    };
    all.swap_remove(at)
}

fn config() -> ScoreConfig {
    let (_, dir) = model();
    let mut config = score_config(&dir);
    config.cores = inference_core(true).map(|core| vec![InstanceCores { cores: vec![core] }]);
    config
}

struct Report {
    max_rate: f64,
    rate: f64,
    histogram: Histogram<u64>,
}

fn main() {
    let seconds: u64 = std::env::var("WEIR_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let report = timely::execute_directly(move |worker| {
        let base = Instant::now();
        let histogram = Rc::new(RefCell::new(
            Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram"),
        ));
        let scored = Rc::new(RefCell::new(0u64));
        let mut input: InputHandle<Tick, CapacityContainerBuilder<Vec<FeatureRow>>> =
            InputHandle::new();
        let probe = ProbeHandle::new();
        let (h, n) = (histogram.clone(), scored.clone());
        worker.dataflow::<Tick, _, _>(|scope| {
            let Ok(out) = input.to_stream(scope).score(config()) else {
                panic!("cannot start the score operator (set WEIR_ORT_LIB)");
            };
            out.scores
                .inspect(move |batch| {
                    let now = base.elapsed().as_nanos() as u64;
                    let mut h = h.borrow_mut();
                    for row in &batch.rows {
                        let _ = h.record(now.saturating_sub(row.fired_at_ns).max(1));
                    }
                    *n.borrow_mut() += batch.len() as u64;
                })
                .probe_with(&probe);
        });
        let pool = rows(1 << 16, 9);
        let mut next_row = 0usize;
        let mut take = |n: usize| -> Vec<FeatureRow> {
            (0..n)
                .map(|_| {
                    next_row = (next_row + 1) % pool.len();
                    let mut r = pool[next_row].clone();
                    r.fired_at_ns = base.elapsed().as_nanos() as u64;
                    r
                })
                .collect()
        };
        let mut tick: Tick = 0;

        // 1. Max rate: keep the operator busy for `seconds`, then drain.
        let start = Instant::now();
        let before = *scored.borrow();
        while start.elapsed() < Duration::from_secs(seconds) {
            // Only feed once earlier ticks are out, so the input queue stays short.
            if !probe.less_than(&tick) {
                for r in take(4 * BATCH_ROWS) {
                    input.send(r);
                }
                tick += 1;
                input.advance_to(tick);
            }
            // Park until the inference thread's result wakes the operator.
            worker.step_or_park(Some(Duration::from_millis(1)));
        }
        while probe.less_than(&tick) {
            worker.step_or_park(Some(Duration::from_millis(1)));
        }
        let max_rate = (*scored.borrow() - before) as f64 / start.elapsed().as_secs_f64();

        // 2. Half of it, paced one 1 ms tick at a time.
        histogram.borrow_mut().reset();
        let rate = max_rate / 2.0;
        let per_tick = rate / 1000.0;
        let start = Instant::now();
        let mut owed = 0.0;
        let mut period = 0u64;
        while start.elapsed() < Duration::from_secs(seconds) {
            let due = start + Duration::from_millis(period);
            if Instant::now() >= due {
                owed += per_tick;
                let n = owed.floor() as usize;
                owed -= n as f64;
                for r in take(n) {
                    input.send(r);
                }
                tick += 1;
                input.advance_to(tick);
                period += 1;
            }
            // Like a job's worker: park until the next tick is due or a result wakes it.
            let next = start + Duration::from_millis(period);
            worker.step_or_park(Some(next.saturating_duration_since(Instant::now())));
        }
        while probe.less_than(&tick) {
            worker.step_or_park(Some(Duration::from_millis(1)));
        }
        let histogram = histogram.borrow().clone();
        Report {
            max_rate,
            rate,
            histogram,
        }
    });
    let us = |q: f64| report.histogram.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "score_latency/{}: max rate {:.0} rows/s; at {:.0} rows/s ({} rows): window close -> \
         score emitted p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        model().0,
        report.max_rate,
        report.rate,
        report.histogram.len(),
        us(0.5),
        us(0.99),
        report.histogram.max() as f64 / 1000.0
    );
}
