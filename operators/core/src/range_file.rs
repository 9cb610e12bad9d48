//! A plain input file as a lane reads it ([`crate::file_lane`]): positioned reads (`pread`)
//! that stop one byte past the end of the range being read. Under the lane's `BufReader`,
//! an unbounded read filled the whole 256 KiB buffer at a range's last line, and the seek to
//! the lane's next range (rarely the one after it: ranges are taken in turn) threw the rest
//! away: run F read 84 MB of its 71 MB input with 2 workers (`strace`, BENCHMARKS.md, fix 80).
//!
//! The one byte past the end keeps the check that a range's last line ends where the range
//! does: a line that runs past the end (the file changed) is read one byte past it, where
//! the lane sees it and stops the job. A seek only moves the position: no system call.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

/// A plain file read from `pos`, never at or past `limit`.
#[derive(Debug)]
pub(crate) struct RangeFile {
    file: File,
    /// Offset of the next byte read.
    pos: u64,
    /// Reads stop before this offset: one past the range's end, or `u64::MAX` for a range
    /// that runs to the end of the file.
    limit: u64,
}

impl RangeFile {
    /// `file`, read from its start with no bound.
    pub(crate) fn new(file: File) -> Self {
        RangeFile {
            file,
            pos: 0,
            limit: u64::MAX,
        }
    }

    /// Bounds reads to a range ending at `end` (`None`: at the end of the file). Call it
    /// through the `BufReader` before reading the range: bytes the buffer already holds are
    /// read as they are.
    pub(crate) fn bound(&mut self, end: Option<u64>) {
        self.limit = end.map_or(u64::MAX, |end| end.saturating_add(1));
    }
}

impl Read for RangeFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.pos);
        let len = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if len == 0 {
            return Ok(0);
        }
        let read = self.file.read_at(&mut buf[..len], self.pos)?;
        self.pos += read as u64;
        Ok(read)
    }
}

impl Seek for RangeFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match to {
            SeekFrom::Start(at) => (at, 0),
            SeekFrom::Current(delta) => (self.pos, delta),
            SeekFrom::End(delta) => (self.file.metadata()?.len(), delta),
        };
        self.pos = base.checked_add_signed(delta).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start of the file",
            )
        })?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};

    use weir_testkit::files::Scratch;

    use super::*;

    /// A file holding `bytes`, in a scratch directory removed on drop, read through a
    /// 64-byte `BufReader` as a lane reads it, with no bound yet.
    fn reader_of(bytes: &[u8]) -> (Scratch, BufReader<RangeFile>) {
        let dir = Scratch::new("range-file");
        let path = dir.path().join("input.jsonl");
        std::fs::write(&path, bytes).expect("write");
        let file = File::open(&path).expect("open");
        (dir, BufReader::with_capacity(64, RangeFile::new(file)))
    }

    #[test]
    fn reads_stop_one_byte_past_the_bound() {
        let (_dir, mut reader) = reader_of(b"aa\nbb\ncc\ndd\n");
        reader.get_mut().bound(Some(6));
        assert_eq!(reader.fill_buf().expect("fill"), b"aa\nbb\nc");
        reader.consume(7);
        assert_eq!(reader.fill_buf().expect("fill"), b"");
    }

    #[test]
    fn a_seek_moves_the_position_and_the_next_bound_applies() {
        let (_dir, mut reader) = reader_of(b"aa\nbb\ncc\ndd\n");
        reader.get_mut().bound(Some(3));
        assert_eq!(reader.fill_buf().expect("fill"), b"aa\nb");
        reader.get_mut().bound(Some(12));
        reader.seek(SeekFrom::Start(9)).expect("seek");
        assert_eq!(reader.fill_buf().expect("fill"), b"dd\n");
        reader.get_mut().bound(None);
        reader.seek(SeekFrom::Start(3)).expect("seek");
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).expect("read");
        assert_eq!(rest, b"bb\ncc\ndd\n");
        assert!(reader.seek(SeekFrom::Current(-100)).is_err());
        assert_eq!(reader.seek(SeekFrom::End(-3)).expect("seek"), 9);
    }
}
