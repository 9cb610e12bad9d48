//! Issue 16's metrics acceptance, on the real broker: a job serves `/metrics`, `/healthz` and
//! `/readyz` while it runs, and what it serves is what happened.
//!
//! - During a run (after the first half of the input is read, before the second is sent) and
//!   after it (every window of the input scored and acknowledged), the scrape's counts equal
//!   what the test sent: records read and decoded per source instance, windows fired, scores
//!   and inference errors by model version, scores delivered; the consumer lag of every
//!   partition is 0 once the input is read.
//! - Drift: the model directory's manifest gets a baseline histogram computed here from
//!   held-out events of the same generator (another seed), scored by a raw ONNX Runtime
//!   session. Input from that generator keeps `weir_model_drift_alert` at 0; input shifted
//!   towards purchases sets it to 1. `[model] drift_alert = 0.2`.
//! - Error rate: the model (`tests/fixtures/failing_model`) fails on windows whose
//!   `amount_max` is above 1e6; with a fifth of the windows failing,
//!   `weir_inference_error_rate_alert` is 1 (`[model] error_rate_alert = 0.05`), and 0 in the
//!   run without failures.
//! - Checkpoints (every 200 ms) are counted with their duration, size and age.
//! - An address already in use fails the run at start, naming the address.
//!
//! Each run has its own topics (two partitions). Windows close on a last event per partition,
//! 20 windows past the input, so every window of the input fires without waiting for idleness.

mod support;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use support::kafka::{create_topic, produce, produce_to, unique_topic};
use support::oracle::{expected_windows, raw_ort_scores, Expected, WINDOW_MS};
use weir::pipeline::Mode;
use weir::run::{run_job_with, RunOptions};
use weir::JobFile;
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};
use weir_testkit::scrape::Samples;

/// `amount_max` above which `tests/fixtures/failing_model` fails its inference call.
const FAILS_ABOVE: f64 = 1e6;
const USERS: usize = 40;
/// Events per run, 500 ms of event time apart (20 minutes: about 800 user windows).
const EVENTS: usize = 2_400;
const MODEL: &str = "fails_on_large_amounts";
const DRIFT_ALERT: f64 = 0.2;
const ERROR_RATE_ALERT: f64 = 0.05;

/// What the events of a run look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Input {
    /// The generator the baseline was computed from.
    Baseline,
    /// Mostly purchases with large amounts (scores near 1); one user in five also sends an
    /// amount the model fails on.
    ShiftedAndFailing,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One event of user `user` at `ts`.
fn event(rng: &mut StdRng, input: Input, user: usize, ts: i64) -> (String, Vec<u8>) {
    let (kind, amount) = match input {
        Input::Baseline => {
            let kind = ["view", "click", "purchase"][rng.random_range(0..3)];
            (
                kind,
                rng.random_bool(0.3).then(|| rng.random_range(1.0..200.0)),
            )
        }
        Input::ShiftedAndFailing if user.is_multiple_of(5) && rng.random_bool(0.2) => {
            ("purchase", Some(FAILS_ABOVE * 10.0))
        }
        Input::ShiftedAndFailing => ("purchase", Some(rng.random_range(500.0..2_000.0))),
    };
    let mut value = json!({
        "user": format!("u{user}"),
        "ts": ts,
        "type": kind,
        "dwell_ms": rng.random_range(10..5_000),
    });
    if let Some(amount) = amount {
        value["amount"] = json!(amount);
    }
    (format!("u{user}"), value.to_string().into_bytes())
}

/// `EVENTS` events from `t0` on.
fn events(seed: u64, input: Input, t0: i64) -> Vec<(String, Vec<u8>)> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..EVENTS)
        .map(|i| {
            let user = rng.random_range(0..USERS);
            event(&mut rng, input, user, t0 + i as i64 * 500)
        })
        .collect()
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/failing_model")
}

/// A copy of the failing model whose manifest's baseline is the score histogram of held-out
/// baseline events.
fn model_with_baseline(dir: &Path) -> Result<PathBuf> {
    let held_out = events(7, Input::Baseline, 0);
    let payloads: Vec<Vec<u8>> = held_out.into_iter().map(|(_, p)| p).collect();
    let rows: Vec<Vec<f64>> = expected_windows(&payloads)
        .into_values()
        .map(|e| e.features)
        .collect();
    let scores = raw_ort_scores(&fixture(), &rows)?;
    let mut counts = [0u64; 10];
    for score in scores {
        counts[((score * 10.0) as usize).min(9)] += 1;
    }
    let model = dir.join("model");
    std::fs::create_dir_all(&model)?;
    std::fs::copy(fixture().join("model.onnx"), model.join("model.onnx"))?;
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(fixture().join("manifest.json"))?)?;
    manifest["baseline"]["counts"] = json!(counts);
    std::fs::write(
        model.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    Ok(model)
}

/// `GET path` over HTTP/1.1: the status code and the body.
fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    Ok(weir_testkit::scrape::get(addr, path)?)
}

/// One `/metrics` scrape, checked as OpenMetrics text.
fn take_scrape(addr: SocketAddr) -> Result<Samples> {
    let (status, body) = http_get(addr, "/metrics")?;
    ensure!(status == 200, "/metrics answered {status}: {body}");
    ensure!(body.ends_with("# EOF\n"), "not OpenMetrics text: {body}");
    Ok(Samples::parse(&body)?)
}

struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<weir::RunSummary>>,
}

impl Running {
    /// Scrapes until `done` holds, while the job runs.
    fn scrape_until(&self, what: &str, done: impl Fn(&Samples) -> bool) -> Result<Samples> {
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            ensure!(!self.thread.is_finished(), "the job stopped by itself");
            if let Ok(scrape) = take_scrape(self.addr) {
                if done(&scrape) {
                    return Ok(scrape);
                }
                ensure!(
                    Instant::now() < deadline,
                    "timed out waiting for {what}; last scrape: {scrape:?}"
                );
            }
            ensure!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn finish(self) -> Result<weir::RunSummary> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the job panicked"))?
    }
}

/// Starts the clickstream job on `input` with `model`, serving metrics on a free port.
fn start(label: &str, model: &Path, input: &str) -> Result<Running> {
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.name = format!("metrics-{label}");
    job.kafka = support::kafka::properties();
    job.source.topic = input.to_owned();
    job.source.bounded = false;
    job.sink.topic = unique_topic(&format!("metrics-{label}-scores"));
    job.sink.dead_letter_topic = unique_topic(&format!("metrics-{label}-dlq"));
    create_topic(&job.sink.topic, 1)?;
    create_topic(&job.sink.dead_letter_topic, 1)?;
    // The drift window is longer than the run: every score of the run is in it. Set as TOML,
    // like the job file: the section's shape is the job file's business.
    job.model = toml::from_str(&format!(
        "path = {model:?}\ndrift_alert = {DRIFT_ALERT}\nerror_rate_alert = {ERROR_RATE_ALERT}\n\
         drift_window = \"1h\""
    ))?;
    let checkpoints = scratch_dir(&format!("metrics-{label}-ckpt"));
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(&checkpoints, "200ms"))?);
    let compiled = job.compile()?;
    let addr = weir_testkit::cluster::free_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let options = RunOptions {
        metrics_addr: Some(addr),
        ..RunOptions::default()
    };
    let thread = std::thread::spawn(move || run_job_with(compiled, Mode::Score, flag, &options));
    Ok(Running { addr, stop, thread })
}

/// What a run must count: records sent, and the windows the input closes.
struct Sent {
    records: usize,
    windows: BTreeMap<(String, i64), Expected>,
}

impl Sent {
    fn failing(&self) -> usize {
        self.windows
            .values()
            .filter(|e| e.features[7] > FAILS_ABOVE)
            .count()
    }
}

/// Runs one input through a job: produces half, scrapes during the run, produces the rest
/// and the closing events, scrapes after every window is scored; returns the last scrape.
fn run_and_scrape(label: &str, model: &Path, input: Input, seed: u64) -> Result<(Samples, Sent)> {
    let topic = unique_topic(&format!("metrics-{label}-in"));
    create_topic(&topic, 2)?;
    let t0 = now_ms() - 2 * 3_600_000;
    let t0 = t0 - t0.rem_euclid(WINDOW_MS);
    let records = events(seed, input, t0);
    let (first, second) = records.split_at(EVENTS / 2);
    produce(&topic, first)?;
    let job = start(label, model, &topic)?;

    // During the run: alive, ready once built and warm, and counting what it read so far.
    let (status, body) = http_get_retrying(job.addr, "/healthz")?;
    ensure!(status == 200 && body == "ok\n", "/healthz: {status} {body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = http_get(job.addr, "/readyz")?;
        if status == 200 {
            break;
        }
        ensure!(
            status == 503 && body.starts_with("not ready: "),
            "/readyz: {status} {body}"
        );
        ensure!(Instant::now() < deadline, "never ready: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let half = first.len() as f64;
    let during = job.scrape_until("the first half read", |s| {
        s.sum("weir_records_in_total", &[("operator", "source")]) >= half
    })?;
    let source = [("operator", "source")];
    ensure!(during.sum("weir_records_in_total", &source) == half);
    ensure!(during.sum("weir_records_out_total", &source) == half);
    for partition in ["0", "1"] {
        ensure!(
            during
                .one(
                    "weir_source_consumer_lag_records",
                    &[("partition", partition)]
                )
                .is_ok(),
            "no lag gauge for partition {partition}"
        );
    }
    let serving = [("model", MODEL), ("version", "1"), ("role", "primary")];
    ensure!(during.sum("weir_model_serving", &serving) >= 1.0);

    // The rest, then one event per partition 20 windows later: every window of the input closes.
    produce(&topic, second)?;
    let closer_ts = t0 + EVENTS as i64 * 500 + 20 * WINDOW_MS;
    let closer = |user: &str| {
        let payload = json!({"user": user, "ts": closer_ts, "type": "view", "dwell_ms": 1});
        vec![(user.to_owned(), payload.to_string().into_bytes())]
    };
    produce_to(&topic, 0, &closer("closer-0"))?;
    produce_to(&topic, 1, &closer("closer-1"))?;
    let payloads: Vec<Vec<u8>> = records.iter().map(|(_, p)| p.clone()).collect();
    let open = closer_ts - closer_ts.rem_euclid(WINDOW_MS);
    let windows: BTreeMap<_, _> = expected_windows(&payloads)
        .into_iter()
        .filter(|((_, start), _)| *start < open)
        .collect();
    let sent = Sent {
        records: records.len() + 2,
        windows,
    };
    let scored = sent.windows.len() as f64;
    let after = job.scrape_until("every window scored and delivered", |s| {
        s.sum("weir_scores_delivered_total", &[]) >= scored
            && s.sum("weir_records_in_total", &source) >= sent.records as f64
            && s.sum("weir_source_consumer_lag_records", &[]) == 0.0
    })?;
    let summary = job.finish()?;
    eprintln!("{}", summary.render());
    // The summary reads the same registry.
    ensure!(summary.records_in == sent.records as u64);
    ensure!(summary.scores + summary.inference_errors == sent.windows.len() as u64);
    Ok((after, sent))
}

/// `http_get`, retried while the server is not listening yet (the job is starting).
fn http_get_retrying(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match http_get(addr, path) {
            Ok(answer) => return Ok(answer),
            Err(error) if Instant::now() > deadline => return Err(error),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The counts every run's last scrape must show.
fn check_counts(scrape: &Samples, sent: &Sent) -> Result<()> {
    let source = [("operator", "source")];
    let records = sent.records as f64;
    ensure!(scrape.sum("weir_records_in_total", &source) == records);
    ensure!(scrape.sum("weir_records_out_total", &source) == records);
    ensure!(scrape.sum("weir_source_read_bytes_total", &[]) > 0.0);
    let windows = sent.windows.len() as f64;
    let version = [("model", MODEL), ("version", "1")];
    let scores = scrape.one("weir_scores_total", &version)?;
    let errors = scrape.sum("weir_inference_errors_total", &version);
    ensure!(
        scores + errors == windows,
        "{scores} scores + {errors} errors for {windows} windows"
    );
    ensure!(errors == sent.failing() as f64);
    let window = [("operator", "window")];
    ensure!(scrape.sum("weir_records_in_total", &window) == records);
    ensure!(scrape.sum("weir_records_out_total", &window) == windows);
    ensure!(scrape.one("weir_scores_delivered_total", &[])? == windows);
    // The score sink's instances: every score written once and acknowledged, with its bytes.
    let score_sink = [("operator", "score_sink")];
    ensure!(scrape.sum("weir_records_in_total", &score_sink) == windows);
    ensure!(scrape.sum("weir_records_out_total", &score_sink) == windows);
    ensure!(scrape.sum("weir_sink_acknowledged_bytes_total", &score_sink) > windows * 100.0);
    let letters = scrape.one("weir_dead_letters_delivered_total", &[])?;
    let dead_letter_sink = [("operator", "dead_letter_sink")];
    ensure!(scrape.sum("weir_records_out_total", &dead_letter_sink) == letters);
    let score = [("operator", "score")];
    ensure!(scrape.sum("weir_records_in_total", &score) == windows);
    ensure!(scrape.sum("weir_records_out_total", &score) == windows);
    ensure!(
        scrape.sum("weir_dead_letters_total", &[("reason", "inference_failed")])
            == sent.failing() as f64
    );
    for partition in ["0", "1"] {
        let partition = [("partition", partition)];
        ensure!(scrape.one("weir_source_consumer_lag_records", &partition)? == 0.0);
        ensure!(scrape.one("weir_source_watermark_seconds", &partition)? > 0.0);
    }
    ensure!(scrape.one("weir_window_close_to_score_seconds_count", &[])? == windows);
    // Every window's records were read in this run: each score has an ingest → score time.
    let ingest_count = scrape.one("weir_ingest_to_score_seconds_count", &[])?;
    let ingest_mean = scrape.one("weir_ingest_to_score_seconds_sum", &[])? / ingest_count;
    ensure!(ingest_count == windows);
    ensure!(
        (0.0..300.0).contains(&ingest_mean),
        "ingest → score mean {ingest_mean} s"
    );
    ensure!(scrape.one("weir_inference_batch_rows_sum", &[])? == windows);
    // Checkpoints every 200 ms: committed, with their size and age.
    ensure!(scrape.one("weir_checkpoints_committed_total", &[])? > 0.0);
    ensure!(scrape.one("weir_checkpoint_duration_seconds_count", &[])? > 0.0);
    ensure!(scrape.one("weir_checkpoint_size_bytes", &[])? > 0.0);
    let age = scrape.one("weir_checkpoint_age_seconds", &[])?;
    ensure!(age.is_finite() && age >= 0.0, "checkpoint age {age}");
    ensure!(scrape.one("weir_checkpoint_restores_total", &[])? == 0.0);
    ensure!(scrape.one("weir_snapshot_bytes_total", &[])? > 0.0);
    Ok(())
}

#[test]
fn metrics_count_what_was_sent_and_alert_on_drift_and_failures() -> Result<()> {
    let dir = scratch_dir("metrics-endpoint");
    let model = model_with_baseline(&dir)?;
    let version = [("model", MODEL), ("version", "1")];

    let (steady, sent) = run_and_scrape("steady", &model, Input::Baseline, 11)?;
    check_counts(&steady, &sent)?;
    ensure!(sent.failing() == 0);
    let psi = steady.one("weir_model_drift_psi", &version)?;
    eprintln!("PSI of the baseline generator's scores: {psi}");
    ensure!(
        psi < DRIFT_ALERT,
        "PSI {psi} on the baseline's own generator"
    );
    ensure!(steady.one("weir_model_drift_alert", &version)? == 0.0);
    ensure!(steady.one("weir_inference_error_rate", &version)? == 0.0);
    ensure!(steady.one("weir_inference_error_rate_alert", &version)? == 0.0);

    let (shifted, sent) = run_and_scrape("shifted", &model, Input::ShiftedAndFailing, 12)?;
    check_counts(&shifted, &sent)?;
    let failing = sent.failing() as f64 / sent.windows.len() as f64;
    ensure!(failing > ERROR_RATE_ALERT, "{failing} of the windows fail");
    let psi = shifted.one("weir_model_drift_psi", &version)?;
    eprintln!("PSI of the shifted input's scores: {psi}; failing windows: {failing}");
    ensure!(psi > DRIFT_ALERT, "PSI {psi} on shifted input");
    ensure!(shifted.one("weir_model_drift_alert", &version)? == 1.0);
    let rate = shifted.one("weir_inference_error_rate", &version)?;
    ensure!(
        (rate - failing).abs() < 1e-9,
        "error rate {rate}, but {failing} of the windows fail"
    );
    ensure!(shifted.one("weir_inference_error_rate_alert", &version)? == 1.0);
    Ok(())
}

#[test]
fn an_address_in_use_fails_the_run_at_start() -> Result<()> {
    let dir = scratch_dir("metrics-in-use");
    let input = dir.join("events.jsonl");
    let lines: Vec<String> = events(3, Input::Baseline, 0)
        .into_iter()
        .take(10)
        .map(|(_, p)| String::from_utf8_lossy(&p).into_owned())
        .collect();
    std::fs::write(&input, lines.join("\n"))?;
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.use_input_files(vec![input]);
    job.use_output_file(dir.join("scores.jsonl"), None);
    job.model = toml::from_str(&format!("path = {:?}", fixture()))?;
    let taken = TcpListener::bind("127.0.0.1:0")?;
    let options = RunOptions {
        metrics_addr: Some(taken.local_addr()?),
        ..RunOptions::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let error = match run_job_with(job.clone().compile()?, Mode::Score, stop.clone(), &options) {
        Ok(_) => bail!("the run started on an address in use"),
        Err(error) => format!("{error:#}"),
    };
    let want = format!("cannot serve metrics on {}: ", taken.local_addr()?);
    ensure!(error.starts_with(&want), "{error}");
    ensure!(error.contains("--metrics-addr"), "{error}");
    // Without the server the same run reads its ten lines, each counted once.
    let summary = run_job_with(job.compile()?, Mode::Score, stop, &RunOptions::default())?;
    ensure!(
        (summary.records_in, summary.events_in) == (10, 10),
        "{}",
        summary.render()
    );
    Ok(())
}
