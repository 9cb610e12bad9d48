//! Which file source instance reads which range, in a run that starts from the beginning of
//! its input ([`crate::file_source`]): the ranges ([`crate::file_ranges`]) that belong to the
//! instances of this process go into one queue per file, and an instance takes the next
//! range of a file when it finishes its current one. So the instances of a process read
//! neighbouring ranges for the whole run, whatever their speeds: the faster one reads more
//! ranges instead of running ahead in the file. With a fixed assignment (`r % p == i`) a
//! faster instance drifts ahead range after range, and the combined watermark (the slowest
//! instance's) held every window of the ranges between them open: in run F, 2 instances
//! held ~11 000 open slots each, where one instance reading the whole file holds ~2 000, and
//! the instance with one range more than the other finished last (BENCHMARKS.md, fix 24).
//!
//! Ranges are taken in file order, so every range not yet taken lies after every range
//! being read, and an instance's own ranges are in file order too: the watermark rules of
//! [`crate::file_source`] hold as with the fixed assignment. A range's checkpoint position is
//! sent by the instance that took it. A restored run assigns its ranges the fixed way (their
//! positions are the checkpoint's, whoever read them), as it always did.
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

use std::fs::File;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use weir_features::ownership::instance_for_partition;

use crate::error::Result;
use crate::file_ranges::{InputRange, RangeLayout};

/// The queues of one file source in one process: clone it into every worker's
/// [`crate::file_source::FileSourceConfig`] (one value per process, as
/// [`crate::source_alignment::SourceAlignment`]); workers that each made their own would
/// each read every range.
#[derive(Clone, Debug, Default)]
pub struct RangeClaims {
    /// The ranges not taken yet; `None` until the first instance of the process opens.
    queues: Arc<Mutex<Option<Queues>>>,
}

/// The ranges of this process not taken yet, as ids: a range's bounds are found when it is
/// taken (two short reads), not all when the run starts. With every range's bounds found up
/// front, a 100 GB input at 512 KiB took ~400 000 reads before its first record (scattered
/// over the file: slow on a cold disk) and ~40 bytes per range for the run.
#[derive(Debug)]
struct Queues {
    layout: RangeLayout,
    /// Which ids belong to this process.
    owner: ProcessRanges,
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
    /// are skipped).
    rest: Range<i32>,
    /// The file, opened to find bounds at the first range taken.
    handle: Option<File>,
}

impl RangeClaims {
    /// Fills the queues (once per process; later calls keep them) with the ranges of
    /// `layout` whose fixed instance among `parallelism` is on the same process as
    /// `instance`, of `processes` (instance `i` runs on process `i % processes`).
    pub fn fill_once(
        &self,
        layout: &RangeLayout,
        (instance, parallelism, processes): (usize, usize, usize),
    ) {
        let mut queues = self.lock();
        if queues.is_some() {
            return;
        }
        let processes = processes.max(1);
        let process = instance % processes;
        let owner = ProcessRanges {
            parallelism,
            processes,
            process,
        };
        let local_instances = (parallelism.max(1) + processes - 1 - process) / processes;
        let files = (0..layout.files().len())
            .map(|file| {
                let mut rest = layout.ids_of(file);
                let first: Vec<Option<i32>> = rest
                    .by_ref()
                    .filter(|&id| owner.owns(id))
                    .take(local_instances)
                    .map(Some)
                    .collect();
                FileQueue {
                    first,
                    rest,
                    handle: None,
                }
            })
            .collect();
        *queues = Some(Queues {
            layout: layout.clone(),
            owner,
            files,
        });
    }

    /// Takes the first range of file `file` of the instance of rank `rank` in its process
    /// (`instance / processes`): the one set aside for it, or if it has none the next one.
    /// An error when its bounds cannot be read.
    pub fn take_first(&self, file: usize, rank: usize) -> Result<Option<InputRange>> {
        self.take_with(file, |queue| {
            queue.first.get_mut(rank).and_then(Option::take)
        })
    }

    /// Takes the next range of file `file` (the earliest not set aside or taken), if any.
    /// An error when its bounds cannot be read.
    pub fn take(&self, file: usize) -> Result<Option<InputRange>> {
        self.take_with(file, |_| None)
    }

    /// Takes `set_aside`'s range of `file`'s queue, or else the next one, and finds its
    /// bounds.
    fn take_with(
        &self,
        file: usize,
        set_aside: impl FnOnce(&mut FileQueue) -> Option<i32>,
    ) -> Result<Option<InputRange>> {
        let mut queues = self.lock();
        let Some(Queues {
            layout,
            owner,
            files,
        }) = queues.as_mut()
        else {
            return Ok(None);
        };
        let Some(queue) = files.get_mut(file) else {
            return Ok(None);
        };
        let id = set_aside(queue).or_else(|| queue.rest.by_ref().find(|&id| owner.owns(id)));
        id.map(|id| layout.range(file, id, &mut queue.handle))
            .transpose()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Queues>> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::RangeClaims;
    use crate::file_ranges::{InputRange, RangeLayout};
    use crate::input_file::InputFile;

    fn layout(lines: usize, range_bytes: u64) -> RangeLayout {
        let path = std::env::temp_dir().join(format!(
            "weir-file-claims-{}-{lines}.jsonl",
            std::process::id()
        ));
        let mut file = std::fs::File::create(&path).expect("temp file");
        for i in 0..lines {
            writeln!(file, "{{\"n\":{i:05}}}").expect("write");
        }
        let input = InputFile::open(&path).expect("the input");
        RangeLayout::new(vec![input], range_bytes).expect("layout")
    }

    #[test]
    fn ranges_are_taken_in_file_order_once_each() {
        let layout = layout(100, 100);
        let claims = RangeClaims::default();
        claims.fill_once(&layout, (1, 2, 1));
        let again = claims.clone();
        again.fill_once(&layout, (0, 2, 1));
        let firsts = [claims.take_first(0, 0), again.take_first(0, 1)];
        let mut taken: Vec<InputRange> = firsts
            .into_iter()
            .filter_map(|r| r.expect("bounds"))
            .collect();
        while let Some(range) = if taken.len().is_multiple_of(2) {
            claims.take(0).expect("bounds")
        } else {
            again.take(0).expect("bounds")
        } {
            taken.push(range);
        }
        let all = layout.ranges_of(0, 1).expect("the layout's ranges");
        assert!(all.len() > 2, "{all:?}");
        assert_eq!(
            taken, all,
            "every range once, in file order, whoever takes it, with the layout's bounds"
        );
        assert_eq!(claims.take(1).expect("bounds"), None, "no second file");
    }

    #[test]
    fn a_process_takes_only_the_ranges_of_its_own_instances() {
        let layout = layout(100, 100);
        // 4 instances over 2 processes: instances 0 and 2 run on process 0.
        let process_zero = RangeClaims::default();
        process_zero.fill_once(&layout, (2, 4, 2));
        let process_one = RangeClaims::default();
        process_one.fill_once(&layout, (1, 4, 2));
        let drain = |claims: &RangeClaims| {
            let firsts = (0..2).filter_map(|rank| claims.take_first(0, rank).expect("bounds"));
            let firsts: Vec<i32> = firsts.map(|r| r.id).collect();
            let rest = std::iter::from_fn(|| claims.take(0).expect("bounds").map(|r| r.id));
            firsts.into_iter().chain(rest).collect::<Vec<_>>()
        };
        let (zero, one) = (drain(&process_zero), drain(&process_one));
        assert!(zero.iter().all(|id| id % 4 % 2 == 0), "{zero:?}");
        assert!(one.iter().all(|id| id % 4 % 2 == 1), "{one:?}");
        assert_eq!(zero.len() + one.len(), layout.len() as usize);
    }

    #[test]
    fn an_instance_that_starts_last_still_reads_its_first_range() {
        let layout = layout(100, 100);
        let claims = RangeClaims::default();
        claims.fill_once(&layout, (0, 3, 1));
        // Instances 0 and 1 take their first ranges and then every range left.
        let mut early = vec![
            claims.take_first(0, 0).expect("bounds"),
            claims.take_first(0, 1).expect("bounds"),
        ];
        early.extend(std::iter::from_fn(|| {
            claims.take(0).expect("bounds").map(Some)
        }));
        let late = claims
            .take_first(0, 2)
            .expect("bounds")
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
        assert_eq!(claims.take_first(0, 2).expect("bounds"), None, "taken once");
    }
}
