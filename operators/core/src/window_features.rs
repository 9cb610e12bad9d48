//! The keyed window-feature operator (DESIGN.md §2–3): records exchanged by key group to
//! their window instance, watermark reports broadcast from every source instance. When a tick
//! is complete on both inputs, its records are applied in order, its reports folded into the
//! combined watermark, and every window the watermark passed fires one feature row per key.
//! Records behind the watermark by more than the allowed lateness become `late` dead letters.
//!
//! State is kept in key-group shards ([`StateShards`]). Checkpoints (DESIGN.md §5, incremental):
//! after the last record of an epoch tick `E` is applied (and before any record of a later
//! tick), an instance encodes the shards that changed since their last snapshot; its writer
//! thread ([`crate::snapshot_writer`]) writes them as one bundle `window/kg-<lo>-<hi>` while the
//! dataflow goes on, and the entries of all its shards (new sections, and older bundles'
//! sections for unchanged shards) go to the committer at `E`. On restore an instance reads
//! every snapshot of the manifest that overlaps its (possibly different) range and keeps its
//! own keys, so a rescale is a restore; its first snapshot after a restore writes every shard.

use std::collections::BTreeMap;
use std::sync::Arc;

use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;

use weir_checkpoint::range::overlapping;
use weir_checkpoint::KeyGroupRange;
use weir_features::dead_letter::{DeadLetter, DeadLetterReason};
use weir_features::encode::event_json;
use weir_features::job_features::JobFeatures;
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::schema::RecordSchema;
use weir_features::state_shards::StateShards;
use weir_features::vocab::{Tick, Watermark};
use weir_features::watermark::{WatermarkCombiner, WatermarkReport};
use weir_features::window_state::Applied;

use crate::clock::unix_nanos;
use crate::epochs::{CheckpointPart, CheckpointStream, OperatorCheckpoints};
use crate::error::{OperatorError, Result};
use crate::metrics::JobMetrics;
use crate::placement::{instance_for_key_group, Placement};
use crate::snapshot_writer::SnapshotWriter;

/// Everything a window instance needs to know.
#[derive(Clone, Debug)]
pub struct WindowConfig {
    /// The job's features grouped by window (primary window first), in model input order.
    pub features: JobFeatures,
    /// Input schema (to re-encode late records for the dead-letter topic).
    pub schema: RecordSchema,
    /// How far behind the watermark a record may be and still update its window.
    pub allowed_lateness_ms: i64,
    /// Number of key groups of the job.
    pub key_groups: u32,
    /// Number of window instances.
    pub parallelism: usize,
    /// Number of source instances whose reports make up the watermark.
    pub sources: usize,
    /// Worker layout.
    pub placement: Placement,
    /// Name of the source (topic or file), for dead letters.
    pub source_name: String,
    /// Close windows of keys quiet for this long (processing time) and drop their state.
    pub state_ttl_ms: Option<i64>,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Checkpoint epochs, store and the checkpoint to restore.
    pub checkpoints: OperatorCheckpoints,
}

/// Operator name of the window state in checkpoints.
pub const WINDOW_OPERATOR: &str = "window";

/// How often keys are checked against the state TTL (the check is linear in the keys).
const EXPIRY_INTERVAL_MS: i64 = 1_000;

/// The output streams of the window stage.
pub struct WindowStreams<'scope> {
    /// One row per fired (key, window, revision).
    pub rows: Stream<'scope, Tick, Vec<FeatureRow>>,
    /// Late records.
    pub late: Stream<'scope, Tick, Vec<DeadLetter>>,
    /// Snapshot files written at checkpoint epochs.
    pub checkpoint: CheckpointStream<'scope>,
}

/// Extension trait: `events.window_features(reports, config)`.
pub trait WindowFeatures<'scope> {
    /// Computes the job's window features per key; see the module docs. Fails when the
    /// checkpoint to restore cannot be read or does not fit the job.
    fn window_features(
        self,
        reports: Stream<'scope, Tick, Vec<WatermarkReport>>,
        config: WindowConfig,
    ) -> Result<WindowStreams<'scope>>;
}

/// Records and reports of one tick, with the capabilities to emit at it.
struct TickStash {
    rows_cap: Capability<Tick>,
    late_cap: Capability<Tick>,
    parts_cap: Capability<Tick>,
    events: Vec<Vec<Event>>,
    reports: Vec<WatermarkReport>,
}

impl<'scope> WindowFeatures<'scope> for Stream<'scope, Tick, Vec<Event>> {
    fn window_features(
        self,
        reports: Stream<'scope, Tick, Vec<WatermarkReport>>,
        config: WindowConfig,
    ) -> Result<WindowStreams<'scope>> {
        let instance = config
            .placement
            .instance_on(self.scope().index(), config.parallelism);
        let range = instance
            .map(|i| KeyGroupRange::of_instance(i, config.parallelism, config.key_groups))
            .unwrap_or(KeyGroupRange { lo: 0, hi: 0 });
        let mut state = StateShards::new(
            &config.features,
            config.allowed_lateness_ms,
            range.lo,
            range.hi,
            config.key_groups,
        );
        if let Some(instance) = instance {
            restore_state(&config, instance, &mut state)?;
        }
        let worker = self.scope().worker();
        let mut builder = OperatorBuilder::new("WindowFeatures".to_owned(), self.scope());
        let (key_groups, parallelism, placement) =
            (config.key_groups, config.parallelism, config.placement);
        let route = move |event: &Event| {
            placement.worker_of(instance_for_key_group(
                event.key_group,
                key_groups,
                parallelism,
            )) as u64
        };
        let mut events_in = builder.new_input(self, Exchange::new(route));
        let mut reports_in = builder.new_input(reports.broadcast(), Pipeline);
        let (rows_out, rows) = builder.new_output::<Vec<FeatureRow>>();
        let (late_out, late) = builder.new_output::<Vec<DeadLetter>>();
        let (parts_out, checkpoint) = builder.new_output::<Vec<CheckpointPart>>();
        let mut rows_out = OutputBuilder::<
            _,
            timely::container::CapacityContainerBuilder<Vec<FeatureRow>>,
        >::from(rows_out);
        let mut late_out = OutputBuilder::<
            _,
            timely::container::CapacityContainerBuilder<Vec<DeadLetter>>,
        >::from(late_out);
        let mut parts_out = OutputBuilder::<
            _,
            timely::container::CapacityContainerBuilder<Vec<CheckpointPart>>,
        >::from(parts_out);

        let activator = worker.sync_activator_for(builder.operator_info().address.to_vec());
        let clock = config.checkpoints.clock;
        let mut writer = match &config.checkpoints.store {
            Some(store) if clock.enabled() && !state.is_empty() => Some(
                SnapshotWriter::start(
                    store.clone(),
                    range,
                    state.len(),
                    config.metrics.clone(),
                    activator,
                )
                .map_err(OperatorError::WriterThread)?,
            ),
            _ => None,
        };
        builder.build(move |initial_capabilities| {
            drop(initial_capabilities);
            let mut stash: BTreeMap<Tick, TickStash> = BTreeMap::new();
            // Restored: where event time stood at the checkpoint, so that the replayed records
            // of the first ticks are judged late as they were in the uninterrupted run.
            let mut combiner = match config
                .checkpoints
                .restore
                .as_ref()
                .and_then(|m| m.window_watermark)
            {
                Some(w) => WatermarkCombiner::resumed(config.sources, Watermark(w)),
                None => WatermarkCombiner::new(config.sources),
            };
            let mut last_expiry_ms = 0i64;
            move |frontiers| {
                events_in.for_each(|cap, data| {
                    if let Some(entry) = stash_entry(&mut stash, &cap) {
                        entry.events.push(std::mem::take(data));
                    }
                });
                reports_in.for_each(|cap, data| {
                    if let Some(entry) = stash_entry(&mut stash, &cap) {
                        entry.reports.append(data);
                    }
                });
                let mut rows_handle = rows_out.activate();
                let mut late_handle = late_out.activate();
                while let Some((&tick, _)) = stash.first_key_value() {
                    if frontiers.iter().any(|f| f.less_equal(&tick)) {
                        break;
                    }
                    let Some(mut ready) = stash.remove(&tick) else {
                        break;
                    };
                    let mut late = Vec::new();
                    let watermark = combiner.watermark();
                    let now_ms = (unix_nanos() / 1_000_000) as i64;
                    if config.state_ttl_ms.is_some() {
                        state.set_processing_time(now_ms);
                    }
                    for batch in ready.events.drain(..) {
                        for event in &batch {
                            if let Applied::Late { watermark } =
                                state.apply(&config.features, event, watermark)
                            {
                                config.metrics.dead_letter(DeadLetterReason::Late);
                                config.metrics.late(event.position.partition);
                                late.push(late_letter(&config, event, watermark.0));
                            }
                        }
                    }
                    for report in &ready.reports {
                        combiner.observe(report);
                    }
                    let fired_at_ns = unix_nanos();
                    let mut fired = Vec::new();
                    state.fire(&config.features, combiner.watermark(), |mut row| {
                        row.fired_at_ns = fired_at_ns;
                        fired.push(row);
                    });
                    if let Some(ttl) = config.state_ttl_ms {
                        if now_ms - last_expiry_ms >= EXPIRY_INTERVAL_MS {
                            last_expiry_ms = now_ms;
                            state.expire(&config.features, now_ms, ttl, |mut row| {
                                row.fired_at_ns = fired_at_ns;
                                fired.push(row);
                            });
                        }
                    }
                    JobMetrics::add(&config.metrics.windows_fired, fired.len() as u64);
                    if !fired.is_empty() {
                        rows_handle
                            .session(&ready.rows_cap)
                            .give_container(&mut fired);
                    }
                    if !late.is_empty() {
                        late_handle
                            .session(&ready.late_cap)
                            .give_container(&mut late);
                    }
                    if let Some(writer) = writer.as_mut().filter(|_| clock.is_epoch(tick)) {
                        // Not the end of a bounded input's `MAX`: that is no point in event time,
                        // and a run restored from it (going on live) would find every record late.
                        let watermark = combiner.watermark();
                        if watermark < Watermark::MAX {
                            let part = CheckpointPart::Watermark(watermark.0);
                            parts_out.activate().session(&ready.parts_cap).give(part);
                        }
                        let started = std::time::Instant::now();
                        match state.changed_snapshots() {
                            Ok(changed) => {
                                writer.submit(tick, ready.parts_cap, changed, started.elapsed());
                            }
                            Err(error) => {
                                tracing::error!(epoch = tick, %error, "cannot encode the window state; the epoch will not be committed");
                                state.mark_all_changed();
                            }
                        }
                    }
                }
                if let Some(writer) = writer.as_mut() {
                    let incremental = writer.collect(|capability, part| {
                        parts_out.activate().session(capability).give(part);
                    });
                    if !incremental {
                        state.mark_all_changed();
                    }
                }
            }
        });
        Ok(WindowStreams {
            rows,
            late,
            checkpoint,
        })
    }
}

fn stash_entry<'a>(
    stash: &'a mut BTreeMap<Tick, TickStash>,
    cap: &timely::dataflow::operators::InputCapability<Tick>,
) -> Option<&'a mut TickStash> {
    let tick = *cap.least()?;
    match stash.entry(tick) {
        std::collections::btree_map::Entry::Occupied(entry) => Some(entry.into_mut()),
        std::collections::btree_map::Entry::Vacant(entry) => {
            let rows_cap = cap.retain_least(0)?;
            let late_cap = cap.retain_least(1)?;
            let parts_cap = cap.retain_least(2)?;
            Some(entry.insert(TickStash {
                rows_cap,
                late_cap,
                parts_cap,
                events: Vec::new(),
                reports: Vec::new(),
            }))
        }
    }
}

fn late_letter(config: &WindowConfig, event: &Event, watermark: i64) -> DeadLetter {
    DeadLetter {
        reason: DeadLetterReason::Late,
        error: format!(
            "event time {} is behind the watermark {} by more than the allowed lateness of {} ms",
            event.ts, watermark, config.allowed_lateness_ms
        ),
        topic: config.source_name.clone(),
        position: event.position,
        timestamp: Some(event.ts),
        key: Some(event.key.as_bytes().to_vec()),
        raw: event_json(&config.schema, event),
    }
}

/// Loads this instance's keys from every snapshot file of the checkpoint to restore that
/// overlaps its key-group range.
fn restore_state(config: &WindowConfig, instance: usize, state: &mut StateShards) -> Result<()> {
    let (Some(manifest), Some(store)) = (&config.checkpoints.restore, &config.checkpoints.store)
    else {
        return Ok(());
    };
    let (groups, parallelism) = (config.key_groups, config.parallelism);
    let range = KeyGroupRange::of_instance(instance, parallelism, groups);
    let files = overlapping(
        &manifest.files,
        WINDOW_OPERATOR,
        instance,
        parallelism,
        groups,
    );
    let mut unfit = None;
    // Every restored file joins the run at the same instant (key TTLs skip the downtime).
    let at = ((unix_nanos() / 1_000_000) as i64, manifest.window_watermark);
    store.for_each_snapshot(
        manifest.epoch,
        &mut files.iter().map(|(file, _)| *file),
        &mut |file, bytes| {
            let range = (file.range.lo, file.range.hi);
            if let Err(e) = state.restore(&config.features, range, bytes, at) {
                let stored = file.file_epoch(manifest.epoch);
                let path = store.snapshot_location(stored, &file.operator, file.file_range());
                unfit.get_or_insert(OperatorError::Restore {
                    path,
                    detail: format!("key groups {}: {e}", file.range),
                });
            }
            Ok(())
        },
    )?;
    if let Some(error) = unfit {
        return Err(error);
    }
    tracing::info!(
        epoch = manifest.epoch.0,
        lo = range.lo,
        hi = range.hi,
        open_slots = state.open_slots(),
        "window state restored"
    );
    Ok(())
}
