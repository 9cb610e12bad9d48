//! `weir features`: computes a job's window features over a JSON Lines file of recorded events
//! with the same decoder, window state and feature code as the streaming job — training sets
//! and replays get exactly the online features. The file is one partition read in order:
//! its watermark is `max event time - max_out_of_orderness`, late records are counted and
//! skipped as the job would, and the end of the file flushes every window.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value as Json};

use weir_features::decode::JsonDecoder;
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::vocab::{KeyGroup, SourcePosition, Watermark};
use weir_features::window_state::{Applied, KeyedWindows};

use crate::config::CompiledJob;

/// Counts of a `weir features` run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeaturesSummary {
    /// Lines read.
    pub lines: u64,
    /// Lines that failed to decode (they would be dead letters).
    pub bad: u64,
    /// Records behind the watermark by more than the allowed lateness.
    pub late: u64,
    /// Rows written.
    pub rows: u64,
}

/// Computes feature rows for every (key, window) of `input` and writes them as JSON Lines:
/// `{"key", "window_start", "window_end", "revision", "features": [...]}` (null = missing).
pub fn compute_features(job: &CompiledJob, input: &Path, output: &Path) -> Result<FeaturesSummary> {
    let reader = BufReader::new(
        std::fs::File::open(input).with_context(|| format!("cannot open {}", input.display()))?,
    );
    let mut writer = BufWriter::new(
        std::fs::File::create(output)
            .with_context(|| format!("cannot create {}", output.display()))?,
    );
    let mut summary = FeaturesSummary::default();
    let mut rows = Vec::new();
    for_each_row(job, reader, &mut summary, |row| rows.push(row))?;
    for row in rows {
        let features: Vec<Json> = row
            .values
            .iter()
            .map(|x| serde_json::Number::from_f64(*x).map_or(Json::Null, Json::Number))
            .collect();
        let line = json!({
            "key": row.key.as_str(), "window_start": row.window_start, "window_end": row.window_end,
            "revision": row.revision, "features": features,
        });
        serde_json::to_writer(&mut writer, &line)?;
        writer.write_all(b"\n")?;
        summary.rows += 1;
    }
    writer.flush()?;
    Ok(summary)
}

/// Runs the window engine over JSON Lines from `reader`, calling `emit` for every fired row.
pub fn for_each_row(
    job: &CompiledJob,
    reader: impl BufRead,
    summary: &mut FeaturesSummary,
    mut emit: impl FnMut(FeatureRow),
) -> Result<()> {
    let file = &job.file;
    let decoder = JsonDecoder::new(job.schema.clone());
    let mut state = KeyedWindows::new(file.window.clone(), file.watermark.allowed_lateness);
    let mut max_ts = None;
    for (line_no, line) in reader.split(b'\n').enumerate() {
        let line = line.context("read error")?;
        if line.is_empty() {
            continue;
        }
        summary.lines += 1;
        let watermark = max_ts.map_or(Watermark::MIN, |m| {
            Watermark::bounded_out_of_orderness(m, file.watermark.max_out_of_orderness)
        });
        let Ok(decoded) = decoder.decode(&line) else {
            summary.bad += 1;
            continue;
        };
        let event = Event {
            key_group: KeyGroup::of(decoded.key.as_bytes(), file.runtime.key_groups),
            key: decoded.key,
            ts: decoded.ts,
            values: decoded.values,
            position: SourcePosition {
                partition: 0,
                offset: line_no as i64,
            },
        };
        if let Applied::Late { .. } = state.apply(&job.features, &event, watermark) {
            summary.late += 1;
            continue;
        }
        let max = max_ts.map_or(event.ts, |m: i64| m.max(event.ts));
        max_ts = Some(max);
        let watermark =
            Watermark::bounded_out_of_orderness(max, file.watermark.max_out_of_orderness);
        state.fire(&job.features, watermark, &mut emit);
    }
    state.fire(&job.features, Watermark::MAX, &mut emit);
    Ok(())
}
