//! A restore judges lateness as the uninterrupted run did (issue #4's oracle, DESIGN.md §5):
//! the window stage starts from the combined watermark recorded in the checkpoint, not from
//! the minimum. A job is stopped mid-file after some checkpoints; its input is then rewritten
//! with an hour-old record at exactly the position the checkpoint resumes from, so the
//! restored run reads it first. Only that record's event time changes, digit for digit, past
//! the file's first and last 64 KiB: what a restore checks of an input file
//! (`weir_checkpoint::input_files`) stays the same. The uninterrupted run would have found it
//! late (the watermark stood far past it), so the restored run must dead-letter it as late
//! too.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use weir::checkpointing::RestoreChoice;
use weir::gen::{Clickstream, ClickstreamConfig};
use weir::pipeline::Mode;
use weir::run::{run_job_with, RunOptions};
use weir::JobFile;
use weir_checkpoint::{LocalDirStore, Manifest, SnapshotStore};
use weir_features::dead_letter::DeadLetterReason;
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir, write_lines};

fn events() -> Result<Vec<Vec<u8>>> {
    let config = ClickstreamConfig {
        seed: 7,
        events: 200_000,
        users: 500,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    };
    Ok(Clickstream::new(config)?.map(|e| e.payload).collect())
}

/// The clickstream job over `input`, one record per source activation (so that it is still
/// reading when stopped), 1 s ticks and a checkpoint every tick in `dir/ckpt`. Long ticks make
/// the restored run read the rewritten record in its first tick, before any source has
/// reported a watermark: the case the recorded window watermark is for.
fn job(dir: &Path, input: &Path) -> Result<JobFile> {
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.runtime.workers = 1;
    job.runtime.tick = 1_000;
    job.source.max_batch = 1;
    // One range: the checkpoint's one position is where the restored run resumes.
    job.source.range_bytes = Some(u64::MAX / 2);
    job.use_input_files(vec![input.to_path_buf()]);
    job.use_output_file(dir.join("scores.jsonl"), Some(dir.join("dead.jsonl")));
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(&dir.join("ckpt"), "1s"))?);
    Ok(job)
}

fn run(job: JobFile, stop: Arc<AtomicBool>) -> Result<weir::RunSummary> {
    let options = RunOptions {
        restore: RestoreChoice::Auto,
        ..RunOptions::default()
    };
    run_job_with(job.compile()?, Mode::Score, stop, &options)
}

/// The newest checkpoint once it records a window watermark and has read `at_least` bytes.
fn committed(store: &LocalDirStore, at_least: u64) -> Result<Option<Manifest>> {
    let Some(manifest) = store.latest_valid()? else {
        return Ok(None);
    };
    let read = manifest
        .sources
        .values()
        .flat_map(|partitions| partitions.values())
        .map(|at| at.next_offset)
        .max()
        .unwrap_or(0);
    Ok((manifest.window_watermark.is_some() && read >= at_least as i64).then_some(manifest))
}

#[test]
fn records_late_before_a_checkpoint_are_late_after_restoring_it() -> Result<()> {
    let dir = scratch_dir("restore-late");
    let input = dir.join("events.jsonl");
    let lines = events()?;
    write_lines(&input, &lines)?;

    // Run 1: stopped (not ended: the watermark stays a point in event time) once a
    // checkpoint has more than the input's first 64 KiB behind it.
    let stop = Arc::new(AtomicBool::new(false));
    let first = {
        let (job, stop) = (job(&dir, &input)?, stop.clone());
        std::thread::spawn(move || run(job, stop))
    };
    let store = LocalDirStore::open(dir.join("ckpt"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed(&store, 100_000)?.is_none() {
        if first.is_finished() {
            let ended = first
                .join()
                .map_err(|_| anyhow::anyhow!("run 1 panicked"))?;
            anyhow::bail!("run 1 ended before a checkpoint had 100 000 bytes behind it: {ended:?}");
        }
        ensure!(
            Instant::now() < deadline,
            "no checkpoint with 100 000 bytes behind it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    first
        .join()
        .map_err(|_| anyhow::anyhow!("run 1 panicked"))??;
    let manifest = store.latest_valid()?.context("run 1 left a checkpoint")?;
    let watermark = manifest.window_watermark.context("a window watermark")?;
    let resume = manifest
        .sources
        .values()
        .flat_map(|partitions| partitions.get(&0))
        .map(|at| at.next_offset)
        .next()
        .context("the file's resume position")?;
    // Positions in a file are byte offsets of lines.
    let mut line_start = 0;
    let resume = lines
        .iter()
        .position(|line| {
            let at = line_start;
            line_start += line.len() as i64 + 1;
            at == resume
        })
        .context("run 1 read the whole file, or resumes mid-line")?;

    // The input again, with an hour-old record where the restored run resumes: its event
    // time's digits replaced by as many others.
    let ts: Value = serde_json::from_slice::<Value>(&lines[resume])?["ts"].clone();
    let (ts, hour_old) = (ts.to_string(), (watermark - 3_600_000).to_string());
    ensure!(
        ts.len() == hour_old.len(),
        "{ts} and {hour_old} differ in length"
    );
    let mut rewritten = lines.clone();
    let line = &mut rewritten[resume];
    let at = line
        .windows(ts.len())
        .position(|w| w == ts.as_bytes())
        .context("the resumed line's event time")?;
    line[at..at + ts.len()].copy_from_slice(hour_old.as_bytes());
    write_lines(&input, &rewritten)?;

    let summary = run(job(&dir, &input)?, Arc::new(AtomicBool::new(false)))?;
    let late = summary
        .dead_letters
        .iter()
        .find(|(reason, _)| *reason == DeadLetterReason::Late)
        .map_or(0, |(_, n)| *n);
    ensure!(
        late == 1,
        "{late} late records after restoring epoch {} (watermark {watermark}); the hour-old \
         record was {}",
        manifest.epoch.0,
        if late == 0 { "accepted" } else { "not alone" }
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
