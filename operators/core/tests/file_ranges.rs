//! The file source splits one file among all its instances (issue #18): with 1, 2 and 3
//! instances on as many workers, every line of a plain file is read exactly once, at the
//! position `(file index, byte offset of its line)`, and with more than one instance more
//! than one worker reads. A gzip and a zstd copy of the same lines, given as further inputs,
//! are read whole with the same offsets (in the decompressed stream). A checkpoint's
//! positions (per range) restored on another number of instances read exactly the lines after
//! them, and what the instances report turns every range into one span of finished ranges; a
//! position that is not a line start is refused.

mod file_input;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{ensure, Context, Result};
use timely::dataflow::operators::Inspect;

use weir_checkpoint::{SourceOffset, SourcePositions};
use weir_features::vocab::Watermark;
use weir_operators::epochs::{CheckpointPart, EpochClock};
use weir_operators::file_ranges::RangeSplit;
use weir_operators::file_source::{file_source, FileSourceConfig};
use weir_operators::metrics::JobMetrics;
use weir_operators::source::SourceStreams;
use weir_operators::Placement;
use weir_testkit::files::scratch_dir;

use file_input::{file_config, user_lines};

const LINES: u64 = 3_000;
/// ~90 KB of lines in ranges of 4 KiB: ~22 ranges.
const RANGE_BYTES: u64 = 4_096;

/// (worker, partition, offset, key, ts) of every event read.
type Read = Vec<(usize, i32, i64, String, i64)>;

fn config(paths: Vec<PathBuf>, instances: usize, metrics: &Arc<JobMetrics>) -> FileSourceConfig {
    let mut config = file_config(paths, "ranges", metrics);
    config.split = RangeSplit::every(RANGE_BYTES);
    config.stage.parallelism = instances;
    config.stage.placement = Placement::new(instances, 1);
    config
}

/// Runs the file source on `config.stage.parallelism` workers, handing each worker's streams
/// to `attach` with the worker's index; fails when a worker could not build it.
fn run_source(
    config: FileSourceConfig,
    attach: impl for<'s> Fn(usize, SourceStreams<'s>) + Send + Sync + 'static,
) -> Result<()> {
    let workers = config.stage.parallelism;
    let built = Arc::new(Mutex::new(Vec::new()));
    let errors = built.clone();
    let attach = Arc::new(attach);
    timely::execute(timely::Config::process(workers), move |worker| {
        let index = worker.index();
        let (config, errors, attach) = (config.clone(), errors.clone(), attach.clone());
        worker.dataflow::<u64, _, _>(move |scope| match file_source(scope, config) {
            Ok(source) => attach(index, source),
            Err(error) => errors.lock().expect("errors").push(error.to_string()),
        });
    })
    .map_err(|e| anyhow::anyhow!("timely: {e}"))?
    .join()
    .into_iter()
    .collect::<std::result::Result<Vec<_>, _>>()
    .map_err(|e| anyhow::anyhow!("a worker failed: {e}"))?;
    let errors = built.lock().expect("errors");
    ensure!(errors.is_empty(), "{}", errors.join("; "));
    Ok(())
}

/// Runs the file source on `config.stage.parallelism` workers; returns what they read.
fn read_all(config: FileSourceConfig) -> Result<Read> {
    let read = Arc::new(Mutex::new(Read::new()));
    let seen = read.clone();
    run_source(config, move |index, source| {
        let seen = seen.clone();
        source.events.inspect(move |e| {
            let row = (
                index,
                e.position.partition,
                e.position.offset,
                e.key.to_string(),
                e.ts,
            );
            seen.lock().expect("events").push(row);
        });
    })?;
    let mut read = read.lock().expect("events").clone();
    read.sort_by_key(|r| (r.1, r.2));
    Ok(read)
}

/// Runs the file source with an epoch every tick and merges every position it reports onto
/// `config.resume`, as the committer does: where a restore after the run would resume.
fn positions_after(mut config: FileSourceConfig) -> Result<SourcePositions> {
    let tick_ms = config.stage.tick_ms;
    config.stage.epochs = EpochClock::every(tick_ms, tick_ms);
    let merged = Arc::new(Mutex::new(config.resume.clone()));
    let into = merged.clone();
    run_source(config, move |_, source| {
        let into = into.clone();
        source.checkpoint.inspect(move |part| {
            if let CheckpointPart::Offsets { positions, .. } = part {
                into.lock().expect("positions").merge(positions.clone());
            }
        });
    })?;
    let merged = merged.lock().expect("positions").clone();
    Ok(merged)
}

/// (offset, key, ts) of every line of `text`.
fn lines_at(text: &str) -> Vec<(i64, String, i64)> {
    let mut offset = 0;
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("a test line");
            let at = offset;
            offset += line.len() as i64 + 1;
            let key = value["user"].as_str().expect("user").to_owned();
            (at, key, value["ts"].as_i64().expect("ts"))
        })
        .collect()
}

/// Each of the `instances` read part of the first input (partition 0: the plain file the
/// instances share, or the one stream one instance reads), and no read failed.
fn ensure_shared_without_failures(
    read: &Read,
    instances: usize,
    metrics: &JobMetrics,
) -> Result<()> {
    let readers: std::collections::BTreeSet<usize> =
        read.iter().filter(|r| r.1 == 0).map(|r| r.0).collect();
    ensure!(
        readers.len() == instances,
        "{instances} instances, but workers {readers:?} read the first input"
    );
    ensure!(
        JobMetrics::get(&metrics.source_read_failures) == 0,
        "read failures"
    );
    Ok(())
}

fn write_compressed(dir: &Path, text: &str) -> Result<(PathBuf, PathBuf)> {
    let gz = dir.join("events.jsonl.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes())?;
    std::fs::write(&gz, encoder.finish()?)?;
    let zst = dir.join("events.jsonl.zst");
    std::fs::write(&zst, zstd::encode_all(text.as_bytes(), 1)?)?;
    Ok((gz, zst))
}

#[test]
fn every_instance_reads_and_every_line_is_read_once_at_its_byte_offset() -> Result<()> {
    let dir = scratch_dir("file-ranges");
    let text = user_lines(LINES, |i| i % 97);
    let plain = dir.join("events.jsonl");
    std::fs::write(&plain, &text)?;
    let (gz, zst) = write_compressed(&dir, &text)?;
    let expected: Vec<(i32, i64, String, i64)> = (0..3)
        .flat_map(|file| {
            lines_at(&text)
                .into_iter()
                .map(move |(o, k, t)| (file, o, k, t))
        })
        .collect();
    for instances in 1..=3 {
        let metrics = Arc::new(JobMetrics::default());
        let paths = vec![plain.clone(), gz.clone(), zst.clone()];
        let read = read_all(config(paths, instances, &metrics))?;
        let got: Vec<_> = read.iter().map(|r| (r.1, r.2, r.3.clone(), r.4)).collect();
        ensure!(
            got == expected,
            "{instances} instances: read {} of {} lines, or at other offsets",
            got.len(),
            expected.len()
        );
        ensure_shared_without_failures(&read, instances, &metrics)?;
        // Every line's bytes counted once (each poll adds what it read), newlines not.
        let line_bytes: usize = text.lines().map(str::len).sum();
        let counted = JobMetrics::get(&metrics.source_bytes);
        ensure!(
            counted == 3 * line_bytes as u64,
            "{instances} instances counted {counted} bytes read, not 3 x {line_bytes}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn restored_positions_resume_exactly_on_another_number_of_instances() -> Result<()> {
    let dir = scratch_dir("file-ranges-resume");
    let text = user_lines(LINES, |i| i % 97);
    let plain = dir.join("events.jsonl");
    std::fs::write(&plain, &text)?;
    let (gz, _) = write_compressed(&dir, &text)?;
    let lines = lines_at(&text);
    // A checkpoint as two instances might have left it: range 0 done, range 1 read up to its
    // 10th line, range 2 not started, and the gzip file (range `gz_range`) read up to line 700.
    // Range 0 is done the way manifests record it since format version 3 (finished) and the
    // way they did before (a position at its end with the watermark MAX).
    let metrics = Arc::new(JobMetrics::default());
    let layout_of = |instances| config(vec![plain.clone(), gz.clone()], instances, &metrics);
    let ranges = weir_operators::file_ranges::RangeLayout::new(
        vec![
            weir_operators::input_file::InputFile::open(&plain)?,
            weir_operators::input_file::InputFile::open(&gz)?,
        ],
        RANGE_BYTES,
    )?;
    let all: Vec<_> = (0..1)
        .flat_map(|i| ranges.ranges_of(i, 1).expect("ranges"))
        .collect();
    let gz_range = all.last().context("a range")?.id;
    let first_line_of = |range: usize| {
        lines
            .iter()
            .position(|l| l.0 as u64 >= all[range].start)
            .expect("a line")
    };
    let resume_line = first_line_of(1) + 10;
    let watermark = Watermark(1_000);
    let resume = BTreeMap::from([
        (
            0,
            SourceOffset {
                next_offset: all[0].end.context("plain")? as i64,
                watermark: Watermark::MAX,
            },
        ),
        (
            1,
            SourceOffset {
                next_offset: lines[resume_line].0,
                watermark,
            },
        ),
        (
            gz_range,
            SourceOffset {
                next_offset: lines[700].0,
                watermark,
            },
        ),
    ]);
    // Range 0 and the first lines of range 1 are the lines before `resume_line`.
    ensure!(all[0].end == Some(all[1].start), "ranges 0 and 1 touch");
    let want: Vec<(i32, i64)> = (0..2)
        .flat_map(|file| lines.iter().map(move |l| (file, l.0)))
        .filter(|&(file, offset)| offset >= lines[if file == 0 { resume_line } else { 700 }].0)
        .collect();
    let before_format_3 = SourcePositions::open(resume.clone());
    let mut finished = before_format_3.clone();
    finished.finish(0);
    for (resume, form) in [(before_format_3, "at its end"), (finished, "finished")] {
        for instances in 1..=3 {
            let mut config = layout_of(instances);
            config.resume = resume.clone();
            let read = read_all(config)?;
            let got: Vec<(i32, i64)> = read.iter().map(|r| (r.1, r.2)).collect();
            ensure!(
                got == want,
                "range 0 {form}, {instances} instances: read {} lines, expected {}",
                got.len(),
                want.len()
            );
        }
        // The instances report the ranges they finish (range 0 too, when the checkpoint had
        // it as a position at its end): once read, the input is one span of finished ranges.
        let mut config = layout_of(2);
        config.resume = resume.clone();
        let after = positions_after(config)?;
        let spans: Vec<_> = after.finished.iter().cloned().collect();
        ensure!(
            spans.len() == 1 && spans[0] == (0..ranges.len()) && after.open.is_empty(),
            "range 0 {form}: the read input resumes from {after:?}"
        );
    }
    // Not a line start: refused when the source is built (on one worker: a worker that cannot
    // build leaves the others waiting; the job's process exits then, `weir::run`).
    let mut config = layout_of(1);
    config.resume = SourcePositions::open(BTreeMap::from([(
        1,
        SourceOffset {
            next_offset: lines[resume_line].0 + 1,
            watermark,
        },
    )]));
    let refused = read_all(config)
        .err()
        .context("a resume position mid-line was accepted")?;
    ensure!(
        refused.to_string().contains("not a line start"),
        "{refused:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Lines are read out of the reader's buffer where they lie whole in it and gathered across
/// refills where they do not: a file several buffers long, lines of every length up to one
/// longer than the buffer, `\r\n` endings, blank lines and a last line without its newline,
/// read plain (1 and 2 instances, ranges spanning several refills) and gzipped (one stream):
/// every record once, at its offset, with its key and time.
#[test]
fn lines_across_the_read_buffer_are_read_whole_at_their_offsets() -> Result<()> {
    use weir_operators::input_file::READ_BUFFER_BYTES;
    let dir = scratch_dir("file-ranges-buffer");
    let mut text = String::new();
    let mut expected = Vec::new();
    let mut i = 0_i64;
    while text.len() < 4 * READ_BUFFER_BYTES {
        // Padding of 0 to ~2 KB, every 500th line ~1.2 buffers long.
        let pad = if i % 500 == 499 {
            READ_BUFFER_BYTES + READ_BUFFER_BYTES / 5
        } else {
            (i as usize * 37) % 2_048
        };
        let line = format!(
            "{{\"user\":\"u{}\",\"ts\":{},\"pad\":\"{}\"}}",
            i % 89,
            1_000 + i,
            "x".repeat(pad)
        );
        expected.push((text.len() as i64, format!("u{}", i % 89), 1_000 + i));
        text.push_str(&line);
        text.push_str(match i % 7 {
            0 => "\r\n",
            1 => "\n\n",
            _ => "\n",
        });
        i += 1;
    }
    // The last line ends the file without a newline.
    expected.push((text.len() as i64, "u0".to_owned(), 0));
    text.push_str(r#"{"user":"u0","ts":0}"#);
    let plain = dir.join("events.jsonl");
    std::fs::write(&plain, &text)?;
    let (gz, _) = write_compressed(&dir, &text)?;
    for (path, instances) in [(&plain, 1), (&plain, 2), (&gz, 1)] {
        let metrics = Arc::new(JobMetrics::default());
        let mut config = config(vec![path.clone()], instances, &metrics);
        // Ranges of two buffers and a half: each is read over several refills.
        config.split = RangeSplit::every((5 * READ_BUFFER_BYTES / 2) as u64);
        let read = read_all(config)?;
        let got: Vec<_> = read.iter().map(|r| (r.2, r.3.clone(), r.4)).collect();
        ensure!(
            got == expected,
            "{} with {instances} instances: read {} of {} lines, or others",
            path.display(),
            got.len(),
            expected.len()
        );
        ensure_shared_without_failures(&read, instances, &metrics)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
