//! How the file source splits its input among its instances (DESIGN.md §2, §5): each plain
//! file is cut into byte ranges of about `[source] range_bytes`, moved forward to line starts
//! (by default a file of up to 512 KiB is one range: [`DEFAULT_SPLIT`]), and every compressed
//! or non-regular file is one range. Ranges are numbered over the input files in order (file
//! 0's ranges first). With several processes, process `q` of `n` reads the ranges whose fixed
//! instance (`r % p`, [`instance_for_partition`]) runs on it (`r % p % n == q`); its
//! instances take them in turn ([`crate::file_claims`]).
//!
//! The layout depends only on the files and the split ([`RangeSplit`]), never on the number
//! of instances, so a rescale moves whole ranges between instances and every record keeps its
//! position: a range is the unit of checkpoints (its id is the partition of the manifest's
//! offsets) and of watermarks, while a record's position is `(file index, byte offset of its
//! line)`.
//!
//! Range `k` of a file of `n` bytes holds the lines that start in
//! `[line_start(k·B), line_start((k+1)·B))` (`B` = `n` for a file read whole), where
//! `line_start(x)` is the first line start at or after byte `x` (`n` when there is none):
//! every line is in exactly one range, a line longer than `B` leaves the ranges it covers
//! empty, and a range's bounds are found with a short read per boundary when the range is
//! taken (its start is the end of the range before it, when that was taken by the same
//! queue: [`crate::file_claims`]).

use std::fs::File;
use std::os::unix::fs::FileExt;

use weir_features::ownership::instance_for_partition;

use crate::error::{OperatorError, Result};
use crate::input_file::{input_error, open_file, InputFile};

/// How plain files are cut into ranges: ranges of about `range_bytes`, except that a file of
/// at most `whole_up_to` bytes is one range. A file read whole is read by one instance, in
/// file order, so its records reach the window operator in an order that does not depend on
/// the instances' timing (DESIGN.md §2); a file cut into ranges read by several instances
/// gives `first` / `last`, the last bits of float sums and a session cut at `max_length` in
/// an order that does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeSplit {
    /// About how many bytes each range of a split file holds (at least 1).
    pub range_bytes: u64,
    /// Files of at most this many bytes are one range (0: every file larger than a range is
    /// split).
    pub whole_up_to: u64,
}

/// `[source] range_bytes` when a job file leaves it unset: 128 KiB ranges, and files of up to
/// 512 KiB whole.
///
/// - Small ranges keep two instances' sources close in event time: the instance reading the
///   later range runs ahead of the watermark, which the earlier one holds, by one range, and
///   the window state of that span stays open. Run F with 2 workers, hopping: CPU ×0.95 and
///   peak RSS 35 against 39 MB at 512 KiB (BENCHMARKS.md, fixes 27, 62, 81 and 84). What a
///   range costs (a 4 KiB read at a boundary, a claim, a watermark partition while it is
///   read) stays small beside its ~1 900 lines of clickstream, and what the run keeps per
///   range read is constant (fixes 60–62).
/// - Files of up to 512 KiB (the range size before fix 81: every such file was one range)
///   stay whole, so their results keep not depending on the worker count: fix 81 made
///   128 KiB the default for every file and was reverted when `tests/oracle_windows.rs`,
///   whose ~250 KB inputs were then read in two ranges by two instances, gave other `last`
///   values and session cuts with 2 workers than with 1.
pub const DEFAULT_SPLIT: RangeSplit = RangeSplit {
    range_bytes: 128 * 1024,
    whole_up_to: 512 * 1024,
};

/// The layouts of a job file that left `[source] range_bytes` unset before
/// [`DEFAULT_SPLIT`], newest first (512 KiB until fix 84, 1 MiB until fix 62, 4 MiB until fix
/// 27; every file larger than a range split): such a job file restores a checkpoint written
/// with one of them in that layout, instead of refusing it.
pub const EARLIER_DEFAULT_SPLITS: &[RangeSplit] = &[
    RangeSplit::every(512 * 1024),
    RangeSplit::every(1024 * 1024),
    RangeSplit::every(4 * 1024 * 1024),
];

impl RangeSplit {
    /// Ranges of about `range_bytes` in every file larger than one: `[source] range_bytes`
    /// as a job file sets it.
    pub const fn every(range_bytes: u64) -> RangeSplit {
        RangeSplit {
            range_bytes,
            whole_up_to: 0,
        }
    }

    /// How many ranges a plain file of `size` bytes is cut into (at least one).
    fn ranges_in(&self, size: u64) -> u64 {
        size.div_ceil(self.range_bytes_of(size)).max(1)
    }

    /// The size of the ranges of a plain file of `size` bytes: the file's own size when it
    /// is read whole.
    fn range_bytes_of(&self, size: u64) -> u64 {
        if size <= self.whole_up_to {
            size.max(1)
        } else {
            self.range_bytes.max(1)
        }
    }
}

impl From<u64> for RangeSplit {
    fn from(range_bytes: u64) -> RangeSplit {
        RangeSplit::every(range_bytes)
    }
}

impl std::fmt::Display for RangeSplit {
    /// What a topology hash and a message say of the layout: `ranges of N bytes`, and for a
    /// layout that keeps small files whole, `, files of up to M bytes whole`. A file job's
    /// checkpoints are refused when this text changes (the topology hash includes it), so a
    /// split of every file reads as `[source] range_bytes` did before [`RangeSplit`]: a test
    /// pins it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ranges of {} bytes", self.range_bytes)?;
        if self.whole_up_to > 0 {
            write!(f, ", files of up to {} bytes whole", self.whole_up_to)?;
        }
        Ok(())
    }
}

/// A part of one input file that one source instance reads from start to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputRange {
    /// Its number among all ranges: the partition of its checkpoint offsets and watermark.
    pub id: i32,
    /// Index of its file among the inputs: the partition of its records' positions.
    pub file: usize,
    /// Offset of its first line (in the decompressed stream for a compressed file).
    pub start: u64,
    /// Offset just past its last line; `None`: it ends where the stream ends.
    pub end: Option<u64>,
}

/// The ranges of a set of input files.
#[derive(Clone, Debug)]
pub struct RangeLayout {
    files: Vec<InputFile>,
    /// Id of each file's first range, and one past the last file's.
    first_ids: Vec<i32>,
    split: RangeSplit,
}

impl RangeLayout {
    /// The layout of `files` cut as `split` says (a `u64`: ranges of about that many bytes
    /// in every file).
    pub fn new(files: Vec<InputFile>, split: impl Into<RangeSplit>) -> Result<RangeLayout> {
        let split = split.into();
        let mut first_ids = vec![0i32];
        let mut next = 0u64;
        for file in &files {
            next += file.splittable_size.map_or(1, |size| split.ranges_in(size));
            let id = i32::try_from(next).map_err(|_| OperatorError::UnreadableInput {
                path: file.path.clone(),
                reason: format!(
                    "the inputs split into more than {} {split}: raise [source] range_bytes",
                    i32::MAX
                ),
            })?;
            first_ids.push(id);
        }
        Ok(RangeLayout {
            files,
            first_ids,
            split,
        })
    }

    /// The input files, in order.
    pub fn files(&self) -> &[InputFile] {
        &self.files
    }

    /// Number of ranges over all files.
    pub fn len(&self) -> i32 {
        self.first_ids.last().copied().unwrap_or(0)
    }

    /// Whether there are no ranges (no input files).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids of file `file`'s ranges, in offset order.
    pub fn ids_of(&self, file: usize) -> std::ops::Range<i32> {
        self.first_ids[file]..self.first_ids[file + 1]
    }

    /// The file that range `id` is part of; `None` past the last range.
    pub fn file_of(&self, id: i32) -> Option<usize> {
        let after = self.first_ids.partition_point(|&first| first <= id);
        (id >= 0 && after < self.first_ids.len()).then(|| after - 1)
    }

    /// The ranges of instance `instance` of `parallelism` by the fixed rule (`r % p == i`), in
    /// id order (file by file, each file's in offset order), all at once: the source finds
    /// each range when an instance takes it ([`RangeLayout::range`]); tests check what it
    /// reads against this.
    pub fn ranges_of(&self, instance: usize, parallelism: usize) -> Result<Vec<InputRange>> {
        let mut ranges = Vec::new();
        for file in 0..self.files.len() {
            let mut handle = None;
            let mine = self
                .ids_of(file)
                .filter(|&id| instance_for_partition(id, parallelism) == instance);
            for id in mine {
                ranges.push(self.range(file, id, None, &mut handle)?);
            }
        }
        Ok(ranges)
    }

    /// Range `id` of file `file` (one of [`RangeLayout::ids_of`]): a short read finds each of
    /// its bounds in a plain file (its start only when `start` does not give it: the end of
    /// the range before it), through `handle` (opened on first use; pass the same one for the
    /// file's next range).
    pub fn range(
        &self,
        file: usize,
        id: i32,
        start: Option<u64>,
        handle: &mut Option<File>,
    ) -> Result<InputRange> {
        let input = &self.files[file];
        let Some(size) = input.splittable_size else {
            return Ok(InputRange {
                id,
                file,
                start: 0,
                end: None,
            });
        };
        let handle = match handle {
            Some(handle) => handle,
            None => handle.insert(open_file(&input.path)?),
        };
        let k = u64::try_from(id - self.first_ids[file]).unwrap_or(0);
        let range_bytes = self.split.range_bytes_of(size);
        let bound = |x: u64| {
            line_start_at_or_after(handle, x, size)
                .map_err(|source| input_error(&input.path, source))
        };
        Ok(InputRange {
            id,
            file,
            start: match start {
                Some(start) => start,
                None => bound(k * range_bytes)?,
            },
            end: Some(bound((k + 1) * range_bytes)?),
        })
    }
}

/// The first line start at or after byte `at` of a file of `size` bytes (`size` if none).
fn line_start_at_or_after(file: &File, at: u64, size: u64) -> std::io::Result<u64> {
    if at == 0 || at >= size {
        return Ok(at.min(size));
    }
    // A line starts at `at` iff the byte before it ends a line.
    let mut scanned = at - 1;
    // A JSON Lines record is rarely longer than a page: one small read finds the next line
    // start (a 64 KiB buffer per bound was a quarter of a 2-worker features run's page faults).
    let mut buffer = [0u8; 4096];
    while scanned < size {
        let read = file.read_at(&mut buffer, scanned)?;
        if read == 0 {
            break;
        }
        if let Some(i) = buffer[..read].iter().position(|&b| b == b'\n') {
            return Ok((scanned + i as u64 + 1).min(size));
        }
        scanned += read as u64;
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use weir_testkit::files::Scratch;

    use super::*;
    use crate::input_file::Encoding;

    /// `text` as a plain input file in a directory of the test's own (removed when the guard
    /// drops; tests run in parallel).
    fn plain(text: &[u8]) -> (InputFile, Scratch) {
        let dir = Scratch::new("file-ranges");
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, text).expect("temp file");
        let file = InputFile {
            path,
            encoding: Encoding::Plain,
            splittable_size: Some(text.len() as u64),
        };
        (file, dir)
    }

    #[test]
    fn every_line_is_in_exactly_one_range_whatever_the_instances() {
        let text = b"aaaa\nbb\n\ncccccccccccc\nd\neeeeeee";
        let starts: Vec<u64> = std::iter::once(0)
            .chain(
                text.iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i as u64 + 1),
            )
            .filter(|&s| s < text.len() as u64)
            .collect();
        let (file, _dir) = plain(text);
        for range_bytes in 1..=text.len() as u64 + 1 {
            let layout = RangeLayout::new(vec![file.clone()], range_bytes).expect("layout");
            let mut seen = Vec::new();
            for parallelism in 1..=3 {
                let mut ranges: Vec<InputRange> = (0..parallelism)
                    .flat_map(|i| layout.ranges_of(i, parallelism).expect("ranges"))
                    .collect();
                ranges.sort_by_key(|r| r.id);
                assert_eq!(ranges.len() as i32, layout.len());
                if parallelism > 1 {
                    assert_eq!(
                        ranges, seen,
                        "range_bytes {range_bytes}, {parallelism} instances"
                    );
                }
                let mut covered: Vec<u64> = Vec::new();
                for (r, next) in ranges.iter().zip(ranges.iter().skip(1)) {
                    assert_eq!(r.end, Some(next.start), "ranges touch");
                }
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges.last().and_then(|r| r.end), Some(text.len() as u64));
                for r in &ranges {
                    let end = r.end.expect("plain");
                    covered.extend(starts.iter().copied().filter(|&s| s >= r.start && s < end));
                    assert!(
                        r.start == end || starts.contains(&r.start),
                        "{r:?} starts mid-line"
                    );
                }
                assert_eq!(covered, starts, "range_bytes {range_bytes}");
                seen = ranges;
            }
        }
    }

    #[test]
    fn a_file_up_to_the_whole_size_is_one_range_and_a_larger_one_is_cut() {
        let text = b"aaaa\nbb\n\ncccccccccccc\nd\neeeeeee\n";
        let size = text.len() as u64;
        let (file, _dir) = plain(text);
        let ranges = |split: RangeSplit| {
            let layout = RangeLayout::new(vec![file.clone()], split).expect("layout");
            layout.ranges_of(0, 1).expect("ranges")
        };
        let whole = RangeSplit {
            range_bytes: 4,
            whole_up_to: size,
        };
        let all = vec![InputRange {
            id: 0,
            file: 0,
            start: 0,
            end: Some(size),
        }];
        assert_eq!(ranges(whole), all, "one range, to the end of the file");
        let cut = RangeSplit {
            whole_up_to: size - 1,
            ..whole
        };
        assert_eq!(ranges(cut), ranges(RangeSplit::every(4)));
        assert!(ranges(cut).len() > 1);
        assert_eq!(DEFAULT_SPLIT.ranges_in(DEFAULT_SPLIT.whole_up_to), 1);
        assert_eq!(DEFAULT_SPLIT.ranges_in(DEFAULT_SPLIT.whole_up_to + 1), 5);
    }

    #[test]
    fn a_split_reads_as_the_topology_hash_has_always_read_it() {
        // `jobs/src/config.rs` hashes `|file {split}`; before `RangeSplit` it hashed
        // `|file ranges of {range_bytes} bytes`, which checkpoints written then carry.
        assert_eq!(
            RangeSplit::every(524288).to_string(),
            "ranges of 524288 bytes"
        );
        assert_eq!(
            DEFAULT_SPLIT.to_string(),
            "ranges of 131072 bytes, files of up to 524288 bytes whole"
        );
    }

    #[test]
    fn a_bound_inside_a_line_longer_than_a_read_finds_the_next_line() {
        let long = "x".repeat(3 * 4096 + 17);
        let text = format!("a\n{long}\nb\n");
        let (file, _dir) = plain(text.as_bytes());
        let handle = File::open(&file.path).expect("open");
        let size = text.len() as u64;
        let after_long = (2 + long.len() + 1) as u64;
        for at in [3, 4096, 2 * 4096 + 5, after_long - 1] {
            assert_eq!(
                line_start_at_or_after(&handle, at, size).expect("read"),
                after_long,
                "from byte {at}"
            );
        }
        assert_eq!(
            line_start_at_or_after(&handle, after_long + 1, size).ok(),
            Some(size)
        );
    }
}
