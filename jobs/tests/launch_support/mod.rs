//! What the cluster tests (`launch.rs`, `netns_supervise.rs`) share: the clickstream job over
//! JSON Lines files (no Kafka: every process of a local or namespaced cluster sees the same
//! filesystem), its generated input, its output read back as comparable sets, and waiting
//! for a child with a time limit and its log on failure.

#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use weir::gen::{Clickstream, ClickstreamConfig};
use weir_testkit::clickstream;

/// `count` input files holding `events` clickstream events each on average (1 % malformed,
/// so dead letters are compared too), split by key as Kafka's keyed partitioning would: a
/// key's records arrive in one order in every run, so its float sums and first/last source
/// positions (arrival order) are the same whatever the process and worker count (each file is
/// one range, [`job_file`]). Returns the files' paths.
pub fn input_files(dir: &Path, count: u64, events: u64) -> Result<Vec<PathBuf>> {
    let mut files = vec![Vec::new(); usize::try_from(count)?];
    for event in Clickstream::new(ClickstreamConfig {
        seed: 100 + count,
        events: events * count,
        users: 300,
        malformed_fraction: 0.01,
        ..ClickstreamConfig::default()
    })? {
        let file = xxhash_rust::xxh3::xxh3_64(event.key.as_bytes()) % count;
        let lines = &mut files[usize::try_from(file)?];
        lines.extend_from_slice(&event.payload);
        lines.push(b'\n');
    }
    files
        .into_iter()
        .enumerate()
        .map(|(n, lines)| {
            let path = dir.join(format!("clicks-{n}.jsonl"));
            fs::write(&path, lines)?;
            Ok(path)
        })
        .collect()
}

/// Writes `dir/<name>.toml`: the clickstream job reading `inputs` and writing `output` (and
/// `<output>.dead-letters.jsonl`), with `[checkpoint] dir = checkpoints` every `interval`
/// when given. `max_lag` holds the sources to the scores' pace, so a checkpoint falls
/// mid-input.
pub fn job_file(
    dir: &Path,
    name: &str,
    inputs: &[PathBuf],
    output: &Path,
    checkpoints: Option<(&str, &str)>,
) -> Result<PathBuf> {
    let text = clickstream::job_text();
    let source = "[source]\ntopic = \"clicks\"\nstart = \"earliest\"\nbounded = false\n";
    let sink = "[sink]\ntopic = \"scores\"\ndead_letter_topic = \"clicks-dlq\"\n";
    let runtime = "tick = \"100ms\"\n";
    ensure!(
        text.contains(source) && text.contains(sink) && text.contains(runtime),
        "jobs/clickstream.toml changed its [source], [sink] or tick"
    );
    let paths: Vec<String> = inputs
        .iter()
        .map(|p| format!("\"{}\"", p.display()))
        .collect();
    let mut text = text
        .replace(runtime, "tick = \"100ms\"\nmax_lag = \"200ms\"\n")
        .replace(
            source,
            // One range per file: a file cut into ranges would feed one key from several
            // source instances, in an order that depends on their timing (see input_files).
            &format!(
                "[source]\nkind = \"file\"\npaths = [{}]\nrange_bytes = 1073741824\n",
                paths.join(", ")
            ),
        )
        .replace(
            sink,
            &format!("[sink]\nkind = \"file\"\npath = \"{}\"\n", output.display()),
        );
    if let Some((location, interval)) = checkpoints {
        text.push_str(&format!(
            "\n[checkpoint]\ndir = \"{location}\"\ninterval = \"{interval}\"\nretain = 3\n"
        ));
    }
    let job = dir.join(format!("{name}.toml"));
    fs::write(&job, text)?;
    Ok(job)
}

/// The score records of a sink file without their inference time, each with how often it
/// was written.
pub fn score_counts(path: &Path) -> Result<BTreeMap<String, usize>> {
    let text = fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let mut record: Value = serde_json::from_str(line)
            .with_context(|| format!("{}: not JSON: {line}", path.display()))?;
        let object = record
            .as_object_mut()
            .context("a score record is an object")?;
        ensure!(
            object.remove("inference_ts").is_some(),
            "no inference_ts in {line}"
        );
        *counts.entry(record.to_string()).or_default() += 1;
    }
    Ok(counts)
}

/// The lines of the dead-letter file beside `output`, each with how often it was written.
pub fn dead_letter_counts(output: &Path) -> Result<BTreeMap<String, usize>> {
    let path = PathBuf::from(format!("{}.dead-letters.jsonl", output.display()));
    let text = fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        *counts.entry(line.to_owned()).or_default() += 1;
    }
    Ok(counts)
}

/// Fails with the differences (counts and first examples) unless `got` holds the same
/// records as `expected` (`what` names them).
pub fn same_records(
    what: &str,
    expected: &BTreeMap<String, usize>,
    got: &BTreeMap<String, usize>,
) -> Result<()> {
    let missing: Vec<&String> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<&String> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    ensure!(
        missing.is_empty() && extra.is_empty(),
        "{what}: {} missing (e.g. {:?}), {} unexpected (e.g. {:?})",
        missing.len(),
        missing.first(),
        extra.len(),
        extra.first()
    );
    Ok(())
}

/// Waits for `child` at most `limit` (killing it then); its exit status.
pub fn wait_for(child: &mut Child, limit: Duration, log: &Path) -> Result<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("still running after {limit:?}:\n{}", log_tail(log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last 40 lines of a run's log (ONNX Runtime's chatter left out).
pub fn log_tail(log: &Path) -> String {
    weir_testkit::files::log_tail(log, 40)
}

/// The pid the launcher or supervisor logged for `label` (`started p1 (pid 1234)`) in its
/// `run`-th start of it (0 = first).
pub fn started_pid(log: &Path, label: &str, run: usize) -> Option<i32> {
    let text = fs::read_to_string(log).ok()?;
    let marker = format!("started {label} (pid ");
    let line = text.lines().filter(|l| l.contains(&marker)).nth(run)?;
    let rest = &line[line.find(&marker)? + marker.len()..];
    rest.split(')').next()?.parse().ok()
}

/// The newest valid checkpoint in `store` once it holds two or more valid ones: the first can precede
/// any reading, and a file source's offsets start past 0 for a range that starts mid-file,
/// so offsets cannot say whether the input was read. Whether a restored run resumed mid-input
/// is [`records_read_at_end`]'s to check.
pub fn second_commit(
    store: &dyn weir_checkpoint::SnapshotStore,
) -> Option<weir_checkpoint::Manifest> {
    // An epoch being written is listed before its manifest commits it.
    let mut committed = store
        .list_epochs()
        .ok()?
        .into_iter()
        .rev()
        .filter_map(|epoch| store.verify_epoch(epoch).ok());
    let newest = committed.next()?;
    committed.next().map(|_| newest)
}

/// The records the last finished run of a cluster read, from the last `cluster total:`
/// line of `log` (`… events in (62662 records read), …`).
pub fn records_read_at_end(log: &Path) -> Option<u64> {
    let text = fs::read_to_string(log).ok()?;
    let line = text.lines().rev().find(|l| l.contains("cluster total:"))?;
    let (head, _) = line.split_once(" records read")?;
    head.rsplit('(').next()?.trim().parse().ok()
}
