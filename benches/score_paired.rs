//! Scoring throughput as paired ratios (issue #5): robust to a machine whose load drifts.
//!
//! Run: `cargo bench --bench score_paired` (plain `main`; results: BENCHMARKS.md).
//! Optional: `WEIR_BENCH_ROUNDS=60` (default 40); `WEIR_BENCH_PIN=1` pins the inference thread
//! to core 1 and this thread to core 0 (as a job with `[model] cores` pins them);
//! `WEIR_BENCH_CYCLES=1` (default 4) sets how often a pass goes through the input.
//!
//! Same inputs and paths as `benches/scoring.rs` (64 distinct batches of 256 seeded rows;
//! XGBoost, LightGBM, MLP): `raw_ort` (plain `ort` session fed by a hand-written f64 → f32
//! conversion), `weir_session` (`ModelSession::score_batch`), `weir_models` (the whole
//! scoring path on this thread: `FeatureRow`s in, values gathered into a batch,
//! `ModelSet::score`, the rows out with their scores as a `ScoredBatch`), `ort_only` (the raw
//! session on inputs converted to `f32` before the pass: ONNX Runtime alone, which no path
//! beats without a faster model run; reported, not a target), `weir_thread` (the
//! operator's path without Timely, `Batcher`: values gathered on this thread, scored on the
//! inference thread, `ScoredBatch`es — the rows, their scores, the version's verdict — built
//! back here, as the operator emits them; at most 16 batches in flight, the job default
//! `max_in_flight`). The scored batches, with their rows, are dropped inside the timed pass
//! (as a sink drops them after encoding: each row's `Vec<f64>` is freed there); the input
//! rows are cloned before it.
//!
//! A pass goes `CYCLES` times through the 64 batches: `raw_ort` and `weir_session` read the
//! same values again (1 MB, warm in L2 after the first cycle), the row paths get a fresh
//! clone of the rows per cycle (3.5 MB each, cold). Throughput is the steady state of a
//! stream, so a pass must be long against `weir_thread`'s fill and drain: the inference
//! thread idles between passes, and waking an idle vCPU for the first batch took 60-90 µs
//! here (measured from the pass start to the first batch's start), plus ~20-30 µs to hand
//! back the last results; at one cycle (~1 ms for the MLP) that is ~8 % of the pass, at four
//! ~2 %. `weir_thread` also reports its inference thread's busy share of the pass
//! (`ScoreCounters::inference_busy_ns`): below 100 % is time it waited for work.
//!
//! Each round runs one pass of every path back to back, in a rotating order, and the report
//! gives each path's median over rounds of `rows/s(path) / rows/s(raw_ort)` in that same
//! round, so slow drifts of machine load cancel out. Criterion's `scoring` bench measures
//! the paths one after the other, which on a shared machine mixes load changes into ratios.

mod score_common;

use std::sync::Arc;
use std::time::Instant;

use score_common::{
    batcher_counting, batches, feature_names, inference_core, model_inputs, model_set, models,
    one_thread, pin_like_a_worker, session_options, through_batcher, RawOrt, BATCH_ROWS,
};
use weir_features::row::FeatureRow;
use weir_score::counters::ScoreCounters;
use weir_score::inference_batch::InferenceBatch;
use weir_score::ModelSession;

const BATCHES: usize = 64;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The number in environment variable `name`, or `default`.
fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rounds = env_number("WEIR_BENCH_ROUNDS", 40);
    let cycles = env_number("WEIR_BENCH_CYCLES", 4).max(1);
    // Unpinned unless `WEIR_BENCH_PIN=1` (inference thread on core 1, this thread on core 0).
    let core = inference_core(false);
    pin_like_a_worker(core);
    let (batches, values) = batches(BATCHES, 5);
    for (label, dir) in models() {
        let inputs = model_inputs(&dir, &values);
        let raw = std::cell::RefCell::new(RawOrt::load(&dir));
        let raw_pass = || {
            let mut sum = 0.0f32;
            for v in std::iter::repeat_n(&values, cycles).flatten() {
                sum += raw.borrow_mut().score(v);
            }
            std::hint::black_box(sum);
        };
        let ort_only_pass = || {
            let mut sum = 0.0f32;
            for x in std::iter::repeat_n(&inputs, cycles).flatten() {
                sum += raw.borrow_mut().score_prebuilt(x);
            }
            std::hint::black_box(sum);
        };
        let mut session =
            ModelSession::load(&dir, &feature_names(), &session_options()).expect("session");
        let mut out = Vec::with_capacity(BATCH_ROWS);
        let mut session_pass = || {
            for v in std::iter::repeat_n(&values, cycles).flatten() {
                session.score_batch(v, BATCH_ROWS, &mut out).expect("score");
            }
            std::hint::black_box(&out);
        };
        let (mut set, context) = model_set(&dir);
        let mut batch = InferenceBatch::default();
        let mut models_pass = |input: Vec<Vec<FeatureRow>>| {
            std::hint::black_box(one_thread(&mut set, &mut batch, &context, input));
        };
        let counters = Arc::new(ScoreCounters::default());
        let mut batcher = batcher_counting(&dir, core, counters.clone());
        let mut thread_pass = |input: Vec<Vec<FeatureRow>>| {
            std::hint::black_box(through_batcher(&mut batcher, input));
        };
        let rows_per_pass = (cycles * BATCHES * BATCH_ROWS) as f64;
        const PATHS: [&str; 5] = [
            "raw_ort",
            "weir_session",
            "weir_models",
            "weir_thread",
            "ort_only",
        ];
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); PATHS.len()];
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); PATHS.len()];
        let mut busy_shares = Vec::new();
        for round in 0..rounds + 2 {
            let mut t = [0.0f64; PATHS.len()];
            for k in 0..PATHS.len() {
                let which = (k + round) % PATHS.len();
                let input: Vec<Vec<FeatureRow>> = if which == 2 || which == 3 {
                    std::iter::repeat_n(&batches, cycles)
                        .flat_map(Clone::clone)
                        .collect()
                } else {
                    Vec::new()
                };
                let busy_before = ScoreCounters::get(&counters.inference_busy_ns);
                let start = Instant::now();
                match which {
                    0 => raw_pass(),
                    1 => session_pass(),
                    2 => models_pass(input),
                    3 => thread_pass(input),
                    _ => ort_only_pass(),
                }
                t[which] = start.elapsed().as_secs_f64();
                if which == 3 && round >= 2 {
                    let busy = ScoreCounters::get(&counters.inference_busy_ns) - busy_before;
                    busy_shares.push(busy as f64 / 1e9 / t[which]);
                }
            }
            if round < 2 {
                continue; // warm-up rounds
            }
            for (p, secs) in t.iter().enumerate() {
                rates[p].push(rows_per_pass / secs);
                ratios[p].push(t[0] / secs);
            }
        }
        let parts: Vec<String> = PATHS
            .iter()
            .zip(rates.into_iter().zip(ratios))
            .map(|(name, (rate, ratio))| {
                format!(
                    "{name} {:.2} M rows/s ({:.2} × raw)",
                    median(rate) / 1e6,
                    median(ratio)
                )
            })
            .collect();
        println!(
            "score_paired/{label}: {}; weir_thread's inference thread busy {:.0} % — {rounds} \
             rounds of {cycles} cycle(s), medians",
            parts.join("; "),
            median(busy_shares) * 100.0
        );
    }
}
