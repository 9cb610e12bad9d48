//! Event-time progress (DESIGN.md §2): per-partition watermarks inside a source instance,
//! the report each source instance sends once per tick, and the combination of all reports
//! that a window instance fires on. Pure logic with an injected clock, so idleness is testable.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::vocab::{EventTime, Watermark};

/// What a source instance says about its event-time progress at the end of a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceProgress {
    /// All records still to come are at or after this watermark (`Watermark::MAX` = finished).
    Active(Watermark),
    /// All partitions are idle (caught up and quiet): leave this source out of the minimum.
    Idle,
}

/// One source instance's report for one tick, broadcast to every window instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkReport {
    /// Index of the reporting source instance (0..source parallelism).
    pub source: u32,
    /// Its progress.
    pub progress: SourceProgress,
}

/// Watermark state of one partition that is not finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PartitionState {
    max_event_time: Option<EventTime>,
    last_record_ms: u64,
    caught_up: bool,
}

impl PartitionState {
    /// Caught up and quiet for `idle_timeout_ms` at `now_ms`.
    fn is_idle(&self, now_ms: u64, idle_timeout_ms: u64) -> bool {
        self.caught_up && now_ms.saturating_sub(self.last_record_ms) >= idle_timeout_ms
    }
}

/// Per-partition watermarks of one source instance.
#[derive(Clone, Debug)]
pub struct PartitionWatermarks {
    max_out_of_orderness_ms: i64,
    idle_timeout_ms: u64,
    /// The partitions not finished: what [`PartitionWatermarks::progress`] reads each tick.
    partitions: BTreeMap<i32, PartitionState>,
    /// The finished ones (watermark `MAX`, caught up, never idle), apart, so that a tick's
    /// progress scans only the partitions still read (a Kafka source's, which a bounded run
    /// finishes). A file source's ranges are not kept here: see
    /// [`PartitionWatermarks::retire`].
    finished: BTreeSet<i32>,
}

impl PartitionWatermarks {
    /// A tracker with the job's bounded out-of-orderness and idle timeout.
    pub fn new(max_out_of_orderness_ms: i64, idle_timeout_ms: u64) -> Self {
        PartitionWatermarks {
            max_out_of_orderness_ms,
            idle_timeout_ms,
            partitions: BTreeMap::new(),
            finished: BTreeSet::new(),
        }
    }

    /// Starts tracking `partition` at processing time `now_ms`.
    pub fn assign(&mut self, partition: i32, now_ms: u64) {
        self.finished.remove(&partition);
        self.partitions.insert(
            partition,
            PartitionState {
                max_event_time: None,
                last_record_ms: now_ms,
                caught_up: false,
            },
        );
    }

    /// Restores `partition`'s event-time progress from the watermark a checkpoint recorded for
    /// it (call after [`PartitionWatermarks::assign`]).
    pub fn resume(&mut self, partition: i32, watermark: Watermark) {
        let ooo = self.max_out_of_orderness_ms;
        if let Some(p) = self.partitions.get_mut(&partition) {
            if watermark != Watermark::MIN && watermark != Watermark::MAX {
                p.max_event_time = Some(watermark.0.saturating_add(ooo));
            }
        }
    }

    /// Records that `partition` delivered a record with event time `ts` at `now_ms`.
    #[inline]
    pub fn observe(&mut self, partition: i32, ts: EventTime, now_ms: u64) {
        if let Some(p) = self.partitions.get_mut(&partition) {
            p.max_event_time = Some(p.max_event_time.map_or(ts, |m| m.max(ts)));
            p.last_record_ms = now_ms;
        }
    }

    /// Records that a (bad) record arrived on `partition`: it proves the partition is not idle
    /// without moving its event time.
    pub fn touch(&mut self, partition: i32, now_ms: u64) {
        if let Some(p) = self.partitions.get_mut(&partition) {
            p.last_record_ms = now_ms;
        }
    }

    /// Sets whether `partition` has consumed everything up to its high watermark.
    pub fn set_caught_up(&mut self, partition: i32, caught_up: bool) {
        if let Some(p) = self.partitions.get_mut(&partition) {
            p.caught_up = caught_up;
        }
    }

    /// Marks `partition` as finished (bounded input fully read): it no longer holds anything.
    pub fn finish(&mut self, partition: i32) {
        if self.partitions.remove(&partition).is_some() {
            self.finished.insert(partition);
        }
    }

    /// Stops tracking `partition`, finished, without remembering it: for a source that knows
    /// its own finished partitions. A file source's ranges are its partitions, ~800 000 for
    /// 100 GB at the default `[source] range_bytes`, nearly all finished by the end: a set
    /// of them grew with the input read (~10 bytes per range). Afterwards the partition has
    /// no watermark (`None`), where [`PartitionWatermarks::finish`] reports `MAX`.
    pub fn retire(&mut self, partition: i32) {
        self.partitions.remove(&partition);
    }

    /// Whether every assigned partition is finished (true for no partitions).
    pub fn all_finished(&self) -> bool {
        self.partitions.is_empty()
    }

    /// The watermark of one partition (`Watermark::MIN` before its first record, `MAX` once
    /// finished).
    pub fn partition_watermark(&self, partition: i32) -> Option<Watermark> {
        match self.partitions.get(&partition) {
            Some(p) => Some(self.watermark_of(p)),
            None => self.finished.contains(&partition).then_some(Watermark::MAX),
        }
    }

    /// Whether `partition` is caught up (read to its end since its last record) and whether
    /// it is idle at `now_ms` (left out of [`PartitionWatermarks::progress`]); `None` for a
    /// partition not assigned.
    pub fn partition_state(&self, partition: i32, now_ms: u64) -> Option<(bool, bool)> {
        match self.partitions.get(&partition) {
            Some(p) => Some((p.caught_up, self.is_idle(p, now_ms))),
            None => self.finished.contains(&partition).then_some((true, false)),
        }
    }

    fn watermark_of(&self, p: &PartitionState) -> Watermark {
        p.max_event_time.map_or(Watermark::MIN, |m| {
            Watermark::bounded_out_of_orderness(m, self.max_out_of_orderness_ms)
        })
    }

    fn is_idle(&self, p: &PartitionState, now_ms: u64) -> bool {
        p.is_idle(now_ms, self.idle_timeout_ms)
    }

    /// Leaves `paused_ms` of processing time (ending at `now_ms`) out of the quiet time of
    /// every partition that was not idle when that stretch began: while the source reads nothing
    /// (backpressure), a partition's records may be waiting unread, so the pause must not make
    /// it idle; a partition already idle stays idle. Call it for each stretch of a pause.
    pub fn exclude_paused(&mut self, paused_ms: u64, now_ms: u64) {
        let idle_timeout_ms = self.idle_timeout_ms;
        let paused_at = now_ms.saturating_sub(paused_ms);
        for p in self.partitions.values_mut() {
            if !p.is_idle(paused_at, idle_timeout_ms) {
                p.last_record_ms = p.last_record_ms.saturating_add(paused_ms).min(now_ms);
            }
        }
    }

    /// This instance's progress at `now_ms`: the minimum over partitions that are neither idle
    /// nor finished; `Idle` when every unfinished partition is idle; `Active(MAX)` when all are
    /// finished (vacuously so with no partition: a bounded instance with nothing to read; an
    /// unbounded reader must report `Idle` itself then, as partitions may come later).
    pub fn progress(&self, now_ms: u64) -> SourceProgress {
        if self.all_finished() {
            return SourceProgress::Active(Watermark::MAX);
        }
        self.partitions
            .values()
            .filter(|p| !self.is_idle(p, now_ms))
            .map(|p| self.watermark_of(p))
            .min()
            .map_or(SourceProgress::Idle, SourceProgress::Active)
    }
}

/// Combines the latest report of every source instance into the operator's watermark.
///
/// Before every source has reported, the watermark is `MIN`. Idle sources are left out; when
/// all are idle the watermark holds. The result never goes backwards.
#[derive(Clone, Debug)]
pub struct WatermarkCombiner {
    latest: Vec<Option<SourceProgress>>,
    current: Watermark,
}

impl WatermarkCombiner {
    /// A combiner for `sources` source instances.
    pub fn new(sources: usize) -> Self {
        WatermarkCombiner {
            latest: vec![None; sources],
            current: Watermark::MIN,
        }
    }

    /// A combiner for `sources` source instances that starts from `watermark` (restored from
    /// a checkpoint) instead of [`Watermark::MIN`]: until every source has reported again,
    /// and afterwards as a floor, since a watermark never goes backwards.
    pub fn resumed(sources: usize, watermark: Watermark) -> Self {
        WatermarkCombiner {
            latest: vec![None; sources],
            current: watermark,
        }
    }

    /// Takes a report into account (reports from unknown instances are ignored).
    pub fn observe(&mut self, report: &WatermarkReport) {
        if let Some(slot) = self.latest.get_mut(report.source as usize) {
            *slot = Some(report.progress);
        }
    }

    /// The watermark after all reports observed so far.
    pub fn watermark(&mut self) -> Watermark {
        if self.latest.iter().any(Option::is_none) {
            return self.current;
        }
        let active = self.latest.iter().filter_map(|p| match p {
            Some(SourceProgress::Active(w)) => Some(*w),
            _ => None,
        });
        if let Some(min) = active.min() {
            self.current = self.current.max(min);
        }
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lagging_partition_holds_the_watermark_and_idle_one_does_not() {
        let mut w = PartitionWatermarks::new(1_000, 5_000);
        w.assign(0, 0);
        w.assign(1, 0);
        w.observe(0, 10_000, 100);
        // Partition 1 has seen nothing and is not caught up: holds at MIN.
        assert_eq!(w.progress(10_000), SourceProgress::Active(Watermark::MIN));
        // Caught up but not yet quiet for the idle timeout: still holds.
        w.set_caught_up(1, true);
        assert_eq!(w.progress(4_000), SourceProgress::Active(Watermark::MIN));
        // Quiet for the timeout and caught up: idle, left out.
        assert_eq!(w.progress(5_000), SourceProgress::Active(Watermark(9_000)));
        // Lagging again: counts again, however long it was quiet.
        w.set_caught_up(1, false);
        assert_eq!(w.progress(60_000), SourceProgress::Active(Watermark::MIN));
    }

    #[test]
    fn finished_partitions_release_and_all_idle_is_idle() {
        let mut w = PartitionWatermarks::new(0, 10);
        w.assign(3, 0);
        w.set_caught_up(3, true);
        assert_eq!(w.progress(20), SourceProgress::Idle);
        w.finish(3);
        assert_eq!(w.progress(20), SourceProgress::Active(Watermark::MAX));
    }

    #[test]
    fn combiner_waits_for_all_sources_ignores_idle_and_is_monotonic() {
        let mut c = WatermarkCombiner::new(2);
        let report = |source, progress| WatermarkReport { source, progress };
        c.observe(&report(0, SourceProgress::Active(Watermark(50))));
        assert_eq!(c.watermark(), Watermark::MIN);
        c.observe(&report(1, SourceProgress::Active(Watermark(20))));
        assert_eq!(c.watermark(), Watermark(20));
        c.observe(&report(1, SourceProgress::Idle));
        assert_eq!(c.watermark(), Watermark(50));
        c.observe(&report(1, SourceProgress::Active(Watermark(10))));
        assert_eq!(c.watermark(), Watermark(50), "never goes backwards");
        c.observe(&report(0, SourceProgress::Idle));
        c.observe(&report(1, SourceProgress::Idle));
        assert_eq!(c.watermark(), Watermark(50), "all idle holds");
    }

    #[test]
    fn a_resumed_combiner_starts_at_its_restored_watermark_and_never_goes_below() {
        let mut c = WatermarkCombiner::resumed(2, Watermark(40));
        let report = |source, progress| WatermarkReport { source, progress };
        assert_eq!(c.watermark(), Watermark(40), "before any report");
        c.observe(&report(0, SourceProgress::Active(Watermark(30))));
        c.observe(&report(1, SourceProgress::Active(Watermark(35))));
        assert_eq!(c.watermark(), Watermark(40));
        c.observe(&report(0, SourceProgress::Active(Watermark(60))));
        c.observe(&report(1, SourceProgress::Active(Watermark(45))));
        assert_eq!(c.watermark(), Watermark(45));
    }

    #[test]
    fn a_pause_does_not_make_a_partition_idle_and_an_idle_one_stays_idle() {
        let mut w = PartitionWatermarks::new(0, 5_000);
        w.assign(0, 0);
        w.assign(1, 0);
        w.observe(0, 100, 1_000);
        w.observe(1, 200, 0);
        w.set_caught_up(0, true);
        w.set_caught_up(1, true);
        // Partition 1 is idle at 5 000; partition 0 is not (quiet for 4 000).
        assert_eq!(w.progress(5_000), SourceProgress::Active(Watermark(100)));
        // Paused from 5 000 to 20 000, in stretches: partition 0's records may be waiting,
        // so it must still hold the watermark; partition 1 stays idle.
        for now in (6_000..=20_000).step_by(1_000) {
            w.exclude_paused(1_000, now);
        }
        assert_eq!(w.progress(20_000), SourceProgress::Active(Watermark(100)));
        // Reading again: partition 0 becomes idle after its unpaused quiet time (4 000 before
        // the pause) reaches the timeout.
        assert_eq!(w.progress(20_999), SourceProgress::Active(Watermark(100)));
        assert_eq!(w.progress(21_000), SourceProgress::Idle);
    }

    #[test]
    fn a_finished_partition_is_at_max_and_caught_up_until_it_is_assigned_again() {
        let mut w = PartitionWatermarks::new(0, 10);
        assert_eq!(w.partition_watermark(4), None);
        assert_eq!(w.partition_state(4, 0), None);
        w.finish(4);
        assert_eq!(
            w.partition_watermark(4),
            None,
            "never assigned: not finished either"
        );
        w.assign(4, 0);
        w.observe(4, 30, 0);
        w.finish(4);
        assert_eq!(w.partition_watermark(4), Some(Watermark::MAX));
        assert_eq!(w.partition_state(4, 1_000), Some((true, false)));
        assert!(w.all_finished());
        w.observe(4, 5, 1_000);
        assert_eq!(w.progress(1_000), SourceProgress::Active(Watermark::MAX));
        w.assign(4, 1_000);
        assert!(!w.all_finished());
        assert_eq!(w.partition_watermark(4), Some(Watermark::MIN));
        assert_eq!(w.progress(1_000), SourceProgress::Active(Watermark::MIN));
    }

    #[test]
    fn a_retired_partition_is_forgotten_and_holds_nothing_back() {
        let mut w = PartitionWatermarks::new(0, u64::MAX);
        w.assign(0, 0);
        w.assign(1, 0);
        w.observe(0, 5, 0);
        w.observe(1, 9, 0);
        assert_eq!(w.progress(0), SourceProgress::Active(Watermark(5)));
        w.retire(0);
        assert_eq!(w.progress(0), SourceProgress::Active(Watermark(9)));
        assert_eq!(w.partition_watermark(0), None, "not kept as finished");
        assert_eq!(w.partition_state(0, 0), None);
        w.retire(1);
        assert!(w.all_finished());
        assert_eq!(w.progress(0), SourceProgress::Active(Watermark::MAX));
    }

    #[test]
    fn finished_and_idle_partitions_together_are_idle_not_the_end() {
        let mut w = PartitionWatermarks::new(0, 10);
        w.assign(0, 0);
        w.assign(1, 0);
        w.finish(0);
        w.set_caught_up(1, true);
        assert_eq!(w.progress(20), SourceProgress::Idle);
        w.observe(1, 7, 20);
        assert_eq!(w.progress(25), SourceProgress::Active(Watermark(7)));
    }
}
