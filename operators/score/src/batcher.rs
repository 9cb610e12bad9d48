//! One score instance's micro-batching, in-flight bookkeeping and inference thread, without
//! Timely (the operator in `crate::operator` drives it; benchmarks drive it directly).
//!
//! Between the operator's input and the inference thread (`crate::pool`): rows of one tick
//! are cut into batches of at most `max_batch_rows`; as each row arrives its values are
//! copied into the open batch's contiguous buffer ([`ScoreBatch`]) and the row itself is moved
//! into the batch's not-yet-scored record, which stays here. A batch is sent when full, when
//! its tick is complete, or after `max_batch_delay`; at most `max_in_flight` batches are
//! queued or running. Scored batches come back with their scores, which complete the records
//! in place (`crate::records`), and the spent batch's buffers serve a later batch.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_features::row::{FeatureRow, ScoredRow};
use weir_features::vocab::Tick;
use weir_operators::metrics::JobMetrics;

use crate::batch::ScoreBatch;
use crate::models::{canary_bucket, ModelSet, ScoreCounters};
use crate::operator::ScoreConfig;
use crate::pool::{Done, InferenceThread, Job};
use crate::records::{fill_scores, unscorable, unscored, BatchOutcome, RecordContext};

/// A batch being filled or waiting to be sent; `C` is what its results are emitted with.
struct Pending<C> {
    tick: Tick,
    caps: C,
    /// The batch's rows, moved into records that get their scores when the batch returns.
    scored: Vec<ScoredRow>,
    batch: Box<ScoreBatch>,
    opened: Instant,
}

impl<C> Pending<C> {
    /// An empty batch for `max_rows` rows, reusing spare buffers when there are some.
    fn new(tick: Tick, caps: C, max_rows: usize, spare: &mut Spares) -> Self {
        Pending {
            tick,
            caps,
            scored: spare
                .records
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(max_rows)),
            batch: spare.batches.pop().unwrap_or_default(),
            opened: Instant::now(),
        }
    }
}

/// Buffers for later batches.
#[derive(Default)]
struct Spares {
    /// Spent batches (boxed as they travel, so the boxes are reused too).
    #[allow(clippy::vec_box)]
    batches: Vec<Box<ScoreBatch>>,
    /// Empty records vectors the inference thread allocated (`ScoreBatch::spare_records`).
    records: Vec<Vec<ScoredRow>>,
}

/// One score instance's batches; `C` is what a batch's results are emitted with (the
/// operator's capabilities).
pub struct Batcher<C> {
    thread: InferenceThread,
    /// The batch being filled (rows of one tick).
    open: Option<Pending<C>>,
    /// Closed batches not yet sent (the in-flight bound was reached).
    ready: VecDeque<Pending<C>>,
    /// Sent batches by id: what to emit their results with, and their records.
    in_flight: HashMap<u64, (C, Vec<ScoredRow>)>,
    spare: Spares,
    next_id: u64,
    max_rows: usize,
    max_delay: Duration,
    max_in_flight: usize,
    canary_share: Option<f64>,
    context: RecordContext,
    counters: Arc<ScoreCounters>,
    /// Whether this instance counts in `metrics.score_backlog` (it is at its bound).
    backlogged: bool,
}

impl<C> Drop for Batcher<C> {
    fn drop(&mut self) {
        if self.backlogged {
            self.context
                .metrics
                .score_backlog
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl<C: Clone> Batcher<C> {
    /// Batches for `thread`, with `config`'s limits.
    pub fn new(thread: InferenceThread, config: &ScoreConfig) -> Self {
        Batcher {
            thread,
            open: None,
            ready: VecDeque::new(),
            in_flight: HashMap::new(),
            spare: Spares::default(),
            next_id: 0,
            max_rows: config.session.max_batch_rows.max(1),
            max_delay: config.max_batch_delay,
            max_in_flight: config.max_in_flight.max(1),
            canary_share: ModelSet::canary_share(config.secondary.as_ref()),
            context: RecordContext {
                job_features: config.job_features.clone(),
                source_name: config.source_name.clone(),
                metrics: config.metrics.clone(),
            },
            counters: config.counters.clone(),
            backlogged: false,
        }
    }

    /// Tells this process's sources whether this instance is at its in-flight bound.
    pub fn report_backlog(&mut self) {
        let full = !self.has_room();
        if full != self.backlogged {
            self.backlogged = full;
            let metrics = &self.context.metrics;
            if full {
                metrics.score_backlog.fetch_add(1, Ordering::Relaxed);
                JobMetrics::add(&metrics.backpressure_episodes, 1);
            } else {
                metrics.score_backlog.fetch_sub(1, Ordering::Relaxed);
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

    /// Adds `rows` (emptied) that arrived at `tick`, to be emitted with `caps`.
    pub fn push(&mut self, tick: Tick, caps: C, rows: &mut Vec<FeatureRow>) {
        if self.open.as_ref().is_some_and(|b| b.tick != tick) {
            self.ready.extend(self.open.take());
        }
        for row in rows.drain(..) {
            let (spare, max_rows) = (&mut self.spare, self.max_rows);
            let open = self
                .open
                .get_or_insert_with(|| Pending::new(tick, caps.clone(), max_rows, spare));
            let canary = self
                .canary_share
                .map(|share| canary_bucket(&row.key, share));
            open.batch.push_row(&row.values, canary);
            open.scored.push(unscored(row));
            if open.scored.len() >= self.max_rows {
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
                scored,
                batch,
                opened,
            } = pending;
            match self.thread.submit(Job { id, batch }) {
                Ok(()) => {
                    self.in_flight.insert(id, (caps, scored));
                    self.counters
                        .in_flight_high_water
                        .fetch_max(self.in_flight.len() as u64, Ordering::Relaxed);
                }
                Err((job, false)) => {
                    self.ready.push_front(Pending {
                        tick,
                        caps,
                        scored,
                        batch: job.batch,
                        opened,
                    });
                    break;
                }
                Err((_, true)) => {
                    tracing::error!("the inference thread stopped; emitting error records");
                    let outcome = unscorable(
                        scored,
                        self.thread.initial_tag(),
                        "the inference thread of this score instance stopped",
                        &self.context,
                    );
                    finished.push((caps, outcome));
                }
            }
        }
    }

    /// Finished batches as score records, with what to emit them with.
    pub fn finished(&mut self) -> Vec<(C, BatchOutcome)> {
        let mut done = Vec::new();
        while let Some(result) = self.thread.try_result() {
            done.extend(self.records(result));
        }
        done
    }

    /// The score records of a returned batch; keeps its buffers for a later batch.
    fn records(&mut self, done: Done) -> Option<(C, BatchOutcome)> {
        let Done { id, mut batch } = done;
        let (caps, mut scored) = self.in_flight.remove(&id)?;
        let mut dead = Vec::new();
        fill_scores(&mut scored, &batch, &self.context, &mut dead);
        batch.clear();
        let records = std::mem::take(&mut batch.spare_records);
        if records.capacity() > 0 && self.spare.records.len() < self.max_in_flight {
            self.spare.records.push(records);
        }
        self.spare.batches.push(batch);
        Some((caps, BatchOutcome { scored, dead }))
    }
}
