//! Shared input of the scoring benchmarks (`scoring`, `score_paired`, `score_latency`): the
//! committed models, seeded feature rows shaped like the clickstream job's (8 features, ~10 %
//! missing), the raw ONNX Runtime baseline and the Weir paths they are compared with.

#![allow(dead_code)]

/// The job binary's allocator (`jobs/src/main.rs`: `weir::allocator`), so
/// the scoring path is measured with the allocator a job runs with.
#[global_allocator]
static ALLOCATOR: weir::allocator::JobAllocator = weir::allocator::JobAllocator;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use weir_features::row::FeatureRow;
use weir_features::vocab::SourcePosition;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::metrics::JobMetrics;
use weir_operators::placement::Placement;
use weir_score::batcher::Batcher;
use weir_score::budget::{
    available_cores, cpu_set, pin_current_thread, worker_core, InstanceCores,
};
use weir_score::config::{BatchLimits, InferenceSetup, ModelSettings};
use weir_score::counters::ScoreCounters;
use weir_score::inference_batch::InferenceBatch;
use weir_score::inference_thread::InferenceThread;
use weir_score::model_set::ModelSet;
use weir_score::operator::ScoreConfig;
use weir_score::records::{scored_batches, BatchOutcome, RecordContext};
use weir_score::registry::ModelSource;
use weir_score::{ModelSession, SessionOptions};
use weir_testkit::row::feature_row;

/// Rows per micro-batch.
pub const BATCH_ROWS: usize = 256;
/// Key groups of the benchmark rows.
pub const KEY_GROUPS: u32 = 4096;

/// The three committed model kinds: (label, directory).
pub fn models() -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        ("xgboost", root.join("tests/fixtures/model")),
        ("lightgbm", root.join("tests/fixtures/models/lightgbm")),
        ("mlp", root.join("tests/fixtures/models/mlp")),
    ]
}

/// The clickstream job's feature names, in order (from `jobs/clickstream.toml`).
pub fn feature_names() -> Vec<String> {
    weir_testkit::clickstream::feature_names()
}

/// `n` seeded feature rows over 10 000 keys.
pub fn rows(n: usize, seed: u64) -> Vec<FeatureRow> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let key = format!("u{:05}", rng.random_range(0..10_000));
            let events = f64::from(rng.random_range(1..40u32));
            let views = (events * 0.6).floor();
            let clicks = (events * 0.3).floor();
            let purchases = f64::from(u8::from(rng.random_bool(0.05)));
            let dwell = rng.random_range(500.0..9000.0);
            let missing = purchases == 0.0 || rng.random_bool(0.1);
            let amount = if missing {
                f64::NAN
            } else {
                rng.random_range(5.0..300.0)
            };
            let values = [
                events,
                views,
                clicks,
                purchases,
                dwell,
                dwell * 1.5,
                amount,
                amount,
            ];
            let at = SourcePosition {
                partition: 0,
                offset: i as i64,
            };
            FeatureRow {
                records: events as u64,
                first: at,
                last: at,
                ..feature_row(&key, KEY_GROUPS, 60_000 + i as i64, &values)
            }
        })
        .collect()
}

/// `batches` micro-batches of [`BATCH_ROWS`] seeded [`rows`] (seed `seed`), and each batch's
/// feature values side by side (the raw paths' input).
pub fn batches(batches: usize, seed: u64) -> (Vec<Vec<FeatureRow>>, Vec<Vec<f64>>) {
    let all = rows(batches * BATCH_ROWS, seed);
    let batches: Vec<Vec<FeatureRow>> = all.chunks(BATCH_ROWS).map(<[_]>::to_vec).collect();
    let values = batches
        .iter()
        .map(|b| b.iter().flat_map(|r| r.values.iter().copied()).collect())
        .collect();
    (batches, values)
}

/// Each batch of `values` converted to the model's `f32` input by Weir's preprocessing, for
/// the paths that run ONNX Runtime alone on prepared inputs.
pub fn model_inputs(model_dir: &Path, values: &[Vec<f64>]) -> Vec<Vec<f32>> {
    let Ok(manifest) = weir_score::ModelManifest::load(model_dir) else {
        panic!("cannot read {}", model_dir.display());
    };
    let preprocessor = weir_score::preprocess::Preprocessor::new(&manifest.features);
    values
        .iter()
        .map(|v| {
            let mut out = Vec::new();
            preprocessor.fill(v, &mut out);
            out
        })
        .collect()
}

/// Session options used by every path (and mirrored by the raw baseline).
pub fn session_options() -> SessionOptions {
    SessionOptions {
        intra_threads: 1,
        warmup_batches: 2,
        max_batch_rows: BATCH_ROWS,
        intra_thread_affinities: None,
    }
}

/// An inference thread's setup for `model_dir`.
pub fn setup(model_dir: &Path) -> InferenceSetup {
    InferenceSetup {
        instance: 0,
        model: model_settings(model_dir),
        job_features: feature_names(),
        cores: None,
        metrics: Arc::new(JobMetrics::default()),
        counters: Arc::new(ScoreCounters::default()),
        serving: Arc::default(),
    }
}

/// The raw ONNX Runtime baseline of the scoring benchmarks: a plain `ort` session (1 intra-op
/// thread, no spinning) and the hand-written f64 → f32 conversion a caller without Weir writes
/// (missing → default, clip, scale, read from the manifest).
pub struct RawOrt {
    session: ort::session::Session,
    /// Per feature: (default, clip low, clip high, mean, std).
    steps: Vec<(f64, f64, f64, f64, f64)>,
    input: String,
    output: String,
    column: usize,
    buffer: Vec<f32>,
}

impl RawOrt {
    /// The baseline for the model in `dir`.
    pub fn load(dir: &Path) -> RawOrt {
        let manifest = weir_score::ModelManifest::load(dir).expect("manifest");
        let env = weir_score::onnx_environment().expect("ONNX Runtime (set WEIR_ORT_LIB)");
        let session = ort::session::Session::builder(&env)
            .and_then(|b| Ok(b.with_intra_threads(1)?))
            .and_then(|b| Ok(b.with_inter_threads(1)?))
            .and_then(|b| Ok(b.with_intra_op_spinning(false)?))
            .and_then(|mut b| b.commit_from_file(dir.join("model.onnx")))
            .expect("raw session");
        let steps = manifest
            .features
            .iter()
            .map(|f| {
                let (lo, hi) = f.clip.map_or((f64::NEG_INFINITY, f64::INFINITY), |c| {
                    (
                        c.min.unwrap_or(f64::NEG_INFINITY),
                        c.max.unwrap_or(f64::INFINITY),
                    )
                });
                let (mean, std) = f.scale.map_or((0.0, 1.0), |s| (s.mean, s.std));
                (f.default, lo, hi, mean, std)
            })
            .collect();
        RawOrt {
            session,
            steps,
            input: manifest.input.name.clone(),
            output: manifest.output.name.clone(),
            column: manifest.output.column,
            buffer: Vec::with_capacity(BATCH_ROWS * manifest.features.len()),
        }
    }

    /// Converts one batch of `BATCH_ROWS` rows and scores it; returns the sum of the scores.
    pub fn score(&mut self, values: &[f64]) -> f32 {
        let width = self.steps.len();
        self.buffer.clear();
        for (i, &x) in values.iter().enumerate() {
            let (default, lo, hi, mean, std) = self.steps[i % width];
            let x = if x.is_nan() { default } else { x };
            self.buffer.push(((x.clamp(lo, hi) - mean) / std) as f32);
        }
        let buffer = std::mem::take(&mut self.buffer);
        let sum = self.score_prebuilt(&buffer);
        self.buffer = buffer;
        sum
    }

    /// Scores one batch of already converted `f32` inputs; returns the sum of the scores.
    pub fn score_prebuilt(&mut self, x: &[f32]) -> f32 {
        let width = self.steps.len();
        let tensor =
            ort::value::TensorRef::from_array_view(([BATCH_ROWS, width], x)).expect("tensor");
        let out = self
            .session
            .run(ort::inputs![self.input.as_str() => tensor])
            .expect("run");
        let (shape, data) = out[self.output.as_str()]
            .try_extract_tensor::<f32>()
            .expect("f32 output");
        let stride = if shape.len() == 2 {
            shape[1] as usize
        } else {
            1
        };
        data.iter().skip(self.column).step_by(stride).sum::<f32>()
    }
}

/// A score config for one instance on one worker, serving `model_dir` (no second version).
pub fn score_config(model_dir: &Path) -> ScoreConfig {
    ScoreConfig {
        model: model_settings(model_dir),
        batching: BatchLimits {
            max_batch_delay: Duration::from_millis(1),
            // The job default; `WEIR_BENCH_MAX_IN_FLIGHT` overrides it to compare queue depths.
            max_in_flight: std::env::var("WEIR_BENCH_MAX_IN_FLIGHT")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(16),
        },
        job_features: feature_names(),
        cores: None,
        parallelism: 1,
        placement: Placement::new(1, 1),
        key_groups: KEY_GROUPS,
        source_name: "bench".into(),
        metrics: Arc::new(JobMetrics::default()),
        counters: Arc::new(ScoreCounters::default()),
        backlog: ScoreBacklog::default(),
        serving: Arc::default(),
    }
}

/// The benchmarks' model: `model_dir` alone (no second version), [`session_options`].
fn model_settings(model_dir: &Path) -> ModelSettings {
    ModelSettings {
        source: ModelSource::Dir(model_dir.to_path_buf()),
        secondary: None,
        session: session_options(),
    }
}

/// The inference thread's core when a benchmark pins threads: the second core this process
/// may run on, when it has two or more; `WEIR_BENCH_PIN=1` or `0` overrides the benchmark's
/// `default`.
pub fn inference_core(default: bool) -> Option<usize> {
    let pin = match std::env::var("WEIR_BENCH_PIN").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => default,
    };
    let ids = &cpu_set().ids;
    (pin && available_cores() >= 2)
        .then(|| ids.get(1).copied())
        .flatten()
}

/// Pins the calling thread like a job's Timely worker (`jobs/src/pipeline.rs`, `pin_worker`):
/// to a core the inference thread (on `inference_core`) does not use, when it is pinned.
pub fn pin_like_a_worker(inference_core: Option<usize>) {
    let pinned: Vec<usize> = inference_core.into_iter().collect();
    if let Some(core) = worker_core(&pinned, cpu_set(), 0) {
        if !pin_current_thread(core) {
            eprintln!("could not pin the benchmark thread to core {core}");
        }
    }
}

/// The score operator's batcher without Timely: an inference thread for `model_dir` (pinned
/// to `core` if any) and the job's default limits (`max_in_flight` 16). Like the operator's
/// `SyncActivator`, the thread's wake-up unparks the calling thread.
pub fn batcher(model_dir: &Path, core: Option<usize>) -> Batcher<()> {
    batcher_counting(model_dir, core, Arc::new(ScoreCounters::default()))
}

/// [`batcher`], counting into `counters` (e.g. the inference thread's busy time).
pub fn batcher_counting(
    model_dir: &Path,
    core: Option<usize>,
    counters: Arc<ScoreCounters>,
) -> Batcher<()> {
    let mut config = score_config(model_dir);
    config.counters = counters;
    config.cores = core.map(|core| vec![InstanceCores { cores: vec![core] }]);
    let me = std::thread::current();
    let wake = move || me.unpark();
    let thread = InferenceThread::spawn(
        config.inference_setup(0),
        0,
        config.batching.max_in_flight,
        wake,
    )
    .expect("inference thread");
    Batcher::new(thread, &config)
}

/// Takes finished batches from `batcher` into `out`, parking until the inference thread wakes
/// this thread when there are none (as a Timely worker parks until an activation).
fn wait_finished(batcher: &mut Batcher<()>, out: &mut Vec<((), BatchOutcome)>) {
    loop {
        out.extend(batcher.finished());
        if !out.is_empty() {
            return;
        }
        std::thread::park_timeout(Duration::from_millis(1));
    }
}

/// The operator's path without Timely: `batches` pushed into `batcher` (values gathered into
/// its batches, rows kept), sent to the inference thread while the in-flight bound allows,
/// scored, and handed back with their rows as scored batches; returns the number of scored
/// rows. In the operator's order: results taken, new rows pushed and sent, then the results
/// emitted — here dropped, rows included, as a sink drops them once it has written them.
pub fn through_batcher(batcher: &mut Batcher<()>, batches: Vec<Vec<FeatureRow>>) -> usize {
    let mut scored = 0;
    let mut finished = Vec::new();
    let mut emit = |finished: &mut Vec<((), BatchOutcome)>| {
        scored += finished.drain(..).map(|(_, o)| o.rows()).sum::<usize>();
    };
    for mut rows in batches {
        while !batcher.has_room() {
            wait_finished(batcher, &mut finished);
        }
        batcher.push(0, (), &mut rows);
        batcher.send(&mut finished);
        emit(&mut finished);
    }
    batcher.close_open(|_| true);
    batcher.send(&mut finished);
    while batcher.in_flight() > 0 {
        wait_finished(batcher, &mut finished);
        emit(&mut finished);
    }
    emit(&mut finished);
    scored
}

/// What the operator and its inference thread do, on one thread: each batch's values
/// gathered into `batch`, scored by `set`, the rows handed on with the scores as a scored
/// batch (dropped here, rows included); returns the number of scored rows.
pub fn one_thread(
    set: &mut ModelSet,
    batch: &mut InferenceBatch,
    context: &RecordContext,
    batches: Vec<Vec<FeatureRow>>,
) -> usize {
    let mut scored = 0;
    for rows in batches {
        batch.clear();
        for row in &rows {
            batch.push_row(&row.values, None);
        }
        set.score(batch);
        scored += scored_batches(vec![rows], batch, context).rows();
    }
    scored
}

/// A [`ModelSet`] serving `model_dir` on this thread, and the context its records need.
pub fn model_set(model_dir: &Path) -> (ModelSet, RecordContext) {
    let session =
        ModelSession::load(model_dir, &feature_names(), &session_options()).expect("session");
    let metrics = Arc::new(JobMetrics::default());
    let set = ModelSet::new(
        session,
        None,
        metrics.clone(),
        Arc::new(ScoreCounters::default()),
    );
    let context = RecordContext {
        job_features: feature_names(),
        source_name: "bench".into(),
        metrics,
    };
    (set, context)
}
