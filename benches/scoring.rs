//! Scoring throughput: Weir's scoring path against a raw ONNX Runtime session loop (issue #5).
//!
//! Run: `cargo bench --bench scoring -- --warm-up-time 1 --measurement-time 4`
//! (results: BENCHMARKS.md).
//!
//! For each committed model (XGBoost, LightGBM, MLP with clip + scale) and the same 64 batches
//! of 256 seeded feature rows (8 features, ~10 % missing), in the same run:
//! - `raw_ort`: a plain `ort` session (same options: 1 intra-op thread, no spinning) fed by a
//!   hand-written loop that turns each `f64` batch into the `f32` input (missing -> default,
//!   clip, scale, read from the manifest) — what a caller without Weir has to do;
//! - `raw_ort_prebuilt`: the same session on `f32` tensors built before timing (inference and
//!   output extraction only: an upper bound no real caller reaches);
//! - `weir_session`: `ModelSession::score_batch` on the `f64` rows (defaults, clip/scale,
//!   narrowing, inference, output column);
//! - `weir_models`: the whole scoring path on the bench thread: `FeatureRow`s in, values
//!   gathered into a `InferenceBatch`, `ModelSet::score`, the rows out again with their scores
//!   and verdict (model tag, inference time) as a `ScoredBatch`, no thread hand-off;
//! - `weir_thread`: the score operator's path without Timely (`Batcher`): values gathered on
//!   the bench thread, scored by the instance's inference thread (at most 4 batches in
//!   flight, the job default), `ScoredBatch`es (the rows and their scores) built back on the
//!   bench thread.
//!
//! Throughput is in rows; the ratio to `raw_ort` is the number that matters (target ≥ 0.9).

mod score_common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use score_common::{
    batcher, batches, feature_names, model_inputs, model_set, models, one_thread, session_options,
    through_batcher, RawOrt, BATCH_ROWS,
};
use weir_score::inference_batch::InferenceBatch;
use weir_score::ModelSession;

const BATCHES: usize = 64;

fn bench(c: &mut Criterion) {
    let (batches, values) = batches(BATCHES, 5);
    for (label, dir) in models() {
        let inputs = model_inputs(&dir, &values);
        let mut group = c.benchmark_group(format!("score/{label}"));
        group.throughput(Throughput::Elements((BATCHES * BATCH_ROWS) as u64));

        let mut raw = RawOrt::load(&dir);
        group.bench_function("raw_ort", |b| {
            b.iter(|| {
                let mut sum = 0.0f32;
                for v in &values {
                    sum += raw.score(v);
                }
                black_box(sum)
            })
        });
        group.bench_function("raw_ort_prebuilt", |b| {
            b.iter(|| {
                let mut sum = 0.0f32;
                for x in &inputs {
                    sum += raw.score_prebuilt(x);
                }
                black_box(sum)
            })
        });

        let mut session =
            ModelSession::load(&dir, &feature_names(), &session_options()).expect("session");
        let mut out = Vec::with_capacity(BATCH_ROWS);
        group.bench_function("weir_session", |b| {
            b.iter(|| {
                let mut sum = 0.0f32;
                for v in &values {
                    session.score_batch(v, BATCH_ROWS, &mut out).expect("score");
                    sum += out.iter().sum::<f32>();
                }
                black_box(sum)
            })
        });

        let (mut set, context) = model_set(&dir);
        let mut batch = InferenceBatch::default();
        group.bench_function("weir_models", |b| {
            b.iter_batched(
                || batches.clone(),
                |batches| black_box(one_thread(&mut set, &mut batch, &context, batches)),
                BatchSize::LargeInput,
            )
        });

        let mut batcher = batcher(&dir, None);
        group.bench_function("weir_thread", |b| {
            b.iter_batched(
                || batches.clone(),
                |batches| black_box(through_batcher(&mut batcher, batches)),
                BatchSize::LargeInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
