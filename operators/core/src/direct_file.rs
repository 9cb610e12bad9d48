//! The file sink's output file written around the page cache (`O_DIRECT`), for the writer
//! thread of [`crate::file_writer`]. A buffered write is the kernel copying each byte into the
//! page cache, allocating and tracking its pages and writing them back later, on the cores
//! the workers need: in run F's 2-worker hopping case (~270 MB of rows) a build that dropped
//! the bytes instead took ×0.80 the CPU, and this writer takes ×0.88-0.91 (BENCHMARKS.md,
//! fix 67). A direct write hands the device the writer's own buffer.
//!
//! A direct write's buffer, file offset and length must be multiples of the device's logical
//! block size; [`BLOCK`] (4 KiB) is a multiple of every common one. Lines are staged in an
//! aligned buffer and written a whole buffer at a time. A flush (before a sync, and every few
//! MiB for the syncer) writes the staged whole blocks directly and the last partial block
//! through the page cache, then keeps that partial block staged: the next direct write
//! starts at its aligned offset and writes it again with what follows (the kernel writes
//! back and drops its cached page first). Readers of the file never see bytes past what was
//! written, and a sync covers everything flushed, as with a buffered file.
//!
//! The stage lies inside one 2 MiB transparent huge page: the process allocator
//! (`weir::allocator`) backs the whole 2 MiB pages of a block of 2 MiB or more with huge
//! pages, and the stage's room is large enough to hold one whole. For each direct write the
//! kernel then pins one page of the buffer instead of 256 and builds its request from one
//! segment (run F's hopping case: ×0.95-0.96 CPU; BENCHMARKS.md, fix 68). Where huge pages
//! are not given, the stage works the same on small pages.
//!
//! A file opened to append that ends inside a block: the bytes that fill that block are
//! written through the page cache, and direct writes start at the next block.
//!
//! A file system that refuses `O_DIRECT` (when it is set, or on the first direct write) gets
//! the same staged writes through the page cache: the output is the same either way.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use rustix::io::Errno;

/// Alignment of a direct write's buffer, offset and length.
const BLOCK: usize = 4096;

/// Bytes staged before a write: a multiple of [`BLOCK`], within one [`HUGE_PAGE`].
const STAGE: usize = 1 << 20;

/// The size and alignment of a transparent huge page on x86-64: the stage starts at one.
const HUGE_PAGE: usize = 2 << 20;

/// Bytes of the stage's room: twice [`HUGE_PAGE`], so a whole aligned huge page lies inside
/// it wherever the allocator puts it. The stage writes only its own page: the rest of a
/// freshly mapped block is never touched.
const ROOM: usize = 2 * HUGE_PAGE;

/// A regular file written from a given offset on, directly where the file system allows.
pub(crate) struct DirectFile {
    file: File,
    /// Room for [`STAGE`] bytes at a [`HUGE_PAGE`]-aligned start, and the slack to align it;
    /// never resized, so the start stays aligned.
    room: Vec<u8>,
    /// Where the aligned stage starts in `room`.
    start: usize,
    /// Bytes staged.
    staged: usize,
    /// Bytes still to write through the page cache before the file's end is a multiple of
    /// [`BLOCK`] (a file opened to append that ends inside a block).
    lead: usize,
    /// The file offset of the stage's first byte: a multiple of [`BLOCK`] once `lead` is 0.
    base: u64,
    /// The file's status flags without `O_DIRECT` (and without `O_APPEND`: writes are
    /// positioned), for writes through the page cache.
    buffered_flags: OFlags,
    /// Whether whole blocks are written directly.
    direct: bool,
}

impl DirectFile {
    /// `file` (a regular file, opened for writing), written from its end on: a file opened
    /// to append keeps what it holds. When it ends inside a block, the bytes that fill that
    /// block go through the page cache, and direct writes start at the next block.
    pub(crate) fn new(file: File) -> io::Result<Self> {
        let end = file.metadata()?.len();
        let room = vec![0; ROOM];
        let start = room.as_ptr().align_offset(HUGE_PAGE);
        let buffered_flags = fcntl_getfl(&file)? - OFlags::APPEND - OFlags::DIRECT;
        fcntl_setfl(&file, buffered_flags)?;
        let lead = (BLOCK - (end % BLOCK as u64) as usize) % BLOCK;
        let direct = fcntl_setfl(&file, buffered_flags | OFlags::DIRECT).is_ok();
        if direct && lead > 0 {
            fcntl_setfl(&file, buffered_flags)?;
        }
        Ok(DirectFile {
            file,
            room,
            start,
            staged: 0,
            lead,
            base: end,
            buffered_flags,
            direct,
        })
    }

    /// Writes the first of `bytes` that fill the file's partial last block (at most
    /// `self.lead`), through the page cache; once that block is full, direct writes begin.
    fn write_lead(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let taken = bytes.len().min(self.lead);
        self.file.write_all_at(&bytes[..taken], self.base)?;
        self.base += taken as u64;
        self.lead -= taken;
        if self.lead == 0 && self.direct {
            fcntl_setfl(&self.file, self.buffered_flags | OFlags::DIRECT)?;
        }
        Ok(taken)
    }

    /// The file, for its syncs.
    pub(crate) fn get_ref(&self) -> &File {
        &self.file
    }

    /// Whether its whole blocks are written directly (the file system took `O_DIRECT`).
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        self.direct
    }

    /// Writes the stage's first `whole` bytes (a multiple of [`BLOCK`]) at its offset,
    /// directly while the file system takes it; they leave the stage.
    fn write_whole(&mut self, whole: usize) -> io::Result<()> {
        let bytes = &self.room[self.start..self.start + whole];
        if self.direct {
            match self.file.write_all_at(bytes, self.base) {
                Err(error) if error.raw_os_error() == Some(Errno::INVAL.raw_os_error()) => {
                    // The device wants a larger alignment than BLOCK: through the page cache
                    // from here on.
                    tracing::info!(%error, "direct writes refused: the output goes through the page cache");
                    self.direct = false;
                    fcntl_setfl(&self.file, self.buffered_flags)?;
                    self.file.write_all_at(bytes, self.base)?;
                }
                written => written?,
            }
        } else {
            self.file.write_all_at(bytes, self.base)?;
        }
        self.room
            .copy_within(self.start + whole..self.start + self.staged, self.start);
        self.staged -= whole;
        self.base += whole as u64;
        Ok(())
    }

    /// Writes the stage's partial last block through the page cache; it stays staged.
    fn write_tail(&mut self) -> io::Result<()> {
        if self.staged == 0 {
            return Ok(());
        }
        let tail = &self.room[self.start..self.start + self.staged];
        if !self.direct {
            return self.file.write_all_at(tail, self.base);
        }
        fcntl_setfl(&self.file, self.buffered_flags)?;
        let written = self.file.write_all_at(tail, self.base);
        fcntl_setfl(&self.file, self.buffered_flags | OFlags::DIRECT)?;
        written
    }
}

impl Write for DirectFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.lead > 0 {
            return self.write_lead(bytes);
        }
        let taken = bytes.len().min(STAGE - self.staged);
        let at = self.start + self.staged;
        self.room[at..at + taken].copy_from_slice(&bytes[..taken]);
        self.staged += taken;
        if self.staged == STAGE {
            self.write_whole(STAGE)?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        let whole = self.staged - self.staged % BLOCK;
        if whole > 0 {
            self.write_whole(whole)?;
        }
        self.write_tail()
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        // As a `BufWriter` does: what is staged is written; an error has no one to go to
        // (the writer flushes before every sync and at the end of its input).
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{File, OpenOptions};
    use std::io::Write;

    use proptest::prelude::*;
    use weir_testkit::files::Scratch;

    use super::{DirectFile, BLOCK, HUGE_PAGE, ROOM, STAGE};

    /// Bytes that differ from position to position, so a block written at a wrong offset or
    /// twice over the wrong bytes shows.
    fn text(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| b'a' + ((i / 7 + usize::from(seed)) % 26) as u8)
            .collect()
    }

    /// Writes `chunks` (a length, and whether to flush after it) through a [`DirectFile`] of
    /// `file`; after every flush the file holds exactly `before` and the bytes written so far
    /// (a reader never sees a byte that was not written), and at the end all of them.
    fn write_and_check(
        file: File,
        path: &std::path::Path,
        before: &[u8],
        chunks: &[(usize, bool)],
    ) -> Vec<u8> {
        let mut out = DirectFile::new(file).expect("a direct file");
        let mut expected = before.to_vec();
        for (i, &(len, flush)) in chunks.iter().enumerate() {
            let bytes = text(len, i as u8);
            out.write_all(&bytes).expect("staged");
            expected.extend_from_slice(&bytes);
            if flush {
                out.flush().expect("flushed");
                assert_eq!(std::fs::read(path).expect("read back"), expected);
            }
        }
        drop(out);
        assert_eq!(std::fs::read(path).expect("read back"), expected);
        expected
    }

    /// The stage starts at a huge page and ends inside its room and that page.
    #[test]
    fn the_stage_lies_in_one_huge_page_of_its_room() {
        let dir = Scratch::new("direct-file");
        let file = File::create(dir.path().join("out")).expect("a file");
        let out = DirectFile::new(file).expect("a direct file");
        let first = out.room.as_ptr() as usize + out.start;
        assert_eq!(first % HUGE_PAGE, 0);
        assert!(out.start + STAGE <= ROOM && STAGE <= HUGE_PAGE);
        assert_eq!(out.room.len(), ROOM);
    }

    #[test]
    fn the_file_system_of_the_tests_takes_direct_writes() {
        // /tmp on the machines this project is built on is ext4: every other test here then
        // runs the direct path, not only its page-cache fallback.
        let dir = Scratch::new("direct-file");
        let file = File::create(dir.path().join("out")).expect("a file");
        let out = DirectFile::new(file).expect("a direct file");
        assert!(
            out.is_direct(),
            "O_DIRECT refused under {}",
            dir.path().display()
        );
    }

    #[test]
    fn whole_stages_tails_and_flushes_between_them_land_in_order() {
        let dir = Scratch::new("direct-file");
        let path = dir.path().join("out");
        let chunks = [
            (10, true),
            (BLOCK - 10, true),
            (1, false),
            (STAGE, false),
            (3 * BLOCK + 5, true),
            (0, true),
            (2 * STAGE + 17, false),
            (100, true),
            (STAGE - 117, false),
        ];
        let file = File::create(&path).expect("a file");
        write_and_check(file, &path, b"", &chunks);
    }

    #[test]
    fn a_file_opened_to_append_keeps_what_it_held() {
        let dir = Scratch::new("direct-file");
        let path = dir.path().join("out");
        let before = text(2 * BLOCK + 123, 9);
        std::fs::write(&path, &before).expect("the earlier run's output");
        let file = OpenOptions::new().append(true).open(&path).expect("opened");
        let chunks = [(1, true), (5000, true), (STAGE, false), (7, true)];
        write_and_check(file, &path, &before, &chunks);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn any_writes_and_flushes_read_back_whole(
            held in 0..3 * BLOCK,
            chunks in prop::collection::vec((0..3 * BLOCK, any::<bool>()), 1..40),
        ) {
            let dir = Scratch::new("direct-file");
            let path = dir.path().join("out");
            let before = text(held, 3);
            std::fs::write(&path, &before).expect("the earlier run's output");
            let file = OpenOptions::new().append(true).open(&path).expect("opened");
            write_and_check(file, &path, &before, &chunks);
        }
    }
}
