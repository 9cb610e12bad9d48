//! One JSON Lines file read by every source instance (issue #18): the file is cut into byte
//! ranges of 2 KiB and a features-only run (`weir::features_cmd::compute_features`) with 1, 2
//! and 3 workers (one source instance each) must equal the naive oracle of
//! `support::window_oracle` for a tumbling, a hopping and a session window — the same windows,
//! revision 0 only, no dead letters, the same values — and so equal each other; a gzip copy
//! of the file (one range) gives the same rows. Dead letters carry the same
//! `(partition, offset)` = (file, byte offset of the line) whatever the instance count, and
//! the offset finds the line. A run with checkpoints stopped midway on 2 workers and restored
//! on 3 (a rescale: ranges move between instances) ends with the oracle's rows; its manifest
//! holds finished ranges as spans, and it is not resumed over the input file written again.
//!
//! The session window has no effective `max_length` (1 h, longer than the input): where a
//! session is cut at `max_length` depends on the order its key's records arrive (below).
//!
//! What is not equal bit for bit: `first`/`last` of a key whose extreme event time is shared
//! by several records (the oracle's generator makes such ties on purpose) take the value of
//! the record that *arrived* first/last, and the records of one key in different ranges
//! arrive in an order that depends on the instances. Those four features are checked to be
//! the value of one of the tied records.
//!
//! Run: `cargo test --test file_ranges`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use base64::Engine as _;
use serde_json::Value;

use support::window_oracle::{self as oracle, Ev, Kind, WindowId};
use weir::checkpointing::RestoreChoice;
use weir::pipeline::Mode;
use weir::run::{run_job_with, RunOptions};
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_features::dead_letter::DeadLetterReason;
use weir_features::vocab::Watermark;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

const KEYS: usize = 50;
const EVENTS: usize = 2_500;
const MAX_OUT_OF_ORDERNESS_MS: i64 = 5_000;
/// Indices of `dwell_first`, `dwell_last`, `amount_first`, `amount_last` in FEATURE_NAMES.
const FIRST_LAST: [usize; 4] = [12, 13, 14, 15];

/// Engine rows: window → (revision, features).
type Rows = BTreeMap<WindowId, (u64, Vec<f64>)>;

fn job(window: &str, workers: usize) -> Result<weir::JobFile> {
    let text = format!(
        r#"
name = "file-ranges"
[runtime]
workers = {workers}
tick = "10ms"
[source]
kind = "file"
range_bytes = 2048
key = "user"
event_time = "ts"
[source.fields]
user = "string"
ts = "timestamp_ms"
type = "string"
page = "string"
dwell = "f64"
amount = {{ type = "f64", required = false }}
[watermark]
max_out_of_orderness = "{MAX_OUT_OF_ORDERNESS_MS}ms"
allowed_lateness = "0s"
[window]
{window}
{features}
[model]
path = "unused-in-features-only-mode"
[sink]
kind = "file"
path = "rows.jsonl"
"#,
        features = oracle::FEATURES_TOML
    );
    let mut job: weir::JobFile = toml::from_str(&text).context("job file")?;
    job.parallelism = Default::default();
    Ok(job)
}

fn parse_rows(path: &Path) -> Result<Vec<(WindowId, u64, Vec<f64>)>> {
    let text = fs::read_to_string(path).with_context(|| path.display().to_string())?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let row: Value = serde_json::from_str(line)?;
            let id = (
                row["key"].as_str().context("key")?.to_owned(),
                row["window_start"].as_i64().context("start")?,
                row["window_end"].as_i64().context("end")?,
            );
            let values = row["features"]
                .as_array()
                .context("features")?
                .iter()
                .map(|v| v.as_f64().unwrap_or(f64::NAN))
                .collect();
            Ok((id, row["revision"].as_u64().context("revision")?, values))
        })
        .collect()
}

fn features_run(dir: &Path, window: &str, input: &Path, workers: usize) -> Result<(Rows, PathBuf)> {
    let mut job = job(window, workers)?;
    job.base_dir = dir.to_path_buf();
    let name = input.file_name().and_then(|n| n.to_str()).unwrap_or("in");
    let output = dir.join(format!("rows-{name}-{workers}.jsonl"));
    let dead = dir.join(format!("dead-{name}-{workers}.jsonl"));
    let summary = weir::features_cmd::compute_features(
        job,
        vec![input.to_path_buf()],
        output.clone(),
        Some(dead.clone()),
    )?;
    ensure!(
        summary
            .dead_letters
            .iter()
            .all(|(reason, _)| *reason != DeadLetterReason::Late),
        "{workers} workers: late records: {summary:?}"
    );
    let mut rows = Rows::new();
    for (id, revision, values) in parse_rows(&output)? {
        ensure!(
            rows.insert(id.clone(), (revision, values)).is_none(),
            "{id:?} emitted twice"
        );
    }
    Ok((rows, dead))
}

/// Values feature `f` may take in the window of `members`: for first/last, that of any
/// record with the extreme event time (among those that have the field).
fn tied(events: &[Ev], members: &[usize], f: usize) -> Vec<f64> {
    let field = |e: &Ev| if f < 14 { Some(e.dwell) } else { e.amount };
    let with: Vec<&Ev> = members
        .iter()
        .map(|&i| &events[i])
        .filter(|e| field(e).is_some())
        .collect();
    let extreme = if f.is_multiple_of(2) {
        with.iter().map(|e| e.ts).min()
    } else {
        with.iter().map(|e| e.ts).max()
    };
    with.iter()
        .filter(|e| Some(e.ts) == extreme)
        .filter_map(|e| field(e))
        .collect()
}

fn check(events: &[Ev], kind: Kind, rows: &Rows, run: &str) -> Result<()> {
    let windows = oracle::windows(events, kind);
    let ids: BTreeSet<&WindowId> = windows.keys().collect();
    let got: BTreeSet<&WindowId> = rows.keys().collect();
    ensure!(
        ids == got,
        "{run}: {} windows, the oracle has {}",
        got.len(),
        ids.len()
    );
    for (id, members) in &windows {
        let expected = oracle::features(events, members);
        let (revision, values) = &rows[id];
        ensure!(*revision == 0, "{run}: {id:?} revision {revision}");
        for (f, (&want, &value)) in expected.iter().zip(values).enumerate() {
            let ok = if FIRST_LAST.contains(&f) {
                let candidates = tied(events, members, f);
                (candidates.is_empty() && value.is_nan()) || candidates.contains(&value)
            } else {
                oracle::feature_matches(f, want, value)
            };
            ensure!(
                ok,
                "{run}: {id:?} feature {f}: expected {want}, got {value}"
            );
        }
    }
    Ok(())
}

fn write_events(dir: &Path, events: &[Ev]) -> Result<(PathBuf, PathBuf)> {
    let text: String = events.iter().map(|e| e.to_json() + "\n").collect();
    let plain = dir.join("events.jsonl");
    fs::write(&plain, &text)?;
    let gz = dir.join("events.jsonl.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes())?;
    fs::write(&gz, encoder.finish()?)?;
    Ok((plain, gz))
}

const KINDS: [(&str, Kind); 3] = [
    (
        "kind = \"tumbling\"\nsize = \"1m\"",
        Kind::Aligned {
            size: 60_000,
            slide: 60_000,
        },
    ),
    (
        "kind = \"hopping\"\nsize = \"90s\"\nslide = \"1m\"",
        Kind::Aligned {
            size: 90_000,
            slide: 60_000,
        },
    ),
    (
        "kind = \"session\"\ngap = \"20s\"\nmax_length = \"1h\"",
        Kind::Session {
            gap: 20_000,
            max_length: 3_600_000,
        },
    ),
];

#[test]
fn one_file_in_ranges_equals_the_oracle_on_1_2_and_3_source_instances() -> Result<()> {
    let dir = scratch_dir("file-ranges-oracle");
    let events = oracle::generate(11, KEYS, EVENTS, MAX_OUT_OF_ORDERNESS_MS);
    let (plain, gz) = write_events(&dir, &events)?;
    ensure!(
        fs::metadata(&plain)?.len() > 40 * 2048,
        "the file is too small to make many ranges"
    );
    for (window, kind) in KINDS {
        let mut first: Option<Rows> = None;
        for workers in 1..=3 {
            let (rows, _) = features_run(&dir, window, &plain, workers)?;
            check(
                &events,
                kind,
                &rows,
                &format!("{window:?}, {workers} workers"),
            )?;
            if let Some(first) = &first {
                ensure!(
                    first.keys().eq(rows.keys()),
                    "{workers} workers: other windows than 1 worker"
                );
            }
            first.get_or_insert(rows);
        }
        let (rows, _) = features_run(&dir, window, &gz, 2)?;
        check(
            &events,
            kind,
            &rows,
            &format!("{window:?}, gzip, 2 workers"),
        )?;
    }
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn dead_letters_name_the_file_and_the_byte_offset_of_their_line() -> Result<()> {
    let dir = scratch_dir("file-ranges-dead");
    let events = oracle::generate(12, KEYS, EVENTS, MAX_OUT_OF_ORDERNESS_MS);
    let mut text = String::new();
    for (i, e) in events.iter().enumerate() {
        text.push_str(&e.to_json());
        text.push('\n');
        if i % 97 == 0 {
            text.push_str(&format!(
                "{{\"user\":\"u001\",\"ts\":\"not a time {i}\"}}\n"
            ));
        }
    }
    let input = dir.join("events.jsonl");
    fs::write(&input, &text)?;
    let mut sets = Vec::new();
    for workers in 1..=3 {
        let (_, dead) = features_run(&dir, KINDS[0].0, &input, workers)?;
        let mut letters = BTreeSet::new();
        for line in fs::read_to_string(&dead)?.lines() {
            let letter: Value = serde_json::from_str(line)?;
            let offset = letter["offset"].as_u64().context("offset")? as usize;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(letter["raw_base64"].as_str().context("raw")?)?;
            let at = text
                .as_bytes()
                .get(offset..offset + raw.len())
                .context("offset past the file")?;
            ensure!(
                at == raw.as_slice() && text.as_bytes()[offset + raw.len()] == b'\n',
                "offset {offset} is not the line's"
            );
            letters.insert((
                letter["partition"].as_i64(),
                offset,
                letter["reason"].as_str().map(str::to_owned),
            ));
        }
        ensure!(
            letters.len() == EVENTS.div_ceil(97),
            "{workers} workers: {} dead letters",
            letters.len()
        );
        sets.push(letters);
    }
    ensure!(
        sets.windows(2).all(|w| w[0] == w[1]),
        "dead letters differ between instance counts"
    );
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}

/// A features-only run with checkpoints every 50 ms into `dir/ckpt`, restoring the newest.
fn checkpointed_run(
    dir: &Path,
    input: &Path,
    workers: usize,
    stop: Arc<AtomicBool>,
) -> Result<weir::RunSummary> {
    let mut job = job(KINDS[0].0, workers)?;
    job.base_dir = dir.to_path_buf();
    // Few lines per activation, so that the run is still reading at its first checkpoints,
    // and ranges of 32 KiB, so that a manifest holds ~140 ranges, not 2 000.
    job.source.max_batch = 16;
    job.source.range_bytes = Some(32 * 1024);
    job.use_input_files(vec![input.to_path_buf()]);
    job.use_output_file(dir.join("rows.jsonl"), Some(dir.join("dead.jsonl")));
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(&dir.join("ckpt"), "50ms"))?);
    let options = RunOptions {
        restore: RestoreChoice::Auto,
        ..RunOptions::default()
    };
    run_job_with(job.compile()?, Mode::FeaturesOnly, stop, &options)
}

#[test]
fn a_checkpointed_file_run_restored_on_more_instances_ends_with_the_oracles_rows() -> Result<()> {
    let dir = scratch_dir("file-ranges-rescale");
    let events = oracle::generate(13, KEYS, 40_000, MAX_OUT_OF_ORDERNESS_MS);
    let (input, _) = write_events(&dir, &events)?;
    let stop = Arc::new(AtomicBool::new(false));
    let first = {
        let (dir, input, stop) = (dir.clone(), input.clone(), stop.clone());
        std::thread::spawn(move || checkpointed_run(&dir, &input, 2, stop))
    };
    let store = LocalDirStore::open(dir.join("ckpt"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    // Stop once a checkpoint has a fifth of the file behind it.
    let size = fs::metadata(&input)?.len() as i64;
    loop {
        let read: i64 = store.latest_valid()?.map_or(0, |m| {
            let ranges = m.sources.values().flat_map(|p| p.values());
            ranges.map(|at| at.next_offset).max().unwrap_or(0)
        });
        if read > size / 5 {
            break;
        }
        ensure!(
            !first.is_finished() && Instant::now() < deadline,
            "run 1 ended before a checkpoint had a fifth of the file behind it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    let _ = first
        .join()
        .map_err(|_| anyhow::anyhow!("run 1 panicked"))?;
    let manifest = store.latest_valid()?.context("a checkpoint")?;
    let unfinished = manifest
        .sources
        .values()
        .flat_map(|p| p.values())
        .filter(|at| at.watermark != Watermark::MAX)
        .count();
    ensure!(unfinished > 0, "the checkpoint has no range left to read");
    // The ranges read to their end are spans of ids, not a position each: the two instances
    // take ranges in file order, so the done ones are one span, or two around a range the
    // other instance is still reading.
    let spans = manifest
        .finished
        .values()
        .map(|f| f.iter().count())
        .sum::<usize>();
    ensure!(
        manifest.finished.values().any(|f| !f.is_empty()) && spans <= unfinished + 1,
        "{spans} spans of finished ranges beside {unfinished} being read: {:?}",
        manifest.finished
    );
    // Nor is it resumed over the file written again: the same size with one byte changed near
    // its end, in no range being read, is refused before the run starts.
    let original = fs::read(&input)?;
    let mut replaced = original.clone();
    let near_end = replaced.len() - 2;
    replaced[near_end] ^= 1;
    fs::write(&input, &replaced)?;
    let refused = checkpointed_run(&dir, &input, 3, Arc::new(AtomicBool::new(false)));
    fs::write(&input, &original)?;
    let refused = refused
        .err()
        .context("a checkpoint was resumed over a replaced input file")?;
    ensure!(
        format!("{refused:#}").contains("taken over other input files"),
        "{refused:#}"
    );
    let summary = checkpointed_run(&dir, &input, 3, Arc::new(AtomicBool::new(false)))?;
    ensure!(
        summary.events_in < events.len() as u64,
        "the restored run read all {} events again",
        summary.events_in
    );
    // At-least-once: a window may be written again after the restore, equal but for what
    // depends on the order its records arrived in, which the rescale changes: the ties of
    // first/last and the rounding of variances (Welford, in arrival order).
    let mut rows = Rows::new();
    for (id, revision, values) in parse_rows(&dir.join("rows.jsonl"))? {
        if let Some((r, v)) = rows.get(&id) {
            let same =
                |f: usize| FIRST_LAST.contains(&f) || oracle::feature_matches(f, v[f], values[f]);
            ensure!(
                *r == revision && (0..v.len()).all(same),
                "{id:?} written twice with different contents: revision {r} {v:?}, then revision {revision} {values:?}"
            );
        }
        rows.insert(id, (revision, values));
    }
    check(&events, KINDS[0].1, &rows, "restored on 3 workers")?;
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}
