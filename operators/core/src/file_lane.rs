//! One file source instance's share of one input file: its ranges of that file
//! ([`crate::file_ranges`]), read one after another in file order through one reader, with the
//! byte offset of every line and each range's resume position. Its ranges are fixed (a
//! restored run) or taken one at a time from the process's queue ([`crate::file_claims`]). The instance
//! ([`crate::file_source`]) reads its lanes round-robin and keeps their watermarks.
//!
//! Restoring checks the position of each range being read against the file as it is: inside
//! its range and at a line start (the byte before it ends a line), so a replaced file, a
//! changed `range_bytes` or a checkpoint of another input fails with a clear error instead of
//! reading from the middle of a line. Finished ranges are kept as spans of ids, without the
//! offsets where they ended (manifest format 3), so they cannot show a replaced file: the
//! manifest's fingerprints of the input files do (`weir_checkpoint::input_files`, checked
//! before the run starts).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

use weir_checkpoint::{SourceOffset, SourcePositions};
use weir_features::vocab::Watermark;

use crate::error::{OperatorError, Result};
use crate::file_claims::RangeClaims;
use crate::file_ranges::InputRange;
use crate::input_file::{input_error, open_file, InputFile, READ_BUFFER_BYTES};

/// A range and how far it has been read.
#[derive(Clone, Debug)]
pub struct RangeProgress {
    /// The range.
    pub range: InputRange,
    /// Offset of the first line not yet emitted; `None` before the range is started.
    pub next: Option<u64>,
    /// The watermark a checkpoint recorded for it (`MIN` without one).
    pub recorded: Watermark,
    /// Whether every line of it has been emitted.
    pub done: bool,
}

impl RangeProgress {
    /// Its resume position while it is being read, with `watermark` (the recorded one when
    /// the tracker has none); `None` before it is started. A done range has none: it is
    /// finished ([`SourcePositions::finished`]).
    pub fn position(&self, watermark: Option<Watermark>) -> Option<SourceOffset> {
        let next = self.next.filter(|_| !self.done)?;
        Some(SourceOffset {
            next_offset: i64::try_from(next).unwrap_or(i64::MAX),
            watermark: watermark.unwrap_or(self.recorded),
        })
    }
}

/// The reader of a lane: a plain file it can seek in, or a stream it reads from the start.
enum LaneInput {
    Seekable(BufReader<File>),
    Stream(Box<dyn BufRead>),
}

impl LaneInput {
    fn reader(&mut self) -> &mut dyn BufRead {
        match self {
            LaneInput::Seekable(reader) => reader,
            LaneInput::Stream(reader) => reader.as_mut(),
        }
    }
}

/// One instance's ranges of one file.
pub struct Lane {
    /// Index of the file among the inputs (the partition of its records' positions).
    pub file: usize,
    input: LaneInput,
    /// Bytes of the reader's buffer that the last line returned still borrows: consumed at the
    /// next read or seek ([`Lane::read_line`]).
    pending: usize,
    /// A line that did not lie whole in the reader's buffer, gathered here.
    spill: Vec<u8>,
    /// The reader's offset in the file (or decompressed stream), after the last line returned.
    offset: u64,
    /// Ranges in file order: a restored lane's fixed ones, or the one a claiming lane reads.
    pub ranges: Vec<RangeProgress>,
    /// Index in `ranges` of the range being read; `ranges.len()` once all are done.
    pub current: usize,
    /// Where the lane takes its next range once its own are done (a run from the start:
    /// [`crate::file_claims`]); `None`: its ranges are fixed.
    claims: Option<RangeClaims>,
}

/// What reading one line gave.
pub enum LineRead<'a> {
    /// A line starting at this offset, without its end-of-line bytes.
    Line(u64, &'a [u8]),
    /// The current range is done (the lane may have another).
    RangeDone,
}

impl Lane {
    /// Opens `file`'s lane over `ranges` (in file order, non-empty), checking and applying the
    /// checkpoint's positions in `resume` (by range id; a finished range is done), positioned
    /// at its first unread line.
    pub fn open(
        file: &InputFile,
        file_index: usize,
        ranges: Vec<InputRange>,
        resume: &SourcePositions,
    ) -> Result<Lane> {
        let seekable = file.splittable_size.is_some();
        let input = if seekable {
            let handle = open_file(&file.path)?;
            let mut ranges = ranges.iter();
            let checked = ranges.try_for_each(|r| check_line_start(&handle, file, r, &resume.open));
            checked?;
            LaneInput::Seekable(BufReader::with_capacity(READ_BUFFER_BYTES, handle))
        } else {
            LaneInput::Stream(file.stream()?)
        };
        let ranges = ranges
            .into_iter()
            .map(|range| {
                let at = resume.open.get(&range.id);
                let finished = resume.is_finished(range.id);
                let next = at.map(|at| u64::try_from(at.next_offset).unwrap_or(0));
                let recorded = at.map_or(Watermark::MIN, |at| at.watermark);
                // Manifests before format version 3 record a finished range at its end with
                // the watermark `MAX`.
                let done =
                    finished || recorded == Watermark::MAX || (next.is_some() && next == range.end);
                RangeProgress {
                    range,
                    next,
                    recorded,
                    done,
                }
            })
            .collect();
        let mut lane = Lane {
            file: file_index,
            input,
            pending: 0,
            spill: Vec::new(),
            offset: 0,
            ranges,
            current: 0,
            claims: None,
        };
        lane.current = lane.next_undone(0);
        lane.seek_to_current(&file.path)?;
        Ok(lane)
    }

    /// Opens `file`'s lane in a run from the start: it takes its first range from `claims`
    /// now (the one set aside for the instance of rank `rank` in its process) and the next
    /// ones as it finishes them; `None` when no range of the file is left for it.
    pub fn claiming(
        file: &InputFile,
        file_index: usize,
        claims: &RangeClaims,
        rank: usize,
    ) -> Result<Option<Lane>> {
        let Some(first) = claims.take_first(file_index, rank)? else {
            return Ok(None);
        };
        let mut lane = Lane::open(file, file_index, vec![first], &SourcePositions::default())?;
        lane.claims = Some(claims.clone());
        Ok(Some(lane))
    }

    /// Whether every range of the lane is done.
    pub fn done(&self) -> bool {
        self.current >= self.ranges.len()
    }

    /// The range being read.
    pub fn current_range(&self) -> Option<&RangeProgress> {
        self.ranges.get(self.current)
    }

    /// The ranges not done, from the current one on (every range before it is done): the
    /// started ones among them have a position ([`RangeProgress::position`]).
    pub fn unfinished(&self) -> impl Iterator<Item = &RangeProgress> {
        let rest = self.ranges.get(self.current..).unwrap_or_default();
        rest.iter().filter(|r| !r.done)
    }

    /// Reads the current range's next line. A line that lies whole in the reader's buffer (all
    /// but about one line per buffer refill) is returned from it, not copied: its bytes are
    /// consumed at the next read or seek. Copying each line out with `read_until` was ~3 % of a
    /// 1-worker features run's samples, finding its end with `memchr` is ~1 % (BENCHMARKS.md, F,
    /// fix 52).
    pub fn read_line(&mut self) -> io::Result<LineRead<'_>> {
        self.consume_pending();
        let Some(range) = self.ranges.get_mut(self.current) else {
            return Ok(LineRead::RangeDone);
        };
        let end = range.range.end;
        if end == Some(self.offset) {
            range.done = true;
            range.next = Some(self.offset);
            return Ok(LineRead::RangeDone);
        }
        let reader = self.input.reader();
        // A second `fill_buf` returns the same buffered bytes without reading.
        let (line, read) = match memchr::memchr(b'\n', reader.fill_buf()?) {
            Some(newline) => {
                self.pending = newline + 1;
                (&reader.fill_buf()?[..=newline], newline + 1)
            }
            None => {
                self.spill.clear();
                let read = reader.read_until(b'\n', &mut self.spill)?;
                (self.spill.as_slice(), read)
            }
        };
        let start = self.offset;
        self.offset += read as u64;
        match end {
            Some(end) if read == 0 || self.offset > end => {
                return Err(io::Error::other(format!(
                    "the file changed while it was read: a line at byte {start} runs past byte {end}, where the file ended or a line started when the source opened it"
                )));
            }
            None if read == 0 => {
                range.done = true;
                range.next = Some(self.offset);
                return Ok(LineRead::RangeDone);
            }
            _ => {}
        }
        range.next = Some(self.offset);
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        Ok(LineRead::Line(start, line))
    }

    /// Consumes the bytes of the last line returned from the reader's buffer.
    fn consume_pending(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.input.reader().consume(pending);
    }

    /// Moves on to the next range that is not done (call after [`LineRead::RangeDone`]);
    /// returns it, or `None` when the lane is done.
    pub fn advance(&mut self, path: &std::path::Path) -> Result<Option<&RangeProgress>> {
        self.current = self.next_undone(self.current + 1);
        let claimed = self.claims.as_ref().filter(|_| self.done());
        if let Some(range) = claimed
            .map(|claims| claims.take(self.file))
            .transpose()?
            .flatten()
        {
            // Its ranges are all done and reported finished: a lane that claims ranges holds
            // only the one it reads, not every range it has read (a run's whole input).
            self.ranges.clear();
            self.current = 0;
            self.ranges.push(RangeProgress {
                range,
                next: None,
                recorded: Watermark::MIN,
                done: false,
            });
        }
        self.seek_to_current(path)?;
        Ok(self.ranges.get(self.current))
    }

    fn next_undone(&self, from: usize) -> usize {
        (from..self.ranges.len())
            .find(|&i| !self.ranges[i].done)
            .unwrap_or(self.ranges.len())
    }

    /// Puts the reader at the current range's first unread line.
    fn seek_to_current(&mut self, path: &std::path::Path) -> Result<()> {
        self.consume_pending();
        let Some(range) = self.ranges.get(self.current) else {
            return Ok(());
        };
        let target = range.next.unwrap_or(range.range.start);
        if target == self.offset {
            return Ok(());
        }
        match &mut self.input {
            LaneInput::Seekable(reader) => {
                reader
                    .seek(SeekFrom::Start(target))
                    .map_err(|source| input_error(path, source))?;
            }
            LaneInput::Stream(reader) => skip_to_line_start(reader, target, path)?,
        }
        self.offset = target;
        Ok(())
    }
}

/// Checks that `range`'s checkpointed position (if any) lies in it at a line start.
fn check_line_start(
    handle: &File,
    file: &InputFile,
    range: &InputRange,
    resume: &BTreeMap<i32, SourceOffset>,
) -> Result<()> {
    let Some(at) = resume.get(&range.id) else {
        return Ok(());
    };
    let refuse = |reason: String| OperatorError::InputResume {
        path: file.path.clone(),
        reason,
    };
    let end = range.end.unwrap_or(u64::MAX);
    let next = u64::try_from(at.next_offset).unwrap_or(u64::MAX);
    if next < range.start || next > end {
        return Err(refuse(format!(
            "range {} is bytes {}..{end} of the file now, but the checkpoint resumes it at byte {} (the file or [source] range_bytes changed)",
            range.id, range.start, at.next_offset
        )));
    }
    if next == range.start || next == end {
        return Ok(());
    }
    let mut before = [0u8; 1];
    handle
        .read_exact_at(&mut before, next - 1)
        .map_err(|source| input_error(&file.path, source))?;
    if before[0] != b'\n' {
        return Err(refuse(format!(
            "the checkpoint resumes range {} at byte {next}, which is not a line start (the file changed)",
            range.id
        )));
    }
    Ok(())
}

/// Reads `reader` (at offset 0) up to offset `target`, checking that a line starts there.
fn skip_to_line_start(reader: &mut dyn BufRead, target: u64, path: &std::path::Path) -> Result<()> {
    let before = target.saturating_sub(1);
    let skipped = io::copy(&mut (&mut *reader).take(before), &mut io::sink())
        .map_err(|source| input_error(path, source))?;
    let mut last = [0u8; 1];
    let ends_line = skipped == before
        && (target == 0 || (reader.read_exact(&mut last).is_ok() && last[0] == b'\n'));
    if ends_line {
        return Ok(());
    }
    Err(OperatorError::InputResume {
        path: path.to_owned(),
        reason: format!(
            "the checkpoint resumes it at byte {target} of its decompressed stream, which is past its end or not a line start (the file changed)"
        ),
    })
}
