//! Where a source resumes: each partition it is reading at its next offset and watermark
//! ([`SourceOffset`]), and the partitions it has read to their end as spans of ids
//! ([`SourcePositions::finished`]).
//!
//! Pipeline position: a source instance reports its [`SourcePositions`] at every checkpoint
//! tick, the committer merges the instances' reports ([`SourcePositions::merge`]) into the
//! epoch's manifest ([`crate::Manifest::set_positions`]), and a restored source reads them
//! back ([`crate::Manifest::positions_of`]).
//!
//! Why finished partitions are spans: a file source's byte ranges are its partitions, ~200 000
//! of them for 100 GB at the default 512 KiB. With a position per finished range, every
//! manifest grew with the input read so far (6.8 MB and ~33 ms to merge and encode at
//! 100 000 ranges), so a run's manifests together grew with the square of its input. A
//! finished range resumes at its end, which the source knows from its layout, so the
//! manifest keeps finished partitions as spans of ids (`[[0, 99998]]`) and a position only
//! for the few being read.

use std::collections::BTreeMap;

use rangemap::RangeSet;
use serde::{Deserialize, Serialize};

use weir_features::vocab::Watermark;

/// Where one source partition resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceOffset {
    /// The first offset not yet reflected in the state (seek here on restore).
    pub next_offset: i64,
    /// The partition's watermark at the epoch.
    pub watermark: Watermark,
}

/// One source's resume positions (serialized only between processes, as a checkpoint part).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcePositions {
    /// Partitions started and not known to be finished: where each resumes. Partitions in
    /// neither this nor `finished` start from their beginning.
    pub open: BTreeMap<i32, SourceOffset>,
    /// Partitions read to their end (half-open spans of ids), which a restore does not read
    /// again; where each ended is for the source to know (a file range's end). Only sources
    /// whose partitions end report any: a Kafka partition's position is always open.
    pub finished: RangeSet<i32>,
}

impl SourcePositions {
    /// Positions of open partitions only.
    pub fn open(open: BTreeMap<i32, SourceOffset>) -> Self {
        SourcePositions {
            open,
            finished: RangeSet::new(),
        }
    }

    /// True when no partition has a position and none is finished (a run from the start).
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.finished.is_empty()
    }

    /// Records `partition` as read to its end.
    pub fn finish(&mut self, partition: i32) {
        self.open.remove(&partition);
        self.finished.insert(partition..partition.saturating_add(1));
    }

    /// Whether `partition` was read to its end.
    pub fn is_finished(&self, partition: i32) -> bool {
        self.finished.contains(&partition)
    }

    /// The lowest and the highest partition id mentioned, if any (to check them against the
    /// source's partitions).
    pub fn id_bounds(&self) -> Option<(i32, i32)> {
        let open = self.open.keys();
        let lows = open.clone().next().copied();
        let highs = open.last().copied();
        let first = self.finished.iter().next().map(|span| span.start);
        let last = self.finished.iter().next_back().map(|span| span.end - 1);
        let low = lows.into_iter().chain(first).min()?;
        let high = highs.into_iter().chain(last).max()?;
        Some((low, high))
    }

    /// Adds a source instance's report: its finished partitions join the finished ones (a
    /// partition never starts again once finished), its open positions replace earlier ones.
    pub fn merge(&mut self, report: SourcePositions) {
        for span in report.finished.iter() {
            self.finished.insert(span.clone());
        }
        self.open.extend(report.open);
        if !self.finished.is_empty() {
            let finished = &self.finished;
            self.open
                .retain(|partition, _| !finished.contains(partition));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(next_offset: i64) -> SourceOffset {
        SourceOffset {
            next_offset,
            watermark: Watermark(next_offset),
        }
    }

    #[test]
    fn finished_partitions_coalesce_into_spans_and_leave_the_open_ones() {
        let mut positions = SourcePositions::open(BTreeMap::from([(3, at(30)), (7, at(70))]));
        for partition in [0, 1, 2, 3, 5] {
            positions.finish(partition);
        }
        let spans: Vec<_> = positions.finished.iter().cloned().collect();
        assert_eq!(spans, vec![0..4, 5..6]);
        assert_eq!(positions.open, BTreeMap::from([(7, at(70))]));
        assert!(positions.is_finished(2) && !positions.is_finished(4));
        assert_eq!(positions.id_bounds(), Some((0, 7)));
    }

    #[test]
    fn a_merged_report_finishes_partitions_an_earlier_report_had_open() {
        let mut merged = SourcePositions::open(BTreeMap::from([(0, at(5)), (1, at(9))]));
        let mut later = SourcePositions::open(BTreeMap::from([(2, at(1))]));
        later.finish(0);
        merged.merge(later);
        assert_eq!(merged.open, BTreeMap::from([(1, at(9)), (2, at(1))]));
        assert!(merged.is_finished(0));
        // A report from before the partition finished (another instance's) cannot reopen it.
        merged.merge(SourcePositions::open(BTreeMap::from([(0, at(3))])));
        assert!(!merged.open.contains_key(&0));
        assert_eq!(merged.id_bounds(), Some((0, 2)));
        assert_eq!(SourcePositions::default().id_bounds(), None);
    }

    #[test]
    fn finished_spans_serialize_as_pairs() -> serde_json::Result<()> {
        let mut positions = SourcePositions::default();
        for partition in 0..100_000 {
            positions.finish(partition);
        }
        positions.finish(100_001);
        let json = serde_json::to_string(&positions.finished)?;
        assert_eq!(json, "[[0,100000],[100001,100002]]");
        let back: RangeSet<i32> = serde_json::from_str(&json)?;
        assert_eq!(back, positions.finished);
        Ok(())
    }
}
