//! One score instance's micro-batching, in-flight bookkeeping and inference thread, without
//! Timely (the operator in `crate::operator` drives it; benchmarks drive it directly).
//!
//! Between the operator's input and the inference thread (`crate::inference_thread`): rows of
//! one tick are cut into batches of at most `max_batch_rows`; as rows arrive their values are
//! copied into the open batch's contiguous buffer ([`InferenceBatch`], with each row's canary
//! bucket while a canary runs; the inference thread applies the share) and the rows themselves
//! stay here, in the containers they came in (a container is split only where it overflows a
//! batch; no row is moved on its own). A batch is sent when full, when its tick is complete, or
//! after `max_batch_delay`; at most `max_in_flight` batches are queued or running. Scored
//! batches come back with their scores, which go out with the rows as scored batches
//! (`crate::records`), and the spent batch's buffers serve a later batch.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_features::row::FeatureRow;
use weir_features::vocab::Tick;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::metrics::JobMetrics;

use crate::canary::{key_bucket, CanaryShare};
use crate::config::ScoreConfig;
use crate::counters::ScoreCounters;
use crate::inference_batch::InferenceBatch;
use crate::inference_thread::{Done, InferenceThread, Job, Refused};
use crate::records::{scored_batches, unscorable, BatchOutcome, RecordContext};

/// A batch being filled or waiting to be sent; `C` is what its results are emitted with.
struct Pending<C> {
    tick: Tick,
    caps: C,
    /// The batch's rows, in the runs (input containers) they arrived in.
    runs: Vec<Vec<FeatureRow>>,
    batch: Box<InferenceBatch>,
    opened: Instant,
}

impl<C> Pending<C> {
    /// An empty batch, reusing a spent one when there is one.
    #[allow(clippy::vec_box)]
    fn new(tick: Tick, caps: C, spare: &mut Vec<Box<InferenceBatch>>) -> Self {
        Pending {
            tick,
            caps,
            runs: Vec::new(),
            batch: spare.pop().unwrap_or_default(),
            opened: Instant::now(),
        }
    }

    /// Adds a run of rows (at most the batch's room): their values go into the batch, with
    /// their keys' canary buckets while a canary runs (`canary_share` is `Some`); whether the
    /// canary scores a row is decided on the inference thread, with the share serving then.
    fn add(&mut self, rows: Vec<FeatureRow>, canary_share: Option<f64>) {
        for row in &rows {
            let bucket = canary_share.map(|_| key_bucket(&row.key));
            self.batch.push_row(&row.values, bucket);
        }
        self.runs.push(rows);
    }
}

/// `rows` cut into runs that fill the open batch's `room` and then whole batches of
/// `max_rows`, in order; only the rows after the first run are copied.
fn runs_of(mut rows: Vec<FeatureRow>, room: usize, max_rows: usize) -> Vec<Vec<FeatureRow>> {
    let mut tail = Vec::new();
    while rows.len() > room {
        let cut = room + (rows.len() - room - 1) / max_rows * max_rows;
        tail.push(rows.split_off(cut));
    }
    tail.push(rows);
    tail.reverse();
    tail
}

/// One score instance's batches; `C` is what a batch's results are emitted with (the
/// operator's capabilities).
pub struct Batcher<C> {
    thread: InferenceThread,
    /// The batch being filled (rows of one tick).
    open: Option<Pending<C>>,
    /// Closed batches not yet sent (the in-flight bound was reached).
    ready: VecDeque<Pending<C>>,
    /// Sent batches by id: what to emit their results with, and their rows.
    in_flight: HashMap<u64, (C, Vec<Vec<FeatureRow>>)>,
    /// Spent batches (boxed as they travel, so the boxes are reused too).
    #[allow(clippy::vec_box)]
    spare: Vec<Box<InferenceBatch>>,
    next_id: u64,
    max_rows: usize,
    max_delay: Duration,
    max_in_flight: usize,
    canary_share: Arc<CanaryShare>,
    context: RecordContext,
    counters: Arc<ScoreCounters>,
    /// The process's score backlog, which pauses its sources.
    backlog: ScoreBacklog,
    /// Whether this instance counts in `backlog` (it is at its bound).
    backlogged: bool,
}

impl<C> Drop for Batcher<C> {
    fn drop(&mut self) {
        if self.backlogged {
            self.backlog.leave();
        }
    }
}

impl<C: Clone> Batcher<C> {
    /// Batches for `thread`, with `config`'s limits.
    pub fn new(thread: InferenceThread, config: &ScoreConfig) -> Self {
        let canary_share = thread.canary_share();
        Batcher {
            thread,
            open: None,
            ready: VecDeque::new(),
            in_flight: HashMap::new(),
            spare: Vec::new(),
            next_id: 0,
            max_rows: config.model.session.max_batch_rows.max(1),
            max_delay: config.batching.max_batch_delay,
            max_in_flight: config.batching.max_in_flight.max(1),
            canary_share,
            context: RecordContext {
                job_features: config.job_features.clone(),
                source_name: config.source_name.clone(),
                metrics: config.metrics.clone(),
            },
            counters: config.counters.clone(),
            backlog: config.backlog.clone(),
            backlogged: false,
        }
    }

    /// Tells this process's sources whether this instance is at its in-flight bound.
    pub fn report_backlog(&mut self) {
        let full = !self.has_room();
        if full != self.backlogged {
            self.backlogged = full;
            if full {
                self.backlog.enter();
                JobMetrics::add(&self.context.metrics.backpressure_episodes, 1);
            } else {
                self.backlog.leave();
            }
        }
    }

    /// Whether the caller may push more rows.
    pub fn has_room(&self) -> bool {
        self.in_flight.len() + self.ready.len() < self.max_in_flight
    }

    /// Batches sent and not yet returned by [`Self::finished`].
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Adds `rows` (taken, leaving it empty) that arrived at `tick`, to be emitted with `caps`.
    pub fn push(&mut self, tick: Tick, caps: C, rows: &mut Vec<FeatureRow>) {
        if self.open.as_ref().is_some_and(|b| b.tick != tick) {
            self.ready.extend(self.open.take());
        }
        if rows.is_empty() {
            return;
        }
        let room = self
            .open
            .as_ref()
            .map_or(self.max_rows, |open| self.max_rows - open.batch.rows);
        let canary_share = self.canary_share.get();
        for run in runs_of(std::mem::take(rows), room, self.max_rows) {
            let spare = &mut self.spare;
            let open = self
                .open
                .get_or_insert_with(|| Pending::new(tick, caps.clone(), spare));
            open.add(run, canary_share);
            if open.batch.rows >= self.max_rows {
                self.ready.extend(self.open.take());
            }
        }
    }

    /// Closes the open batch when its tick is complete or it has waited `max_delay`.
    pub fn close_open(&mut self, tick_complete: impl Fn(&Tick) -> bool) {
        if let Some(open) = &self.open {
            if tick_complete(&open.tick) || open.opened.elapsed() >= self.max_delay {
                self.ready.extend(self.open.take());
            }
        }
    }

    /// How long until the open batch's delay runs out, if there is one.
    pub fn open_deadline(&self) -> Option<Duration> {
        let open = self.open.as_ref()?;
        Some(self.max_delay.saturating_sub(open.opened.elapsed()))
    }

    /// Sends ready batches while the in-flight bound allows; rows that cannot reach the
    /// inference thread (it stopped) become error records in `finished`.
    pub fn send(&mut self, finished: &mut Vec<(C, BatchOutcome)>) {
        while self.in_flight.len() < self.max_in_flight {
            let Some(pending) = self.ready.pop_front() else {
                break;
            };
            let id = self.next_id;
            self.next_id += 1;
            let Pending {
                tick,
                caps,
                runs,
                batch,
                opened,
            } = pending;
            match self.thread.submit(Job { id, batch }) {
                Ok(()) => {
                    self.in_flight.insert(id, (caps, runs));
                    self.counters
                        .in_flight_high_water
                        .inner()
                        .fetch_max(self.in_flight.len() as i64, Ordering::Relaxed);
                }
                Err(Refused::Full(job)) => {
                    self.ready.push_front(Pending {
                        tick,
                        caps,
                        runs,
                        batch: job.batch,
                        opened,
                    });
                    break;
                }
                Err(Refused::Stopped(_)) => {
                    tracing::error!("the inference thread stopped; emitting error records");
                    let outcome = unscorable(
                        runs,
                        self.thread.initial_tag(),
                        "the inference thread of this score instance stopped",
                        &self.context,
                    );
                    finished.push((caps, outcome));
                }
            }
        }
    }

    /// Finished batches as scored batches, with what to emit them with; each spent batch's
    /// buffers are kept for a later batch.
    pub fn finished(&mut self) -> Vec<(C, BatchOutcome)> {
        let mut done = Vec::new();
        for Done { id, mut batch } in self.thread.take_results() {
            let Some((caps, runs)) = self.in_flight.remove(&id) else {
                continue;
            };
            done.push((caps, scored_batches(runs, &batch, &self.context)));
            batch.clear();
            self.spare.push(batch);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::runs_of;
    use weir_features::row::FeatureRow;

    fn rows(n: i64) -> Vec<FeatureRow> {
        let position = weir_features::vocab::SourcePosition {
            partition: 0,
            offset: 0,
        };
        (0..n)
            .map(|i| FeatureRow {
                key: "k".into(),
                key_group: weir_features::vocab::KeyGroup(0),
                window_start: 0,
                window_end: i,
                revision: 0,
                values: Default::default(),
                records: 1,
                first: position,
                last: position,
                fired_at_ns: 0,
                closed_by_timeout: false,
                ingested_at_ms: 0,
            })
            .collect()
    }

    #[test]
    fn runs_fill_the_room_then_whole_batches_in_order() {
        let lengths = |runs: &[Vec<FeatureRow>]| runs.iter().map(Vec::len).collect::<Vec<_>>();
        let runs = runs_of(rows(600), 100, 256);
        assert_eq!(lengths(&runs), [100, 256, 244]);
        let ends: Vec<i64> = runs.iter().flatten().map(|r| r.window_end).collect();
        assert_eq!(ends, (0..600).collect::<Vec<_>>());
        assert_eq!(lengths(&runs_of(rows(100), 100, 256)), [100]);
        assert_eq!(lengths(&runs_of(rows(30), 256, 256)), [30]);
        assert_eq!(lengths(&runs_of(rows(612), 100, 256)), [100, 256, 256]);
    }
}
