//! Which file source instance reads which range ([`crate::file_source`]): the ranges
//! ([`crate::file_ranges`]) that belong to the instances of this process go into one queue per
//! file, and an instance takes the next range of a file when it finishes its current one. So
//! the instances of a process read neighbouring ranges for the whole run, whatever their
//! speeds: the faster one reads more ranges instead of running ahead in the file. With a
//! fixed assignment (`r % p == i`) a faster instance drifts ahead range after range, and the
//! combined watermark (the slowest instance's) held every window of the ranges between them
//! open: in run F, 2 instances held ~11 000 open slots each, where one instance reading the
//! whole file holds ~2 000, and the instance with one range more than the other finished last
//! (BENCHMARKS.md, fix 24).
//!
//! A restored run takes its ranges the same way (fix 63; before it, the fixed way): the
//! checkpoint's finished ranges are skipped, and a range it has a position for resumes there,
//! whichever instance takes it (positions are per range, so a rescale changes nothing). The
//! positions of the process's ranges are checked against the files when the queues are
//! filled: inside their range and at a line start (the byte before it ends a line), so a
//! replaced file, a changed `range_bytes` or a checkpoint of another input fails with a clear
//! error instead of reading from the middle of a line (a compressed file's, when its lane
//! skips the stream to it). Finished ranges are kept as spans of
//! ids, without the offsets where they ended (manifest format 3), so they cannot show a
//! replaced file: the manifest's fingerprints of the input files do
//! (`weir_checkpoint::input_files`, checked before the run starts). A range's position in
//! later checkpoints is sent by the instance that took it; one not taken yet keeps the
//! position of the checkpoint restored (the committer starts from it).
//!
//! Ranges are taken in file order, so every range not yet taken lies after every range
//! being read, and an instance's own ranges are in file order too: the watermark rules of
//! [`crate::file_source`] hold as with the fixed assignment.
//!
//! Each instance's first range of a file is set aside for it when the queues are filled (the
//! process's first ranges of the file, one per instance in instance order), so every instance
//! reads even when it starts after the others have taken the rest: a worker thread that the
//! OS started a millisecond late found the queue of a small file empty. Until an instance
//! reads its first range its watermark holds every window open, so a range set aside behind
//! ranges being read is never late.
//!
//! Ranges are shared only among the instances of one process (each process has its share by
//! the fixed rule, `r % p` on one of its instances): the queue is memory, not a protocol.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, PoisonError};

use rangemap::RangeSet;
use weir_checkpoint::{SourceOffset, SourcePositions};
use weir_features::ownership::instance_for_partition;
use weir_features::vocab::Watermark;

use crate::error::{OperatorError, Result};
use crate::file_ranges::{InputRange, RangeLayout};
use crate::input_file::{input_error, InputFile};

/// The queues of one file source in one process: clone it into every worker's
/// [`crate::file_source::FileSourceConfig`] (one value per process, as
/// [`crate::source_alignment::SourceAlignment`]); workers that each made their own would
/// each read every range.
#[derive(Clone, Debug, Default)]
pub struct RangeClaims {
    /// The ranges not taken yet; `None` until the first instance of the process opens.
    queues: Arc<Mutex<Option<Queues>>>,
}

/// A range an instance took, with the checkpoint's position to resume it at (`None`: from its
/// start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimedRange {
    /// The range.
    pub range: InputRange,
    /// Where the checkpoint restored has it: its first unread line and its watermark.
    pub resume: Option<SourceOffset>,
}

/// The ranges of this process not taken yet, as ids: a range's bounds are found when it is
/// taken (a short read per bound), not all when the run starts. With every range's bounds found up
/// front, a 100 GB input at 512 KiB took ~400 000 reads before its first record (scattered
/// over the file: slow on a cold disk) and ~40 bytes per range for the run.
#[derive(Debug)]
struct Queues {
    layout: RangeLayout,
    /// Which ids belong to this process.
    owner: ProcessRanges,
    /// The process's ranges that the restored checkpoint has a position for, not taken yet,
    /// with their bounds (found when the positions were checked).
    positioned: BTreeMap<i32, ClaimedRange>,
    /// The checkpoint's finished ranges, which no instance takes.
    finished: RangeSet<i32>,
    files: Vec<FileQueue>,
}

/// The ranges of one process: those whose fixed instance among `parallelism` runs on
/// `process` of `processes` (instance `i` runs on process `i % processes`).
#[derive(Clone, Copy, Debug)]
struct ProcessRanges {
    parallelism: usize,
    processes: usize,
    process: usize,
}

impl ProcessRanges {
    fn owns(&self, id: i32) -> bool {
        instance_for_partition(id, self.parallelism) % self.processes == self.process
    }
}

/// One file's ranges not taken yet.
#[derive(Debug)]
struct FileQueue {
    /// The first range of each instance of the process (by its rank there, `instance /
    /// processes`), until it takes it.
    first: Vec<Option<i32>>,
    /// The ids after the set-aside ones, the next not taken first (those of other processes
    /// and finished ones are skipped).
    rest: Range<i32>,
    /// The file, opened to find bounds; closed once every range is taken.
    handle: Option<File>,
    /// The end of the last range taken, as the start of the range after it: found once, so
    /// neighbouring ranges meet even if the file changes under the run (one read per range).
    next_start: Option<(i32, u64)>,
}

impl RangeClaims {
    /// Fills the queues (once per process; later calls keep them) with the ranges of
    /// `layout` whose fixed instance among `parallelism` is on the same process as
    /// `instance`, of `processes` (instance `i` runs on process `i % processes`), resuming
    /// from `resume` (empty: from the start). Returns the ranges that the checkpoint recorded
    /// at their end (as manifests before format version 3 did), which are finished now and
    /// which the caller reports as such (only the call that fills). An error when a position
    /// does not fit the files as they are.
    pub fn fill_once(
        &self,
        layout: &RangeLayout,
        (instance, parallelism, processes): (usize, usize, usize),
        resume: &SourcePositions,
    ) -> Result<Vec<i32>> {
        let mut queues = self.lock();
        if queues.is_some() {
            return Ok(Vec::new());
        }
        let processes = processes.max(1);
        let process = instance % processes;
        let owner = ProcessRanges {
            parallelism,
            processes,
            process,
        };
        let mut handles: Vec<Option<File>> = std::iter::repeat_with(|| None)
            .take(layout.files().len())
            .collect();
        let restored = checked_positions(layout, owner, resume, &mut handles)?;
        let finished = &restored.finished;
        let local_instances = (parallelism.max(1) + processes - 1 - process) / processes;
        // The rank the next range set aside goes to, in turn across files: files with fewer
        // ranges than instances (a compressed or small file is one range) spread over the
        // instances, where each file's first range went to the first instance.
        let mut next_rank = 0;
        let files = handles
            .into_iter()
            .enumerate()
            .map(|(file, handle)| {
                let mut rest = layout.ids_of(file);
                let mut first = vec![None; local_instances];
                let set_aside = rest
                    .by_ref()
                    .filter(|&id| owner.owns(id) && !finished.contains(&id))
                    .take(local_instances);
                for id in set_aside {
                    first[next_rank % local_instances] = Some(id);
                    next_rank += 1;
                }
                FileQueue {
                    first,
                    rest,
                    handle,
                    next_start: None,
                }
            })
            .collect();
        *queues = Some(Queues {
            layout: layout.clone(),
            owner,
            positioned: restored.positioned,
            finished: restored.finished,
            files,
        });
        Ok(restored.ended)
    }

    /// Takes the first range of file `file` of the instance of rank `rank` in its process
    /// (`instance / processes`): the one set aside for it, or if it has none the next one.
    /// An error when its bounds cannot be read.
    pub fn take_first(&self, file: usize, rank: usize) -> Result<Option<ClaimedRange>> {
        self.take_with(file, |queue| {
            queue.first.get_mut(rank).and_then(Option::take)
        })
    }

    /// Takes the next range of file `file` (the earliest not set aside or taken), if any.
    /// An error when its bounds cannot be read.
    pub fn take(&self, file: usize) -> Result<Option<ClaimedRange>> {
        self.take_with(file, |_| None)
    }

    /// Takes `set_aside`'s range of `file`'s queue, or else the next one, and finds its
    /// bounds.
    fn take_with(
        &self,
        file: usize,
        set_aside: impl FnOnce(&mut FileQueue) -> Option<i32>,
    ) -> Result<Option<ClaimedRange>> {
        let mut queues = self.lock();
        let Some(Queues {
            layout,
            owner,
            positioned,
            finished,
            files,
        }) = queues.as_mut()
        else {
            return Ok(None);
        };
        let Some(queue) = files.get_mut(file) else {
            return Ok(None);
        };
        let available = |id: &i32| owner.owns(*id) && !finished.contains(id);
        let Some(id) = set_aside(queue).or_else(|| queue.rest.by_ref().find(available)) else {
            return Ok(None);
        };
        let claimed = match positioned.remove(&id) {
            Some(claimed) => claimed,
            None => {
                let start = queue.next_start.filter(|&(next, _)| next == id);
                let range = layout.range(file, id, start.map(|(_, at)| at), &mut queue.handle)?;
                ClaimedRange {
                    range,
                    resume: None,
                }
            }
        };
        queue.next_start = claimed.range.end.map(|end| (id + 1, end));
        if queue.rest.is_empty() && queue.first.iter().all(Option::is_none) {
            queue.handle = None;
        }
        Ok(Some(claimed))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Queues>> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a process resumes from a checkpoint ([`checked_positions`]).
struct Restored {
    /// Its ranges with a position, and their bounds.
    positioned: BTreeMap<i32, ClaimedRange>,
    /// The checkpoint's finished ranges, with `ended`.
    finished: RangeSet<i32>,
    /// The ranges recorded at their end.
    ended: Vec<i32>,
}

/// The positions of `resume` for ranges of `owner`, each checked against its file (read
/// through `handles`, one per file), with `resume`'s finished ranges; and the ranges recorded
/// at their end (a position at the range's end, or the watermark `MAX`: how manifests before
/// format version 3 recorded a finished range), returned apart and finished. A compressed
/// file's position is checked when its lane skips its stream to it.
fn checked_positions(
    layout: &RangeLayout,
    owner: ProcessRanges,
    resume: &SourcePositions,
    handles: &mut [Option<File>],
) -> Result<Restored> {
    let mut positioned = BTreeMap::new();
    let mut finished = resume.finished.clone();
    let mut ended = Vec::new();
    for (&id, &at) in resume.open.iter().filter(|(id, _)| owner.owns(**id)) {
        let Some(file) = layout.file_of(id) else {
            continue;
        };
        let range = layout.range(file, id, None, &mut handles[file])?;
        if let Some(handle) = &handles[file] {
            check_line_start(handle, &layout.files()[file], &range, at)?;
        }
        let next = u64::try_from(at.next_offset).ok();
        if at.watermark == Watermark::MAX || (next.is_some() && next == range.end) {
            ended.push(id);
            finished.insert(id..id.saturating_add(1));
        } else {
            let resume = Some(at);
            positioned.insert(id, ClaimedRange { range, resume });
        }
    }
    Ok(Restored {
        positioned,
        finished,
        ended,
    })
}

/// Checks that `range`'s checkpointed position `at` lies in it at a line start (a plain
/// file; a compressed one is checked as its stream is skipped to it, in its lane).
fn check_line_start(
    handle: &File,
    file: &InputFile,
    range: &InputRange,
    at: SourceOffset,
) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use weir_checkpoint::SourcePositions;
    use weir_testkit::files::Scratch;

    use super::RangeClaims;
    use crate::file_ranges::{InputRange, RangeLayout};
    use crate::input_file::InputFile;

    /// The layout of a file of `lines` lines of 12 bytes, in a directory of the test's own
    /// (removed when the guard drops: the claims read the file as they are taken, and tests
    /// run in parallel).
    fn layout(lines: usize, range_bytes: u64) -> (RangeLayout, Scratch) {
        let dir = Scratch::new("file-claims");
        let path = dir.path().join("events.jsonl");
        let mut file = std::fs::File::create(&path).expect("temp file");
        for i in 0..lines {
            writeln!(file, "{{\"n\":{i:05}}}").expect("write");
        }
        let input = InputFile::open(&path).expect("the input");
        let layout = RangeLayout::new(vec![input], range_bytes).expect("layout");
        (layout, dir)
    }

    #[test]
    fn ranges_are_taken_in_file_order_once_each() {
        let (layout, _dir) = layout(100, 100);
        let claims = RangeClaims::default();
        claims
            .fill_once(&layout, (1, 2, 1), &SourcePositions::default())
            .expect("filled");
        let again = claims.clone();
        again
            .fill_once(&layout, (0, 2, 1), &SourcePositions::default())
            .expect("kept");
        let firsts = [claims.take_first(0, 0), again.take_first(0, 1)];
        let mut taken: Vec<InputRange> = firsts
            .into_iter()
            .filter_map(|r| r.expect("bounds").map(|c| c.range))
            .collect();
        while let Some(range) = if taken.len().is_multiple_of(2) {
            claims.take(0).expect("bounds").map(|c| c.range)
        } else {
            again.take(0).expect("bounds").map(|c| c.range)
        } {
            taken.push(range);
        }
        let all = layout.ranges_of(0, 1).expect("the layout's ranges");
        assert!(all.len() > 2, "{all:?}");
        assert_eq!(
            taken, all,
            "every range once, in file order, whoever takes it, with the layout's bounds"
        );
        assert_eq!(
            claims.take(1).expect("bounds").map(|c| c.range),
            None,
            "no second file"
        );
    }

    #[test]
    fn a_process_takes_only_the_ranges_of_its_own_instances() {
        let (layout, _dir) = layout(100, 100);
        // 4 instances over 2 processes: instances 0 and 2 run on process 0.
        let process_zero = RangeClaims::default();
        process_zero
            .fill_once(&layout, (2, 4, 2), &SourcePositions::default())
            .expect("filled");
        let process_one = RangeClaims::default();
        process_one
            .fill_once(&layout, (1, 4, 2), &SourcePositions::default())
            .expect("filled");
        let drain = |claims: &RangeClaims| {
            let firsts = (0..2)
                .filter_map(|rank| claims.take_first(0, rank).expect("bounds").map(|c| c.range));
            let firsts: Vec<i32> = firsts.map(|r| r.id).collect();
            let rest = std::iter::from_fn(|| {
                claims
                    .take(0)
                    .expect("bounds")
                    .map(|c| c.range)
                    .map(|r| r.id)
            });
            firsts.into_iter().chain(rest).collect::<Vec<_>>()
        };
        let (zero, one) = (drain(&process_zero), drain(&process_one));
        assert!(zero.iter().all(|id| id % 4 % 2 == 0), "{zero:?}");
        assert!(one.iter().all(|id| id % 4 % 2 == 1), "{one:?}");
        assert_eq!(zero.len() + one.len(), layout.len() as usize);
    }

    #[test]
    fn an_instance_that_starts_last_still_reads_its_first_range() {
        let (layout, _dir) = layout(100, 100);
        let claims = RangeClaims::default();
        claims
            .fill_once(&layout, (0, 3, 1), &SourcePositions::default())
            .expect("filled");
        // Instances 0 and 1 take their first ranges and then every range left.
        let mut early = vec![
            claims.take_first(0, 0).expect("bounds").map(|c| c.range),
            claims.take_first(0, 1).expect("bounds").map(|c| c.range),
        ];
        early.extend(std::iter::from_fn(|| {
            claims.take(0).expect("bounds").map(|c| c.range).map(Some)
        }));
        let late = claims
            .take_first(0, 2)
            .expect("bounds")
            .map(|c| c.range)
            .expect("instance 2's range was set aside");
        assert_eq!(late.id, 2, "the third range of the file");
        let mut ids: Vec<i32> = early.into_iter().flatten().map(|r| r.id).collect();
        ids.push(late.id);
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..layout.len()).collect::<Vec<_>>(),
            "every range once"
        );
        assert_eq!(
            claims.take_first(0, 2).expect("bounds").map(|c| c.range),
            None,
            "taken once"
        );
    }

    #[test]
    fn a_restored_run_skips_finished_ranges_and_resumes_the_others_at_their_positions() {
        use std::collections::BTreeMap;

        use weir_checkpoint::SourceOffset;
        use weir_features::vocab::Watermark;

        let (layout, _dir) = layout(100, 100);
        let all = layout.ranges_of(0, 1).expect("the layout's ranges");
        let at = |next_offset: u64, watermark| SourceOffset {
            next_offset: next_offset as i64,
            watermark,
        };
        // Range 0 recorded at its end (before manifest format 3), range 1 at its second line
        // (12 bytes a line), range 2 finished.
        let ended_at = at(all[0].end.expect("plain"), Watermark::MAX);
        let second_line = at(all[1].start + 12, Watermark(7));
        let mut resume = SourcePositions::open(BTreeMap::from([(0, ended_at), (1, second_line)]));
        resume.finish(2);
        let claims = RangeClaims::default();
        let ended = claims
            .fill_once(&layout, (0, 2, 1), &resume)
            .expect("filled");
        assert_eq!(ended, vec![0]);
        let again = claims.clone();
        assert_eq!(
            again.fill_once(&layout, (1, 2, 1), &resume).expect("kept"),
            Vec::<i32>::new(),
            "reported by the instance that filled the queues"
        );
        let first = claims.take_first(0, 0).expect("bounds").expect("a range");
        assert_eq!((first.range, first.resume), (all[1], Some(second_line)));
        let second = again.take_first(0, 1).expect("bounds").expect("a range");
        assert_eq!((second.range, second.resume), (all[3], None));
        let rest: Vec<i32> = std::iter::from_fn(|| claims.take(0).expect("bounds"))
            .map(|c| c.range.id)
            .collect();
        assert_eq!(rest, (4..layout.len()).collect::<Vec<_>>());

        // A position that is not at a line start is refused when the queues are filled.
        let mid_line = at(all[1].start + 13, Watermark(7));
        let refused = RangeClaims::default()
            .fill_once(
                &layout,
                (0, 1, 1),
                &SourcePositions::open(BTreeMap::from([(1, mid_line)])),
            )
            .expect_err("a position mid-line");
        assert!(
            refused.to_string().contains("not a line start"),
            "{refused}"
        );
    }

    #[test]
    fn files_of_one_range_each_are_set_aside_for_the_instances_in_turn() {
        let dir = Scratch::new("file-claims-small");
        let inputs: Vec<InputFile> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("part-{i}.jsonl"));
                std::fs::write(&path, "{\"n\":1}\n{\"n\":2}\n").expect("temp file");
                InputFile::open(&path).expect("the input")
            })
            .collect();
        let layout = RangeLayout::new(inputs, 1 << 20).expect("layout");
        assert_eq!(layout.len(), 3, "one range per file");
        let claims = RangeClaims::default();
        claims
            .fill_once(&layout, (0, 2, 1), &SourcePositions::default())
            .expect("filled");
        let firsts = |rank| -> Vec<i32> {
            (0..3)
                .filter_map(|file| claims.take_first(file, rank).expect("bounds"))
                .map(|c| c.range.id)
                .collect()
        };
        assert_eq!(
            firsts(0),
            vec![0, 2],
            "files 0 and 2 for the first instance"
        );
        assert_eq!(firsts(1), vec![1], "file 1 for the second, not none");
    }
}
