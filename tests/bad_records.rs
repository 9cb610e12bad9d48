//! Issue 15's bad-input acceptance, end to end on the real broker: an unbounded job reads a
//! stream in which one record in ten is bad in one of every way (malformed, missing field,
//! wrong type, non-finite number, oversize key, oversize record, far-future event time, late,
//! and a window the model fails on). Every bad record must be in the dead-letter topic with
//! its reason and its bytes, every good window must be scored, checkpoints must go on
//! committing past every bad record, and the job must still be running at the end.
//!
//! Late records are produced only after the job has scored the first phase's windows, so the
//! watermark is past them whatever the timing; the partition is one, and its idle timeout
//! longer than the test, so nothing else moves the watermark.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use support::kafka::{create_topic, produce, read_all, unique_topic, ReadRecord};
use support::oracle::{expected_windows, WINDOW_MS};
use weir::JobFile;
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

/// `[source] max_record_bytes` of the test job (the default, 1 MiB, is the broker's own limit).
const MAX_RECORD_BYTES: usize = 16 * 1024;
/// `amount_max` above which `tests/fixtures/failing_model` fails its inference call.
const FAILS_ABOVE: f64 = 1e6;
const USERS: usize = 40;
/// Good events of the first phase, 500 ms of event time apart (20 minutes in all).
const PHASE_ONE: usize = 2_400;
/// Good events of the second phase, after the late records.
const PHASE_TWO: usize = 600;

/// One record produced, with what the job must make of it.
#[derive(Clone, Debug)]
struct Produced {
    key: String,
    payload: Vec<u8>,
    /// The dead-letter reason the record must get, `None` for a good record.
    reason: Option<&'static str>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn good(rng: &mut StdRng, ts: i64, amount: Option<f64>) -> Produced {
    let user = format!("u{}", rng.random_range(0..USERS));
    let kind = ["view", "click", "purchase"][rng.random_range(0..3)];
    let mut event = json!({
        "user": user,
        "ts": ts,
        "type": kind,
        "dwell_ms": rng.random_range(10..5_000),
    });
    if let Some(amount) = amount {
        event["amount"] = json!(amount);
    }
    Produced {
        key: user,
        payload: event.to_string().into_bytes(),
        reason: None,
    }
}

fn bad(key: &str, payload: String, reason: &'static str) -> Produced {
    Produced {
        key: key.to_owned(),
        payload: payload.into_bytes(),
        reason: Some(reason),
    }
}

/// The bad record of kind `n` (mod 7) at event time `ts`; late records come separately.
fn bad_record(n: usize, ts: i64, now: i64) -> Produced {
    match n % 7 {
        0 => bad(
            "u1",
            format!(r#"{{"user":"u1","ts":{ts},"type":"vi"#),
            "malformed",
        ),
        1 => bad(
            "u2",
            format!(r#"{{"user":"u2","ts":{ts},"type":"view"}}"#),
            "missing_field",
        ),
        2 => bad(
            "u3",
            format!(r#"{{"user":"u3","ts":{ts},"type":"view","dwell_ms":"slow"}}"#),
            "wrong_type",
        ),
        3 => bad(
            "u4",
            format!(r#"{{"user":"u4","ts":{ts},"type":"view","dwell_ms":1e999}}"#),
            "non_finite",
        ),
        4 => {
            let user = "k".repeat(5_000 + n);
            let payload = format!(r#"{{"user":"{user}","ts":{ts},"type":"view","dwell_ms":5}}"#);
            bad("huge-key", payload, "oversize")
        }
        5 => {
            let pad = "x".repeat(MAX_RECORD_BYTES);
            let payload =
                format!(r#"{{"user":"u5","ts":{ts},"type":"view","dwell_ms":5,"pad":"{pad}"}}"#);
            bad("u5", payload, "oversize")
        }
        _ => {
            let future = now + 2 * 86_400_000 + n as i64;
            let payload = format!(r#"{{"user":"u6","ts":{future},"type":"view","dwell_ms":5}}"#);
            bad("u6", payload, "future_timestamp")
        }
    }
}

/// Phase one: good events from `t0` on, one record in ten bad, and a few events whose window
/// the model fails on (they are good records: their windows must get error scores).
fn phase_one(rng: &mut StdRng, t0: i64, now: i64) -> Vec<Produced> {
    let mut out = Vec::new();
    for i in 0..PHASE_ONE {
        let ts = t0 + i as i64 * 500;
        let amount = match i {
            _ if i % 240 == 17 => Some(FAILS_ABOVE * 10.0),
            _ if i % 3 == 0 => Some(rng.random_range(1.0..200.0)),
            _ => None,
        };
        out.push(good(rng, ts, amount));
        if i % 9 == 4 {
            out.push(bad_record(i / 9, ts, now));
        }
    }
    out
}

/// Phase two: late records (their windows closed long ago) among more good events, then one
/// good event far enough ahead to close every window before it.
fn phase_two(rng: &mut StdRng, t0: i64) -> (Vec<Produced>, i64) {
    let start = t0 + PHASE_ONE as i64 * 500;
    let mut out = Vec::new();
    for i in 0..PHASE_TWO {
        let ts = start + i as i64 * 500;
        out.push(good(rng, ts, None));
        if i % 9 == 4 {
            let mut late = good(rng, t0 + (i as i64 % 600) * 1_000, None);
            late.reason = Some("late");
            out.push(late);
        }
    }
    let closer = start + 20 * WINDOW_MS;
    out.push(good(rng, closer, None));
    (out, closer - closer.rem_euclid(WINDOW_MS))
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<weir::RunSummary>>,
}

impl Running {
    fn check_alive(&self) -> Result<()> {
        ensure!(!self.thread.is_finished(), "the job stopped by itself");
        Ok(())
    }

    fn finish(self) -> Result<weir::RunSummary> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the job panicked"))?
    }
}

/// Polls `topic` until `done` holds for what it holds, while the job runs.
fn wait_for(
    topic: &str,
    job: &Running,
    what: &str,
    done: impl Fn(&[ReadRecord]) -> bool,
) -> Result<Vec<ReadRecord>> {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let records = read_all(topic)?;
        if done(&records) {
            return Ok(records);
        }
        job.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "timed out waiting for {what}: {topic} has {} records",
                records.len()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn score_window(record: &ReadRecord) -> Result<((String, i64), Value)> {
    let value: Value = serde_json::from_slice(&record.payload)?;
    let key = value["key"].as_str().context("key")?.to_owned();
    let start = value["window_start"].as_i64().context("window_start")?;
    Ok(((key, start), value))
}

fn reason(record: &ReadRecord) -> &str {
    record
        .headers
        .get("weir.dlq.reason")
        .map_or("", String::as_str)
}

#[test]
fn one_bad_record_in_ten_of_every_kind_is_dead_lettered_and_never_stalls_the_job() -> Result<()> {
    let dir = scratch_dir("bad-records");
    let (input, scores, dlq) = (
        unique_topic("bad-in"),
        unique_topic("bad-scores"),
        unique_topic("bad-dlq"),
    );
    create_topic(&input, 1)?;
    create_topic(&scores, 2)?;
    create_topic(&dlq, 1)?;

    let now = now_ms();
    let t0 = now - 2 * 3_600_000;
    let t0 = t0 - t0.rem_euclid(WINDOW_MS);
    let mut rng = StdRng::seed_from_u64(15);
    let first = phase_one(&mut rng, t0, now);
    let (second, open_window) = phase_two(&mut rng, t0);
    let to_send = |records: &[Produced]| -> Vec<(String, Vec<u8>)> {
        records
            .iter()
            .map(|r| (r.key.clone(), r.payload.clone()))
            .collect()
    };
    produce(&input, &to_send(&first))?;

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.source.topic = input.clone();
    job.source.bounded = false;
    job.parallelism.source = Some(1);
    job.source.max_record_bytes = MAX_RECORD_BYTES;
    job.watermark.idle_timeout = 3_600_000;
    job.sink.topic = scores.clone();
    job.sink.dead_letter_topic = dlq.clone();
    job.model.as_mut().context("the job has no [model]")?.path =
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/failing_model"));
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(
        &dir.join("ckpt"),
        "200ms",
    ))?);
    let stop = Arc::new(AtomicBool::new(false));
    let compiled = job.compile()?;
    let flag = stop.clone();
    let running = Running {
        stop,
        thread: std::thread::spawn(move || weir::run_job(compiled, flag)),
    };

    // Phase one's last full window is scored: the watermark is past every window of phase one
    // but the last, so the late records of phase two are late whenever they are read.
    let last_closed = t0 + (PHASE_ONE as i64 * 500 / WINDOW_MS - 2) * WINDOW_MS;
    wait_for(&scores, &running, "phase one's windows", |records| {
        records
            .iter()
            .filter_map(|r| score_window(r).ok())
            .any(|((_, start), _)| start >= last_closed)
    })?;
    produce(&input, &to_send(&second))?;

    let all: Vec<Produced> = first.into_iter().chain(second).collect();
    let good_payloads: Vec<Vec<u8>> = all
        .iter()
        .filter(|r| r.reason.is_none())
        .map(|r| r.payload.clone())
        .collect();
    let expected: BTreeMap<(String, i64), _> = expected_windows(&good_payloads)
        .into_iter()
        .filter(|((_, start), _)| *start < open_window)
        .collect();
    let failing: BTreeSet<(String, i64)> = expected
        .iter()
        .filter(|(_, e)| e.features[7] > FAILS_ABOVE)
        .map(|(w, _)| w.clone())
        .collect();
    let bad_count = all.iter().filter(|r| r.reason.is_some()).count();
    let letters_expected = bad_count + failing.len();
    ensure!(
        (bad_count + failing.len()) * 100 / all.len() >= 9,
        "the stream must be about one bad record in ten"
    );
    ensure!(failing.len() >= 5, "the model must fail on some windows");

    let score_records = wait_for(&scores, &running, "every window's score", |records| {
        let windows: BTreeSet<_> = records
            .iter()
            .filter_map(|r| score_window(r).ok())
            .map(|(w, _)| w)
            .collect();
        expected.keys().all(|w| windows.contains(w))
    })?;
    let letters = wait_for(&dlq, &running, "every dead letter", |records| {
        records.len() >= letters_expected
    })?;
    // Checkpoints commit past every record: the newest manifest resumes after the last one.
    let store = LocalDirStore::open(dir.join("ckpt"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let next = store
            .latest_valid()?
            .and_then(|m| m.sources.get(&input).and_then(|p| p.get(&0)).copied())
            .map(|at| at.next_offset);
        if next == Some(all.len() as i64) {
            break;
        }
        running.check_alive()?;
        ensure!(
            Instant::now() < deadline,
            "no checkpoint committed past every record: the newest resumes at {next:?} of {}",
            all.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    running.check_alive()?;
    let summary = running.finish()?;
    eprintln!("{}", summary.render());

    // Every good window scored once, with a number; the failing ones with an error instead.
    let mut seen = BTreeMap::new();
    for record in &score_records {
        let (window, value) = score_window(record)?;
        ensure!(
            seen.insert(window.clone(), value).is_none(),
            "duplicate score for {window:?}"
        );
    }
    for window in expected.keys() {
        let value = &seen[window];
        if failing.contains(window) {
            ensure!(
                value["score"].is_null() && value["error"].is_string(),
                "{window:?} failed in the model but its record is {value}"
            );
        } else {
            ensure!(
                value["score"].as_f64().is_some_and(f64::is_finite) && value["error"].is_null(),
                "{window:?} must have a score: {value}"
            );
        }
    }

    // Every bad record's dead letter, with its reason and bytes; nothing else.
    ensure!(
        letters.len() == letters_expected,
        "{} dead letters for {letters_expected} bad records and failed windows",
        letters.len()
    );
    let mut want: BTreeMap<(&str, Vec<u8>), usize> = BTreeMap::new();
    for record in all
        .iter()
        .filter(|r| matches!(r.reason, Some(r) if r != "late"))
    {
        *want
            .entry((record.reason.unwrap_or_default(), record.payload.clone()))
            .or_default() += 1;
    }
    let mut got: BTreeMap<(&str, Vec<u8>), usize> = BTreeMap::new();
    let mut late = Vec::new();
    let mut failed_windows = BTreeSet::new();
    for letter in &letters {
        for header in ["weir.dlq.error", "weir.dlq.topic", "weir.dlq.offset"] {
            ensure!(
                letter.headers.contains_key(header),
                "a letter without {header}"
            );
        }
        match reason(letter) {
            "late" => late.push(serde_json::from_slice::<Value>(&letter.payload)?),
            "inference_failed" => {
                let row: Value = serde_json::from_slice(&letter.payload)?;
                let key = row["key"].as_str().context("key")?.to_owned();
                failed_windows.insert((key, row["window_start"].as_i64().context("start")?));
            }
            reason => *got.entry((reason, letter.payload.clone())).or_default() += 1,
        }
    }
    let kinds: BTreeSet<&str> = want.keys().map(|(reason, _)| *reason).collect();
    ensure!(
        kinds.len() == 6,
        "every decode-time kind is in the stream: {kinds:?}"
    );
    ensure!(
        got == want,
        "decode-time dead letters differ from the bad records sent"
    );
    ensure!(
        failed_windows == failing,
        "inference_failed letters name other windows"
    );
    // A late letter re-encodes the decoded event (the window operator keeps no raw bytes);
    // its position header points at the original.
    let mut want_late: Vec<Value> = all
        .iter()
        .filter(|r| r.reason == Some("late"))
        .map(|r| serde_json::from_slice(&r.payload))
        .collect::<Result<_, _>>()?;
    let order = |v: &Value| v.to_string();
    want_late.sort_by_key(order);
    late.sort_by_key(order);
    ensure!(
        late == want_late,
        "late letters differ from the late records sent"
    );

    let counted: BTreeMap<&str, u64> = summary
        .dead_letters
        .iter()
        .map(|(reason, n)| (reason.as_str(), *n))
        .collect();
    ensure!(
        counted.values().sum::<u64>() == letters_expected as u64,
        "dead letters counted by reason: {counted:?}"
    );
    ensure!(summary.delivery_failures == 0, "delivery failures");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
