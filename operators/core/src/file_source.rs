//! The file source: JSON Lines files (plain, gzip or zstd: [`crate::input_file`]) read as a
//! bounded input through the same decoding, watermarks and tick reports as the Kafka source.
//! Replays, backfills and training sets run the job's own feature code.
//!
//! Every instance reads: a plain file is cut into byte ranges ([`crate::file_ranges`]) that
//! the instances of a process take in turn as they finish one ([`crate::file_claims`]), in a
//! run from the start and in a restored one, so one large file is read by all of them. A record's position is
//! `(partition = file index, offset = byte offset of its line)` — in the decompressed stream
//! for a compressed file — whatever the number of instances; checkpoints record, per range
//! being read (its id as the partition), the offset of its first unread line and its
//! watermark, and the ranges read to their end as spans of ids ([`SourcePositions`]).
//!
//! Watermarks: each range is a partition of [`PartitionWatermarks`]. An instance reads its
//! ranges of a file one after another in file order ([`crate::file_lane`]), and a range it
//! starts inherits the watermark of the one it finished before it in that file: the job's
//! `max_out_of_orderness` bounds disorder along the file (as when the whole file was one
//! partition), so every line after a finished range is at least its watermark. Ranges not
//! taken yet lie after every range being read (they are taken in file order), so they are
//! left out of an instance's minimum.
//! A file that keeps that bound therefore has no late record and fires every window once,
//! with any number of instances; the instances read neighbouring ranges, so the window state
//! held open between the slowest and the fastest one spans a few ranges, not the file.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use timely::dataflow::Scope;

use weir_checkpoint::SourcePositions;
use weir_features::dead_letter::DeadLetter;
use weir_features::record::Event;
use weir_features::vocab::{SourcePosition, Tick};
use weir_features::watermark::{PartitionWatermarks, SourceProgress};

use crate::clock::unix_ms;
use crate::error::{OperatorError, Result};
use crate::file_claims::RangeClaims;
use crate::file_lane::{Lane, LineRead};
use crate::file_ranges::{RangeLayout, RangeSplit};
use crate::input_file::InputFile;
use crate::metrics::JobMetrics;
use crate::source::{RawRecord, RecordDecoder, SourceStreams};
use crate::source_operator::{build_placed_source, SourceReader, SourceStage};

/// Configuration of the file source stage.
#[derive(Clone, Debug)]
pub struct FileSourceConfig {
    /// Input files; file `i` is the partition of its records' positions.
    pub paths: Vec<PathBuf>,
    /// How plain files are cut into ranges (`[source] range_bytes`); the layout is part of a
    /// file run's checkpoints.
    pub split: RangeSplit,
    /// Instances (those of a process take its ranges in turn: [`crate::file_claims`]), tick,
    /// epochs and pacing (whose `stop` flag also stops every source on a read error).
    pub stage: SourceStage,
    /// Decoding of lines into events.
    pub decoder: RecordDecoder,
    /// Bounded out-of-orderness of event time along a file.
    pub max_out_of_orderness_ms: i64,
    /// Lines read per activation at most.
    pub max_batch: usize,
    /// Where to resume, per range, from a checkpoint: the offset of the range's first unread
    /// line and its watermark, or finished.
    pub resume: SourcePositions,
    /// The ranges the instances of this process take in turn: one value, cloned into every
    /// worker's config.
    pub claims: RangeClaims,
}

/// A file source instance.
struct FileReader {
    instance: u32,
    files: Vec<InputFile>,
    lanes: Vec<Lane>,
    watermarks: PartitionWatermarks,
    decoder: RecordDecoder,
    max_batch: usize,
    /// Set on a read error: every source stops without declaring the end of input.
    stop: Arc<AtomicBool>,
    /// Ranges done since the last [`SourceReader::positions`] (the committer keeps the
    /// earlier ones): a checkpoint's work stays proportional to what changed since the last
    /// one, not to the ranges read so far. `None` without checkpoints: nothing asks for
    /// positions then, and the list would grow with the input (4 bytes per range).
    newly_finished: Option<Vec<i32>>,
}

/// Builds the file source on every worker.
pub fn file_source<'scope>(
    scope: Scope<'scope, Tick>,
    config: FileSourceConfig,
) -> Result<SourceStreams<'scope>> {
    let name = format!("FileSource({} files)", config.paths.len());
    build_placed_source(scope, &name, config.stage.clone(), |instance| {
        FileReader::open(instance, &config)
    })
}

impl FileReader {
    fn open(instance: u32, config: &FileSourceConfig) -> Result<FileReader> {
        let files = config
            .paths
            .iter()
            .map(|path| InputFile::open(path))
            .collect::<Result<Vec<_>>>()?;
        let layout = RangeLayout::new(files, config.split)?;
        let bounds = config.resume.id_bounds();
        let outside = bounds.and_then(|(low, high)| {
            (low < 0)
                .then_some(low)
                .or((high >= layout.len()).then_some(high))
        });
        if let Some(id) = outside {
            return Err(OperatorError::InputResume {
                path: PathBuf::from(&config.decoder.source_name),
                reason: format!(
                    "the checkpoint has a position for range {id}, but the inputs split into {} {} now (the files or [source] range_bytes changed)",
                    layout.len(),
                    config.split
                ),
            });
        }
        let files = layout.files().to_vec();
        // Ranges are taken in turn (file_claims.rs), from the start or from the checkpoint's
        // positions; `ended`: those it recorded at their end (manifests before format 3),
        // reported as finished so that the next manifest lists them as spans.
        let (parallelism, processes) =
            (config.stage.parallelism, config.stage.placement.processes());
        let placed = (instance as usize, parallelism, processes);
        let ended = config.claims.fill_once(&layout, placed, &config.resume)?;
        let mut lanes = Vec::new();
        let rank = instance as usize / processes.max(1);
        for (index, file) in files.iter().enumerate() {
            lanes.extend(Lane::claiming(file, index, &config.claims, rank)?);
        }
        // Idle detection is pointless for files: a file is never "caught up" until it is done.
        let mut watermarks = PartitionWatermarks::new(config.max_out_of_orderness_ms, u64::MAX);
        let now = unix_ms();
        let newly_finished = config.stage.epochs.enabled().then_some(ended);
        for lane in &lanes {
            if let Some(range) = lane.current_range() {
                watermarks.assign(range.range.id, now);
                watermarks.resume(range.range.id, range.recorded);
            }
        }
        Ok(FileReader {
            instance,
            files,
            lanes,
            watermarks,
            decoder: config.decoder.clone(),
            max_batch: config.max_batch.max(1),
            stop: config.stage.pacing.stop.clone(),
            newly_finished,
        })
    }

    /// Stops the job after a read error: ending the range here would skip its unread lines
    /// silently and flush every window as if the input were complete.
    fn fail(&self, lane: usize, error: &dyn std::fmt::Display) {
        let path = self.files[self.lanes[lane].file].path.display().to_string();
        tracing::error!(%error, path, "cannot read the input file; stopping the job");
        JobMetrics::add(&self.decoder.metrics.source_read_failures, 1);
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Reads up to `budget` lines of lane `l`, adding their bytes to `bytes`; returns the
    /// records handled, or `None` after a read error (the job is stopping).
    fn poll_lane(
        &mut self,
        l: usize,
        budget: usize,
        now_ms: u64,
        events: &mut Vec<Event>,
        dead: &mut Vec<DeadLetter>,
        bytes: &mut usize,
    ) -> Option<usize> {
        let mut handled = 0;
        for _ in 0..budget {
            let lane = &mut self.lanes[l];
            let Some(id) = lane.current_range().map(|r| r.range.id) else {
                break;
            };
            let partition = lane.file as i32;
            let (offset, line) = match lane.read_line() {
                Ok(LineRead::Line(offset, line)) => (offset, line),
                Ok(LineRead::RangeDone) => {
                    // The next range of this file inherits this one's watermark.
                    let carried = self.watermarks.partition_watermark(id);
                    // The lane and the checkpoint's spans know it is done (`positions`).
                    self.watermarks.retire(id);
                    if let Some(finished) = self.newly_finished.as_mut() {
                        finished.push(id);
                    }
                    let path = self.files[lane.file].path.clone();
                    match lane.advance(&path) {
                        Ok(Some(next)) => {
                            let id = next.range.id;
                            let inherited = carried.map_or(next.recorded, |c| c.max(next.recorded));
                            self.watermarks.assign(id, now_ms);
                            self.watermarks.resume(id, inherited);
                            continue;
                        }
                        Ok(None) => break,
                        Err(error) => {
                            self.fail(l, &error);
                            return None;
                        }
                    }
                }
                Err(error) => {
                    self.fail(l, &error);
                    return None;
                }
            };
            if line.is_empty() {
                continue;
            }
            handled += 1;
            let record = RawRecord {
                payload: Some(line),
                position: SourcePosition {
                    partition,
                    offset: i64::try_from(offset).unwrap_or(i64::MAX),
                },
                timestamp: None,
                key: None,
            };
            *bytes += record.stored_bytes();
            match self.decoder.push(record, now_ms, events, dead) {
                Some(ts) => self.watermarks.observe(id, ts, now_ms),
                None => self.watermarks.touch(id, now_ms),
            }
        }
        Some(handled)
    }
}

impl SourceReader for FileReader {
    fn instance(&self) -> u32 {
        self.instance
    }

    /// Reads up to `max_batch` lines, round-robin over this instance's lanes (one per file) in
    /// chunks, so every file's watermark moves forward together.
    fn poll(&mut self, now_ms: u64, events: &mut Vec<Event>, dead: &mut Vec<DeadLetter>) -> usize {
        let active = self.lanes.iter().filter(|l| !l.done()).count().max(1);
        let per_lane = (self.max_batch / active).max(1);
        let (mut handled, mut bytes, mut failed) = (0, 0, false);
        for l in 0..self.lanes.len() {
            if self.lanes[l].done() {
                continue;
            }
            match self.poll_lane(l, per_lane, now_ms, events, dead, &mut bytes) {
                Some(n) => handled += n,
                None => {
                    failed = true;
                    break;
                }
            }
        }
        self.decoder.count_bytes(bytes);
        if failed {
            return handled;
        }
        // Finished ranges still count as progress: report them on the next poll.
        handled.max(usize::from(!self.finished()))
    }

    fn progress(&self, now_ms: u64) -> SourceProgress {
        self.watermarks.progress(now_ms)
    }

    fn exclude_paused(&mut self, paused_ms: u64, now_ms: u64) {
        self.watermarks.exclude_paused(paused_ms, now_ms);
    }

    fn finished(&self) -> bool {
        self.lanes.iter().all(Lane::done)
    }

    fn source_name(&self) -> &str {
        &self.decoder.source_name
    }

    /// The ranges being read at their next line, and the ranges done since the last call as
    /// finished (a restore never reads them again); ranges not started are left out (they
    /// start over).
    fn positions(&mut self) -> SourcePositions {
        let open = self.lanes.iter().filter_map(Lane::current_range);
        let open = open.filter_map(|r| {
            let id = r.range.id;
            let position = r.position(self.watermarks.partition_watermark(id))?;
            Some((id, position))
        });
        let mut positions = SourcePositions::open(open.collect());
        for id in self.newly_finished.iter_mut().flat_map(|f| f.drain(..)) {
            positions.finish(id);
        }
        positions
    }
}
