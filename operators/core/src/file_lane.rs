//! One file source instance's share of one input file: the ranges of that file
//! ([`crate::file_ranges`]) it takes one at a time from its process's queue
//! ([`crate::file_claims`]), read one after another in file order through one reader, with
//! the byte offset of every line and the resume position of the range being read. It holds
//! only that range, so what it holds does not grow with the input. The instance
//! ([`crate::file_source`]) reads its lanes round-robin and keeps their watermarks.

use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};

use weir_checkpoint::SourceOffset;
use weir_features::vocab::Watermark;

use crate::error::{OperatorError, Result};
use crate::file_claims::{ClaimedRange, RangeClaims};
use crate::file_ranges::InputRange;
use crate::input_file::{input_error, open_file, InputFile, READ_BUFFER_BYTES};
use crate::range_file::RangeFile;

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
    /// A range just taken, to be read from its checkpoint position if it has one.
    fn claimed(claimed: ClaimedRange) -> Self {
        let at = claimed.resume;
        RangeProgress {
            range: claimed.range,
            next: at.map(|at| u64::try_from(at.next_offset).unwrap_or(0)),
            recorded: at.map_or(Watermark::MIN, |at| at.watermark),
            done: false,
        }
    }

    /// Its resume position while it is being read, with `watermark` (the recorded one when
    /// the tracker has none); `None` before it is started. A done range has none: it is
    /// finished ([`weir_checkpoint::SourcePositions::finished`]).
    pub fn position(&self, watermark: Option<Watermark>) -> Option<SourceOffset> {
        let next = self.next.filter(|_| !self.done)?;
        Some(SourceOffset {
            next_offset: i64::try_from(next).unwrap_or(i64::MAX),
            watermark: watermark.unwrap_or(self.recorded),
        })
    }
}

/// The reader of a lane: a plain file it can seek in, read up to the end of the range being
/// read, or a stream it reads from the start.
enum LaneInput {
    Seekable(BufReader<RangeFile>),
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
    /// The range being read; `None` once the lane is done.
    current: Option<RangeProgress>,
    /// Where it takes its next range.
    claims: RangeClaims,
}

/// What reading one line gave.
pub enum LineRead<'a> {
    /// A line starting at this offset, without its end-of-line bytes.
    Line(u64, &'a [u8]),
    /// The current range is done (the lane may have another).
    RangeDone,
}

impl Lane {
    /// Opens `file`'s lane: it takes its first range from `claims` now (the one set aside for
    /// the instance of rank `rank` in its process) and the next ones as it finishes them,
    /// positioned at the first unread line; `None` when no range of the file is left for it.
    pub fn claiming(
        file: &InputFile,
        file_index: usize,
        claims: &RangeClaims,
        rank: usize,
    ) -> Result<Option<Lane>> {
        let Some(first) = claims.take_first(file_index, rank)? else {
            return Ok(None);
        };
        let input = if file.splittable_size.is_some() {
            let handle = open_file(&file.path)?;
            LaneInput::Seekable(BufReader::with_capacity(
                READ_BUFFER_BYTES,
                RangeFile::new(handle),
            ))
        } else {
            LaneInput::Stream(file.stream()?)
        };
        let mut lane = Lane {
            file: file_index,
            input,
            pending: 0,
            spill: Vec::new(),
            offset: 0,
            current: Some(RangeProgress::claimed(first)),
            claims: claims.clone(),
        };
        lane.seek_to_current(&file.path)?;
        Ok(Some(lane))
    }

    /// Whether every range of the lane is done.
    pub fn done(&self) -> bool {
        self.current.is_none()
    }

    /// The range being read.
    pub fn current_range(&self) -> Option<&RangeProgress> {
        self.current.as_ref()
    }

    /// Reads the current range's next line. A line that lies whole in the reader's buffer (all
    /// but about one line per buffer refill) is returned from it, not copied: its bytes are
    /// consumed at the next read or seek. Copying each line out with `read_until` was ~3 % of a
    /// 1-worker features run's samples, finding its end with `memchr` is ~1 % (BENCHMARKS.md, F,
    /// fix 52).
    pub fn read_line(&mut self) -> io::Result<LineRead<'_>> {
        self.consume_pending();
        let Some(range) = self.current.as_mut() else {
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
                    "the file changed while it was read: a line at byte {start} runs past byte {end}, where the file ended or a line started when the range was taken"
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

    /// Moves on to the lane's next range (call after [`LineRead::RangeDone`]); returns it, or
    /// `None` when the lane is done.
    pub fn advance(&mut self, path: &std::path::Path) -> Result<Option<&RangeProgress>> {
        let next = self.claims.take(self.file)?;
        self.current = next.map(RangeProgress::claimed);
        self.seek_to_current(path)?;
        Ok(self.current.as_ref())
    }

    /// Puts the reader at the current range's first unread line.
    fn seek_to_current(&mut self, path: &std::path::Path) -> Result<()> {
        self.consume_pending();
        let Some(range) = &self.current else {
            return Ok(());
        };
        if let LaneInput::Seekable(reader) = &mut self.input {
            reader.get_mut().bound(range.range.end);
        }
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

#[cfg(test)]
mod tests {
    use weir_checkpoint::SourcePositions;
    use weir_testkit::files::Scratch;

    use super::{Lane, LineRead};
    use crate::file_claims::RangeClaims;
    use crate::file_ranges::RangeLayout;
    use crate::input_file::InputFile;

    /// Line `i` of the test files: 11 bytes and a newline.
    fn line(i: usize) -> String {
        format!("{{\"n\":{i:05}}}")
    }

    /// A file of `lines` lines in a directory of the test's own, its input, and the claims
    /// of `instances` instances of one process over ranges of `range_bytes`.
    fn claimed(
        lines: usize,
        range_bytes: u64,
        instances: usize,
    ) -> (Scratch, InputFile, RangeClaims) {
        let dir = Scratch::new("file-lane");
        let path = dir.path().join("events.jsonl");
        let text: String = (0..lines).map(|i| line(i) + "\n").collect();
        std::fs::write(&path, text).expect("write");
        let input = InputFile::open(&path).expect("the input");
        let layout = RangeLayout::new(vec![input.clone()], range_bytes).expect("layout");
        let claims = RangeClaims::default();
        claims
            .fill_once(&layout, (0, instances, 1), &SourcePositions::default())
            .expect("filled");
        (dir, input, claims)
    }

    /// Reads `lane`'s next line (moving on to its next range when one is done) into `lines`;
    /// false once the lane is done.
    fn read_next(lane: &mut Lane, input: &InputFile, lines: &mut Vec<(u64, String)>) -> bool {
        match lane.read_line().expect("a line") {
            LineRead::Line(offset, text) => {
                lines.push((offset, String::from_utf8_lossy(text).into_owned()));
            }
            LineRead::RangeDone => {
                lane.advance(&input.path).expect("the next range");
            }
        }
        !lane.done()
    }

    #[test]
    fn two_lanes_taking_ranges_in_turn_read_every_line_once_at_its_offset() {
        // Ranges of ~40 bytes, far smaller than the read buffer: each lane's next range is
        // rarely the one after its last, so it seeks, and its reads stop at the range's end.
        let (_dir, input, claims) = claimed(100, 40, 2);
        let mut lanes: Vec<Lane> = (0..2)
            .map(|rank| {
                Lane::claiming(&input, 0, &claims, rank)
                    .expect("open")
                    .expect("a range")
            })
            .collect();
        let mut lines = Vec::new();
        let mut reading = [true, true];
        while reading.contains(&true) {
            for (lane, reading) in lanes.iter_mut().zip(reading.iter_mut()) {
                *reading = *reading && read_next(lane, &input, &mut lines);
            }
        }
        lines.sort();
        let expected: Vec<(u64, String)> = (0..100).map(|i| (12 * i as u64, line(i))).collect();
        assert_eq!(lines, expected);
    }

    #[test]
    fn a_line_that_now_runs_past_its_range_stops_the_lane() {
        // Range 0 holds the lines starting before byte 100: nine, up to byte 108. The file
        // then changes so that its ninth line runs past that.
        let (_dir, input, claims) = claimed(20, 100, 1);
        let mut lane = Lane::claiming(&input, 0, &claims, 0)
            .expect("open")
            .expect("a range");
        let mut text: String = (0..8).map(|i| line(i) + "\n").collect();
        text.push_str("{\"n\":\"a longer line\"}\n");
        std::fs::write(&input.path, text).expect("rewrite");
        for i in 0..8 {
            match lane.read_line().expect("an unchanged line") {
                LineRead::Line(offset, _) => assert_eq!(offset, 12 * i),
                LineRead::RangeDone => panic!("range 0 ended early"),
            }
        }
        let error = lane.read_line().err().expect("the changed line refused");
        assert!(
            error
                .to_string()
                .contains("the file changed while it was read"),
            "{error}"
        );
    }
}
