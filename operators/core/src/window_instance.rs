//! One window instance's logic, without Timely: the operator shell
//! ([`crate::window_features`]) hands it each tick's records and watermark reports.
//! [`WindowInstance::apply_records`] applies records in order against the watermark before
//! their tick (late ones become `late` dead letters) — as they arrive when every earlier tick
//! is complete, else once their tick is — and [`WindowInstance::fold_reports`] folds a complete
//! tick's reports into the combined watermark ([`WindowInstance::apply_tick`] does both for a
//! whole tick); [`WindowInstance::fire`] fires every window the watermark passed (each row to
//! the caller as it closes; a large tick in parts of a row budget, shard by shard) and, every
//! [`EXPIRY_INTERVAL_MS`], force-closes the windows of keys quiet past the state TTL; at a checkpoint epoch [`WindowInstance::snapshot`] encodes the
//! state shards that changed.
//!
//! Time comes in as arguments (`now_ms`, `fired_at_ns`), so the same ticks give the same rows
//! whatever the wall clock does.

use std::sync::Arc;

use weir_checkpoint::KeyGroupRange;
use weir_features::dead_letter::{DeadLetter, DeadLetterReason};
use weir_features::encode::event_json;
use weir_features::job_features::JobFeatures;
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::schema::RecordSchema;
use weir_features::state_shards::{ShardSnapshot, StateShards};
use weir_features::vocab::Watermark;
use weir_features::watermark::{WatermarkCombiner, WatermarkReport};
use weir_features::window_state::Applied;

use crate::metrics::JobMetrics;

/// How often keys are checked against the state TTL (the check is linear in the keys).
pub const EXPIRY_INTERVAL_MS: i64 = 1_000;

/// What a window instance computes with: the job's features and lateness rules.
#[derive(Clone, Debug)]
pub struct WindowLogic {
    /// The job's features grouped by window (primary window first), in model input order.
    pub features: JobFeatures,
    /// Input schema (to re-encode late records for the dead-letter topic).
    pub schema: RecordSchema,
    /// How far behind the watermark a record may be and still update its window.
    pub allowed_lateness_ms: i64,
    /// Name of the source (topic or file), for dead letters.
    pub source_name: String,
    /// Close windows of keys quiet for this long (processing time) and drop their state.
    pub state_ttl_ms: Option<i64>,
}

/// The state and event time of one window instance.
pub struct WindowInstance {
    logic: WindowLogic,
    state: StateShards,
    combiner: WatermarkCombiner,
    metrics: Arc<JobMetrics>,
    last_expiry_ms: i64,
    /// The shard [`WindowInstance::fire`] goes on with (0 when no firing is under way).
    next_shard: usize,
}

/// What one [`WindowInstance::fire`] call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fired {
    /// Rows emitted by this call.
    pub rows: usize,
    /// Whether every shard has fired (else the next call goes on where this one stopped).
    pub complete: bool,
}

impl WindowInstance {
    /// An instance owning `range` of `key_groups` (cut into `shards`, see [`StateShards`]),
    /// combining the reports of `sources` source instances. `resumed`: the window watermark
    /// of the checkpoint this run restores, so the replayed records of the first ticks are
    /// judged late as they were in the uninterrupted run.
    pub fn new(
        logic: WindowLogic,
        range: KeyGroupRange,
        (key_groups, shards): (u32, u32),
        sources: usize,
        resumed: Option<Watermark>,
        metrics: Arc<JobMetrics>,
    ) -> WindowInstance {
        let state = StateShards::new(
            &logic.features,
            logic.allowed_lateness_ms,
            (range.lo, range.hi),
            key_groups,
            shards,
        );
        let combiner = match resumed {
            Some(watermark) => WatermarkCombiner::resumed(sources, watermark),
            None => WatermarkCombiner::new(sources),
        };
        WindowInstance {
            logic,
            state,
            combiner,
            metrics,
            last_expiry_ms: 0,
            next_shard: 0,
        }
    }

    /// Whether the instance owns no key group (it then has no state to snapshot).
    pub fn is_empty(&self) -> bool {
        self.state.is_empty()
    }

    /// Number of state shards.
    pub fn shards(&self) -> usize {
        self.state.len()
    }

    /// Open (key, window) slots.
    pub fn open_slots(&self) -> usize {
        self.state.open_slots()
    }

    /// The combined watermark of the reports folded so far.
    pub fn watermark(&mut self) -> Watermark {
        self.combiner.watermark()
    }

    /// Loads a stored snapshot of the key groups `range` (see [`StateShards::restore`]); every
    /// restored snapshot joins the run at processing time `now_ms`, from a checkpoint whose
    /// window watermark was `watermark`.
    pub fn restore(
        &mut self,
        range: KeyGroupRange,
        bytes: &[u8],
        now_ms: i64,
        watermark: Option<i64>,
    ) -> weir_features::Result<()> {
        self.state.restore(
            &self.logic.features,
            (range.lo, range.hi),
            bytes,
            (now_ms, watermark),
        )
    }

    /// Applies one complete tick: its records, in order, against the watermark before the
    /// tick, then its reports. Returns the late records' dead letters (counted).
    pub fn apply_tick<'a>(
        &mut self,
        batches: impl IntoIterator<Item = &'a [Event]>,
        reports: &[WatermarkReport],
        now_ms: i64,
    ) -> Vec<DeadLetter> {
        let mut late = Vec::new();
        for batch in batches {
            self.apply_records(batch, now_ms, &mut late);
        }
        self.fold_reports(reports);
        late
    }

    /// Applies records of the earliest tick not yet complete, in order, against the
    /// watermark before that tick: every earlier tick must have been applied, fired and had
    /// its reports folded, and none of this tick's reports yet (the operator calls this as a
    /// batch arrives once its frontier has passed every earlier tick, which gives the same
    /// state as applying the batch when the tick completes). Late records' dead letters
    /// (counted) go to `late`.
    pub fn apply_records(&mut self, events: &[Event], now_ms: i64, late: &mut Vec<DeadLetter>) {
        let watermark = self.combiner.watermark();
        if self.logic.state_ttl_ms.is_some() {
            self.state.set_processing_time(now_ms);
        }
        for event in events {
            if let Applied::Late { watermark } =
                self.state.apply(&self.logic.features, event, watermark)
            {
                self.metrics
                    .dead_letter_at(DeadLetterReason::Late, event.position.partition);
                late.push(self.late_letter(event, watermark.0));
            }
        }
    }

    /// Folds a complete tick's watermark reports in, after all its records were applied.
    pub fn fold_reports(&mut self, reports: &[WatermarkReport]) {
        for report in reports {
            self.combiner.observe(report);
        }
    }

    /// Fires the windows the combined watermark passed, shard after shard from where the
    /// last call stopped, and stops after the first shard at which this call has appended
    /// `budget` rows to `rows`; once every shard has fired (at most every
    /// [`EXPIRY_INTERVAL_MS`] of `now_ms`) it force-closes the windows of keys quiet past the
    /// state TTL. Every row appended carries `fired_at_ns`. The operator calls this again, in
    /// later activations, until the tick's firing is complete, and applies nothing in between
    /// (every shard fires at the same watermark), so that the operators after it take a
    /// tick's rows in parts instead of all at once: at a bounded input's speed one tick
    /// closes tens of thousands of windows, whose rows and encoded lines would otherwise all be
    /// held at once.
    pub fn fire(
        &mut self,
        now_ms: i64,
        fired_at_ns: u64,
        budget: usize,
        rows: &mut Vec<FeatureRow>,
    ) -> Fired {
        let from = rows.len();
        let watermark = self.combiner.watermark();
        let features = &self.logic.features;
        let mut complete = true;
        while self.next_shard < self.state.len() {
            self.state
                .fire_shard(self.next_shard, features, watermark, rows);
            self.next_shard += 1;
            if rows.len() - from >= budget && self.next_shard < self.state.len() {
                complete = false;
                break;
            }
        }
        if complete {
            self.next_shard = 0;
            if let Some(ttl) = self.logic.state_ttl_ms {
                if now_ms - self.last_expiry_ms >= EXPIRY_INTERVAL_MS {
                    self.last_expiry_ms = now_ms;
                    self.state.expire(features, now_ms, ttl, rows);
                }
            }
        }
        rows[from..]
            .iter_mut()
            .for_each(|row| row.fired_at_ns = fired_at_ns);
        Fired {
            rows: rows.len() - from,
            complete,
        }
    }

    /// The watermark a checkpoint of this instance records: `None` at the end of a bounded
    /// input (`MAX` is no point in event time, and a run restored from it, going on live,
    /// would find every record late).
    pub fn checkpoint_watermark(&mut self) -> Option<i64> {
        let watermark = self.combiner.watermark();
        (watermark < Watermark::MAX).then_some(watermark.0)
    }

    /// Encodes the shards that changed since their last snapshot. On failure every shard is
    /// marked changed, so the next snapshot is complete again.
    pub fn snapshot(&mut self) -> weir_features::Result<Vec<ShardSnapshot>> {
        self.state.changed_snapshots().inspect_err(|_| {
            self.state.mark_all_changed();
        })
    }

    /// Makes the next snapshot encode every shard (an earlier one was not written, or its
    /// files should be compacted).
    pub fn mark_all_changed(&mut self) {
        self.state.mark_all_changed();
    }

    fn late_letter(&self, event: &Event, watermark: i64) -> DeadLetter {
        DeadLetter {
            reason: DeadLetterReason::Late,
            error: format!(
                "event time {} is behind the watermark {} by more than the allowed lateness of {} ms",
                event.ts, watermark, self.logic.allowed_lateness_ms
            ),
            topic: self.logic.source_name.clone(),
            position: event.position,
            timestamp: Some(event.ts),
            key: Some(event.key.as_bytes().to_vec()),
            raw: event_json(&self.logic.schema, event),
        }
    }
}
