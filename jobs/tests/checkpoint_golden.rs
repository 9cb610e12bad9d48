//! Golden equivalence of checkpoints on the real broker (issue #4 acceptance): one generated
//! input topic (with malformed records) is scored by the `weir` binary four ways, each into
//! its own output topics:
//!
//! - (a) straight through, no checkpoints;
//! - (b) with checkpoints, killed with SIGKILL at random points several times — each kill comes
//!   0–600 ms after a new checkpoint was committed — and restarted each time (automatic
//!   restore of the newest valid checkpoint);
//! - (c) killed while running with 1 worker, restored with 2 workers and a different
//!   per-stage parallelism;
//! - (d) killed while running as 1 process × 2 workers, restored as 2 processes × 1 worker
//!   (a Timely cluster over TCP on localhost, `--processes/--process/--hosts`).
//!
//! The score topics of all four must hold the same set of records (key, window, revision,
//! features, score, model, source positions — everything but the inference time); duplicates
//! (at-least-once after a restore) must be identical records with equal score ids; the
//! dead-letter topics must hold the same set of (partition, offset, reason). Each restarted
//! run must have restored from a checkpoint and resumed its partitions there, so the test
//! cannot pass by starting over. Before the last restart of (b) the newest checkpoint's
//! checkpoint is corrupted (a snapshot file it wrote, or its MANIFEST when it wrote none): that
//! run must skip it (with a log line) and restore the previous one.
//!
//! Run: `cargo test -p weir --test checkpoint_golden` (starts its own broker with
//! scripts/broker.sh on a free port; needs tansu installed by scripts/setup.sh).

#[path = "../../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rand::{Rng, SeedableRng};
use serde_json::Value;
use weir_kafka::group_offsets::GroupOffsets;

use kafka::{create_topic, produce, read_all, unique_topic, ReadRecord};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_testkit::clickstream::{self, Topics};
use weir_testkit::cluster::{free_port, hosts_file};
use weir_testkit::files::{checkpoint_toml, Scratch};

/// Enough that a run is still reading when it is killed a little after a commit (checkpoints
/// every 100 ms): with 12 000 events and 300 ms, a restored run on a quiet machine sometimes
/// finished before its first commit.
const EVENTS: u64 = 24_000;
const PARTITIONS: i32 = 4;
/// No run may take longer than this (a hung broker fails the test instead of hanging it).
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// Output topics of one configuration and its job file.
struct Config {
    label: &'static str,
    job: PathBuf,
    scores: String,
    dlq: String,
    checkpoints: Option<PathBuf>,
}

fn job_file(scratch: &Path, label: &'static str, input: &str, checkpoints: bool) -> Result<Config> {
    let scores = unique_topic(&format!("golden-scores-{label}"));
    let dlq = unique_topic(&format!("golden-dlq-{label}"));
    create_topic(&scores, 2)?;
    create_topic(&dlq, 1)?;
    let topics = Topics {
        input,
        scores: &scores,
        dead_letters: &dlq,
    };
    let mut text = clickstream::kafka_job_text(&kafka::brokers(), &topics);
    ensure!(
        text.contains(&scores) && text.contains(input),
        "job template changed"
    );
    let dir = scratch.join(label);
    fs::create_dir_all(&dir)?;
    let checkpoint_dir = dir.join("ckpt");
    if checkpoints {
        text.push_str(&format!(
            "\n[checkpoint]\n{}\nretain = 3\n",
            checkpoint_toml(&checkpoint_dir, "100ms")
        ));
    }
    let job = dir.join("job.toml");
    fs::write(&job, text)?;
    Ok(Config {
        label,
        job,
        scores,
        dlq,
        checkpoints: checkpoints.then_some(checkpoint_dir),
    })
}

/// One `weir run --bounded` process, its stderr in a file.
fn spawn(config: &Config, args: &[&str], log: &Path) -> Result<Child> {
    let stderr = fs::File::create(log)?;
    let stdout = stderr.try_clone()?;
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&config.job)
        .arg("--bounded")
        .args(args)
        .env("RUST_LOG", "info,librdkafka=warn")
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .context("cannot start the weir binary")
}

/// The last 20 lines of a run's log (ONNX Runtime's chatter left out).
fn log_tail(log: &Path) -> String {
    weir_testkit::files::log_tail(log, 20)
}

fn wait(child: &mut Child, log: &Path) -> Result<()> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            ensure!(
                status.success(),
                "weir exited with {status}:\n{}",
                log_tail(log)
            );
            return Ok(());
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            bail!(
                "weir still running after {RUN_LIMIT:?}; is the broker answering? log: {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The newest committed epoch in `dir` whose sources have read something (the first
/// epochs of a run can precede the first fetch).
fn newest_commit(dir: &Path) -> Option<u64> {
    let store = LocalDirStore::open(dir).ok()?;
    let epochs = store.list_epochs().ok()?;
    epochs
        .into_iter()
        .rev()
        .find(|e| {
            store.read_manifest(*e).is_ok_and(|m| {
                m.sources
                    .values()
                    .flat_map(|partitions| partitions.values())
                    .any(|p| p.next_offset > 0)
            })
        })
        .map(|e| e.0)
}

/// Runs one process until a checkpoint newer than any before it is committed, then a random
/// 0–600 ms more, then SIGKILLs it. Returns `false` if the run finished first.
fn run_and_kill(config: &Config, args: &[&str], log: &Path, rng: &mut impl Rng) -> Result<bool> {
    let dir = config.checkpoints.as_deref().context("no checkpoint dir")?;
    let before = newest_commit(dir);
    let mut child = spawn(config, args, log)?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            ensure!(
                status.success(),
                "weir exited with {status}: {}",
                log_tail(log)
            );
            return Ok(false);
        }
        if newest_commit(dir) > before {
            std::thread::sleep(Duration::from_millis(rng.random_range(0..300)));
            child.kill()?; // SIGKILL
            child.wait()?;
            return Ok(true);
        }
        ensure!(
            started.elapsed() < RUN_LIMIT,
            "no checkpoint committed: {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether the run restored a checkpoint and resumed its partitions there: it says so, and
/// (for a run that finished) it read fewer records than the topic holds.
fn restored(log: &Path) -> Result<bool> {
    let text = fs::read_to_string(log)?;
    let read = text
        .split_once(" records read")
        .and_then(|(head, _)| head.rsplit('(').next())
        .and_then(|n| n.trim().parse::<u64>().ok());
    let resumed = text.contains("restoring from checkpoint") && read.is_none_or(|n| n < EVENTS);
    if !resumed {
        let summary: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("ort::logging"))
            .collect();
        eprintln!(
            "{}: records read {read:?}\n{}",
            log.display(),
            summary[summary.len().saturating_sub(15)..].join("\n")
        );
    }
    Ok(resumed)
}

/// Every score record (minus its inference time) and the score-id consistency check.
fn score_set(config: &Config) -> Result<(BTreeSet<String>, usize)> {
    let records = read_all(&config.scores)?;
    let mut by_id: BTreeMap<String, String> = BTreeMap::new();
    let mut set = BTreeSet::new();
    for record in &records {
        let mut value: Value = serde_json::from_slice(&record.payload)?;
        value
            .as_object_mut()
            .context("score record is not an object")?
            .remove("inference_ts");
        let text = value.to_string();
        let id = record
            .headers
            .get("weir.score_id")
            .context("score without weir.score_id")?;
        if let Some(previous) = by_id.insert(id.clone(), text.clone()) {
            ensure!(
                previous == text,
                "{}: score id {id} carries two different records:\n{previous}\n{text}",
                config.label
            );
        }
        set.insert(text);
    }
    Ok((set, records.len()))
}

fn dead_letter_set(config: &Config) -> Result<BTreeSet<(String, String, String)>> {
    let header = |r: &ReadRecord, name: &str| r.headers.get(name).cloned().unwrap_or_default();
    Ok(read_all(&config.dlq)?
        .iter()
        .map(|r| {
            (
                header(r, "weir.dlq.partition"),
                header(r, "weir.dlq.offset"),
                header(r, "weir.dlq.reason"),
            )
        })
        .collect())
}

/// The sum over partitions of the offsets committed for `group` on `topic` (lag visibility).
fn group_offsets(topic: &str, group: &str) -> Result<i64> {
    let properties = BTreeMap::from([
        ("bootstrap.servers".to_owned(), kafka::brokers()),
        ("group.id".to_owned(), group.to_owned()),
    ]);
    let committed = GroupOffsets::new(&properties, topic)?.committed(0..PARTITIONS)?;
    Ok(committed.values().sum())
}

/// Flips one byte in the middle of a file of the newest committed epoch: a window snapshot it
/// wrote itself, or — when it wrote none because the state did not change since the previous
/// epoch (incremental checkpoints list the older files) — its MANIFEST. A snapshot file shared
/// with older epochs is not chosen: it would invalidate them too.
fn corrupt_newest(dir: &Path) -> Result<u64> {
    let store = LocalDirStore::open(dir)?;
    let epoch = store
        .list_epochs()?
        .into_iter()
        .rev()
        .find(|e| store.read_manifest(*e).is_ok())
        .context("no committed checkpoint to corrupt")?;
    ensure!(
        store.list_epochs()?.iter().filter(|e| **e < epoch).count() > 0,
        "no older checkpoint to fall back to"
    );
    let manifest = store.read_manifest(epoch)?;
    let path = match manifest.written_here().next() {
        // A bundled shard lies in its instance's file, named by `file_range`, not its own range.
        Some(file) => store.snapshot_location(epoch, &file.operator, file.file_range()),
        None => store.manifest_path(epoch),
    };
    eprintln!("corrupting {}", path.display());
    let mut bytes = fs::read(&path)?;
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    fs::write(&path, bytes)?;
    Ok(epoch.0)
}

/// A broker of this test's own (scripts/broker.sh on a free port, data in the scratch
/// directory), stopped on drop: SIGKILLed clients can leave tansu busy with half-closed
/// connections, which must not slow down the other tests' broker.
struct OwnBroker {
    env: [(&'static str, String); 2],
}

impl OwnBroker {
    fn start(scratch: &Path) -> Result<OwnBroker> {
        let broker = OwnBroker {
            env: [
                ("WEIR_BROKER_PORT", free_port()?.to_string()),
                (
                    "WEIR_BROKER_DIR",
                    scratch.join("broker").display().to_string(),
                ),
            ],
        };
        let status = broker.script("start")?;
        ensure!(
            status.success(),
            "scripts/broker.sh start failed ({status})"
        );
        // The Kafka helpers and the job files read the broker address from here.
        std::env::set_var(
            "WEIR_TEST_BROKERS",
            format!("127.0.0.1:{}", broker.env[0].1),
        );
        Ok(broker)
    }

    fn script(&self, command: &str) -> Result<std::process::ExitStatus> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/broker.sh");
        Ok(Command::new("bash")
            .arg(script)
            .arg(command)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .status()?)
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let _ = self.script("stop");
    }
}

#[test]
fn killed_restored_and_rescaled_runs_equal_a_straight_run() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("golden");
    let _broker = OwnBroker::start(scratch.path())?;
    let input = unique_topic("golden-clicks");
    create_topic(&input, PARTITIONS)?;
    let events: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 11,
        events: EVENTS,
        users: 400,
        malformed_fraction: 0.01,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    produce(&input, &events)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let logs = |label: &str, n: usize| scratch.path().join(format!("{label}-{n}.log"));

    // (a) Straight through.
    let straight = job_file(scratch.path(), "straight", &input, false)?;
    let log = logs("straight", 0);
    wait(&mut spawn(&straight, &["--workers", "2"], &log)?, &log)?;

    // (b) Killed three times, restored each time.
    let killed = job_file(scratch.path(), "killed", &input, true)?;
    let mut kills = 0;
    for n in 0..3 {
        if !run_and_kill(&killed, &["--workers", "2"], &logs("killed", n), &mut rng)? {
            break;
        }
        kills += 1;
        ensure!(
            n == 0 || restored(&logs("killed", n))?,
            "run {n} did not restore"
        );
    }
    ensure!(
        kills >= 2,
        "the job finished before it could be killed twice"
    );
    // Corrupt the newest checkpoint: the final run must skip it and restore the previous one.
    let dir = killed.checkpoints.as_deref().context("checkpoint dir")?;
    let corrupted = corrupt_newest(dir)?;
    let log = logs("killed", 3);
    wait(&mut spawn(&killed, &["--workers", "2"], &log)?, &log)?;
    ensure!(restored(&log)?, "the final run did not restore");
    let text = fs::read_to_string(&log)?;
    ensure!(
        text.contains(&format!("checkpoint epoch {corrupted} is invalid"))
            && !text.contains(&format!("restoring from checkpoint {corrupted}")),
        "the corrupted checkpoint {corrupted} was not skipped: {}",
        log.display()
    );

    ensure!(
        group_offsets(&input, "weir-clickstream")? > 0,
        "no consumer-group offsets were committed after the checkpoints"
    );

    // (c) 1 worker, killed, restored on 2 workers with other per-stage parallelism.
    let rescaled = job_file(scratch.path(), "rescaled", &input, true)?;
    let parallelism = ["--parallelism", "source=1,window=1,score=1,sink=1"];
    let first = [&["--workers", "1"][..], &parallelism[..]].concat();
    ensure!(
        run_and_kill(&rescaled, &first, &logs("rescaled", 0), &mut rng)?,
        "the 1-worker run finished before it could be killed"
    );
    let log = logs("rescaled", 1);
    let wider = [
        "--workers",
        "2",
        "--parallelism",
        "source=2,window=2,score=1,sink=2",
    ];
    wait(&mut spawn(&rescaled, &wider, &log)?, &log)?;
    ensure!(restored(&log)?, "the rescaled run did not restore");

    // (d) 1 process × 2 workers, killed, restored as 2 processes × 1 worker.
    let cluster = job_file(scratch.path(), "cluster", &input, true)?;
    ensure!(
        run_and_kill(&cluster, &["--workers", "2"], &logs("cluster", 0), &mut rng)?,
        "the 2-worker run finished before it could be killed"
    );
    let hosts = hosts_file(scratch.path(), 2)?;
    let hosts_arg = hosts.display().to_string();
    let mut processes = Vec::new();
    for process in ["0", "1"] {
        let log = logs("cluster-process", processes.len());
        let args = [
            "--workers",
            "1",
            "--processes",
            "2",
            "--process",
            process,
            "--hosts",
            &hosts_arg,
        ];
        processes.push((spawn(&cluster, &args, &log)?, log));
    }
    for (child, log) in &mut processes {
        wait(child, log)?;
        ensure!(restored(log)?, "a cluster process did not restore");
    }

    // Same records everywhere (duplicates only as identical records with one score id).
    let (expected, straight_count) = score_set(&straight)?;
    ensure!(
        straight_count == expected.len() && expected.len() > 1_000,
        "the straight run wrote {straight_count} records, {} distinct",
        expected.len()
    );
    let expected_dead = dead_letter_set(&straight)?;
    ensure!(
        expected_dead.len() > 100,
        "too few dead letters: {}",
        expected_dead.len()
    );
    for config in [&killed, &rescaled, &cluster] {
        let (got, count) = score_set(config)?;
        let missing = expected.difference(&got).count();
        let extra = got.difference(&expected).count();
        ensure!(
            missing == 0 && extra == 0,
            "{}: {missing} score records missing and {extra} unexpected (of {}); first missing: {:?}; first unexpected: {:?}",
            config.label,
            expected.len(),
            expected.difference(&got).next(),
            got.difference(&expected).next()
        );
        eprintln!(
            "{}: {count} score records, {} distinct, {} duplicates from restores",
            config.label,
            got.len(),
            count - got.len()
        );
        ensure!(
            dead_letter_set(config)? == expected_dead,
            "{}: dead letters differ",
            config.label
        );
    }
    scratch.passed();
    Ok(())
}
