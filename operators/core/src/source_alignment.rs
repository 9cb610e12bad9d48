//! Keeps the source instances of one process within a few ticks of each other (the source
//! operator, [`crate::source_operator`]). A window instance applies a tick's records only once
//! every source has closed that tick (DESIGN.md §2), so while one worker is busy (firing,
//! encoding rows) the records a faster source reads for later ticks wait in the window
//! operators' stash: in run F that was up to ~50 000 events (~13 MB) per worker with no
//! bound. A source therefore reads nothing while it is more than [`ALIGNMENT_SLACK_MS`] of
//! ticks ahead of another source instance of its process; it still closes its own ticks, so
//! progress goes on. The slack keeps a source from stopping at every tick its peer has not
//! closed yet: with none, a features run's sources (2 ms ticks) each sat idle waiting for
//! the other (run F, BENCHMARKS.md fix 25: 3-9 % more wall time than with 5 ticks of slack,
//! for 6-19 MB less memory). One tick of a features run (2 ms) is enough since the workers
//! got faster, and it bounds what a busy worker's peer reads ahead to a fifth (fix 77:
//! hopping's 2-worker peak memory 37-39 MB instead of 38-40 at the median, 41-48 instead of
//! 48-57 at the highest, at the same CPU and wall time). Only instances of one process are
//! compared: hosts' clocks disagree, and a tick measured against another host's clock would
//! hold a source back for as long as the skew lasts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use weir_features::vocab::Tick;

/// How far, in wall-clock time, a source may read ahead of the slowest source instance of its
/// process: whole ticks of this (one of a features run's 2 ms ticks; none at ticks longer
/// than it, such as a live job's 100 ms, where a source reads within the slowest's tick).
pub const ALIGNMENT_SLACK_MS: u64 = 2;

/// The current tick of every running source instance of this process.
#[derive(Clone, Debug, Default)]
pub struct SourceAlignment {
    ticks: Arc<Mutex<BTreeMap<u32, Tick>>>,
    /// Ticks a source may be ahead of the slowest one.
    slack: Tick,
}

impl SourceAlignment {
    /// The alignment of the sources of a job whose ticks are `tick_ms` long: a source may be
    /// [`ALIGNMENT_SLACK_MS`] of whole ticks ahead of the slowest.
    pub fn for_tick(tick_ms: u64) -> Self {
        SourceAlignment {
            ticks: Arc::default(),
            slack: ALIGNMENT_SLACK_MS / tick_ms.max(1),
        }
    }

    /// Registers source instance `instance` (in tick 0, so it holds nobody back until it
    /// reports its first tick); it leaves when the returned handle is dropped (its source
    /// finished or stopped).
    pub fn join(&self, instance: u32) -> AlignedSource {
        self.lock().insert(instance, 0);
        AlignedSource {
            alignment: self.clone(),
            instance,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Tick>> {
        self.ticks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One running source instance's place in its process's [`SourceAlignment`].
#[derive(Debug)]
pub struct AlignedSource {
    alignment: SourceAlignment,
    instance: u32,
}

impl AlignedSource {
    /// Records that this instance is in `tick` and says whether it should read now: not
    /// while another instance of the process is more than the slack behind it (one that has
    /// not yet reported a tick, in tick 0, holds nobody back).
    pub fn may_read(&self, tick: Tick) -> bool {
        let mut ticks = self.alignment.lock();
        ticks.insert(self.instance, tick);
        ticks
            .values()
            .filter(|&&t| t > 0)
            .min()
            .is_none_or(|&slowest| tick <= slowest + self.alignment.slack)
    }
}

impl Drop for AlignedSource {
    fn drop(&mut self) {
        self.alignment.lock().remove(&self.instance);
    }
}

#[cfg(test)]
mod tests {
    use super::SourceAlignment;

    #[test]
    fn a_source_ahead_of_another_waits_until_it_catches_up() {
        let alignment = SourceAlignment::default();
        let (a, b) = (alignment.join(0), alignment.join(1));
        assert!(a.may_read(10), "b has not reported a tick yet");
        assert!(b.may_read(10));
        assert!(a.may_read(10));
        assert!(!a.may_read(11), "b is still in tick 10");
        assert!(b.may_read(11));
        assert!(a.may_read(11));
        assert!(b.may_read(10) && !a.may_read(12));
    }

    #[test]
    fn a_source_may_read_up_to_the_slack_ahead() {
        let alignment = SourceAlignment::for_tick(2);
        let (a, b) = (alignment.join(0), alignment.join(1));
        assert!(b.may_read(10));
        assert!(a.may_read(11), "1 tick of 2 ms ahead");
        assert!(!a.may_read(12), "2 ticks ahead");
        assert_eq!(SourceAlignment::for_tick(1).slack, 2, "2 ticks of 1 ms");
        for long in [3, 10, 100] {
            assert_eq!(
                SourceAlignment::for_tick(long).slack,
                0,
                "no slack at {long} ms ticks"
            );
        }
    }

    #[test]
    fn a_finished_source_holds_nobody_back() {
        let alignment = SourceAlignment::default();
        let a = alignment.join(0);
        let b = alignment.join(1);
        assert!(b.may_read(5));
        assert!(!a.may_read(9));
        drop(b);
        assert!(a.may_read(9));
    }

    #[test]
    fn separate_alignments_do_not_see_each_other() {
        let (one, other) = (SourceAlignment::default(), SourceAlignment::default());
        let a = one.join(0);
        let b = other.join(1);
        assert!(b.may_read(3));
        assert!(a.may_read(100));
    }
}
