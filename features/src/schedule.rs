//! The schedule trigger's progress and rows; the triggers themselves are
//! [`crate::job_features::Trigger`]:
//!
//! - [`Trigger::Close`](crate::job_features::Trigger::Close) (default): every firing of the primary window emits one row
//!   ([`crate::keyed_features`]); with an `over_range` primary window that is one row per event.
//! - [`Trigger::Schedule`](crate::job_features::Trigger::Schedule): at every multiple `T` of `every` in event time (aligned to the Unix
//!   epoch), once the watermark reaches `T`, each key with a recent window emits one row of
//!   *each feature's latest window closed as of `T`*:
//!   - an aligned (tumbling or hopping) window: the window ending at the latest window end
//!     `<= T` (its empty-window values, e.g. a count of 0, when it had no records);
//!   - a session window: the latest session that ended in `(T - every, T]` (empty values if
//!     none).
//!
//!   A key emits at `T` when at least one of those windows had records. The row has
//!   `window_start = T - every`, `window_end = T`, revision 0; its `records`, `first` and
//!   `last` describe the first window group (in job order, primary first) whose window had
//!   records. Rows come out in `(T, key)` order. A window revised by an allowed-late record
//!   after `T` was emitted changes later schedule points only.
//!
//! Pipeline position: inside [`crate::keyed_features::KeyedFeatures::fire`], after every window
//! group has fired into its [`ClosedWindows`].

use serde::{Deserialize, Serialize};

use crate::closed_windows::ClosedWindows;
use crate::job_features::{place, JobFeatures};
use crate::row::{FeatureRow, RowValues};
use crate::vocab::{EventTime, Key};
use crate::window::WindowSpec;

/// Progress of the schedule trigger of one operator instance.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Schedule {
    every: i64,
    /// Every schedule point `<= through` has been emitted.
    through: EventTime,
}

/// A window ending at `end` is the as-of window of the schedule points in
/// `[end, end + lookback)`.
fn lookback(spec: &WindowSpec, every: i64) -> i64 {
    spec.aligned().map_or(every, |aligned| aligned.slide)
}

/// The smallest multiple of `every` at or after `from`.
fn first_point_from(from: EventTime, every: i64) -> EventTime {
    let rounded_up = if from.rem_euclid(every) == 0 {
        0
    } else {
        every
    };
    from.div_euclid(every)
        .saturating_mul(every)
        .saturating_add(rounded_up)
}

/// Multiples of `every` in `[end, end + lookback)` and in `(after, through]`, ascending.
fn points(
    end: EventTime,
    lookback: i64,
    every: i64,
    after: EventTime,
    through: EventTime,
) -> impl Iterator<Item = EventTime> {
    let first = first_point_from(end.max(after.saturating_add(1)), every);
    let limit = end.saturating_add(lookback);
    (0..)
        .map(move |i: i64| first.saturating_add(i.saturating_mul(every)))
        .take_while(move |&t| t < limit && t <= through)
}

impl Schedule {
    /// A schedule of period `every` (> 0) with nothing emitted yet.
    pub fn new(every: i64) -> Self {
        Schedule {
            every: every.max(1),
            through: EventTime::MIN,
        }
    }

    /// Merges the progress of another instance (restore at a new parallelism): every instance
    /// sees the same watermarks, so both are normally equal.
    pub fn absorb(&mut self, other: &Schedule) {
        self.through = self.through.max(other.through);
    }

    /// Restored state joins a run whose watermark at the checkpoint was `watermark`: every
    /// point up to it was evaluated then (moving `through` alone does not rewrite a snapshot,
    /// so a restored `through` may be older). Re-evaluating those points after the restored
    /// run's first records would emit rows the uninterrupted run never did.
    pub fn resume_through(&mut self, watermark: EventTime) {
        self.through = self.through.max(watermark);
    }

    /// Appends to `rows` the rows of every schedule point in `(through, watermark]`, given
    /// every window closed by `watermark` in `closed` (one per window group of `job`), then
    /// drops the closed windows no later schedule point can use. Returns whether a row was emitted or a
    /// window dropped; moving `through` alone is not a change worth a snapshot (a restored
    /// older `through` re-evaluates points that emitted nothing from the same windows).
    pub fn emit_through(
        &mut self,
        job: &JobFeatures,
        closed: &mut [ClosedWindows],
        empty: &[Vec<f64>],
        watermark: EventTime,
        rows: &mut Vec<FeatureRow>,
    ) -> bool {
        if watermark <= self.through {
            return false;
        }
        let after = self.through;
        if first_point_from(after.saturating_add(1), self.every) > watermark {
            // No schedule point passed: nothing is due, and the closed windows are not
            // scanned (pruning waits for the next point).
            self.through = watermark;
            return false;
        }
        let mut due: Vec<(EventTime, Key)> = Vec::new();
        for (group, windows) in job.groups().iter().zip(closed.iter()) {
            let lookback = lookback(&group.spec, self.every);
            let oldest = after.saturating_sub(lookback).saturating_add(1);
            for (key, ends) in windows.iter() {
                for &end in ends.range(oldest..).map(|(end, _)| end) {
                    if end > watermark {
                        break;
                    }
                    let at = points(end, lookback, self.every, after, watermark);
                    due.extend(at.map(|t| (t, key.clone())));
                }
            }
        }
        due.sort_unstable();
        due.dedup();
        let mut changed = false;
        for (at, key) in due {
            if let Some(row) = self.row(job, closed, empty, &key, at) {
                rows.push(row);
                changed = true;
            }
        }
        self.through = watermark;
        for (group, windows) in job.groups().iter().zip(closed.iter_mut()) {
            let lookback = lookback(&group.spec, self.every);
            changed |= windows.prune(
                self.through.saturating_sub(lookback).saturating_add(1),
                false,
            );
        }
        changed
    }

    /// The row of `key` at schedule point `at`; `None` if none of its windows had records.
    fn row(
        &self,
        job: &JobFeatures,
        closed: &[ClosedWindows],
        empty: &[Vec<f64>],
        key: &Key,
        at: EventTime,
    ) -> Option<FeatureRow> {
        let mut values: RowValues = smallvec::smallvec![f64::NAN; job.names().len()];
        let mut described: Option<&FeatureRow> = None;
        let mut closed_by_timeout = false;
        for (g, (group, windows)) in job.groups().iter().zip(closed).enumerate() {
            let found = windows.as_of_schedule(&group.spec, self.every, key, at);
            let empty = empty.get(g).map_or(&[][..], Vec::as_slice);
            place(&mut values, group, found.map_or(empty, |r| &r.values));
            if let Some(row) = found {
                described = described.or(Some(row));
                closed_by_timeout |= row.closed_by_timeout;
            }
        }
        let described = described?;
        Some(FeatureRow {
            key: key.clone(),
            key_group: described.key_group,
            window_start: at.saturating_sub(self.every),
            window_end: at,
            revision: 0,
            values,
            records: described.records,
            first: described.first,
            last: described.last,
            fired_at_ns: 0,
            closed_by_timeout,
            ingested_at_ms: described.ingested_at_ms,
        })
    }
}
