//! The keyed window-feature operator (DESIGN.md §2–3): records exchanged by key group to
//! their window instance, watermark reports broadcast from every source instance. When a tick
//! is complete on both inputs, its records are applied in order, its reports folded into the
//! combined watermark, and every window the watermark passed fires one feature row per key
//! (in parts of [`FIRE_BUDGET_ROWS`] rows per activation when a tick closes many windows).
//! Records behind the watermark by more than the allowed lateness become `late` dead letters.
//! This file is the Timely shell: stashing ticks, capabilities and outputs; what a tick does
//! to the state is [`WindowInstance`]'s, which has no Timely in it.
//!
//! State is kept in key-group shards ([`StateShards`]). Checkpoints (DESIGN.md §5, incremental):
//! after the last record of an epoch tick `E` is applied (and before any record of a later
//! tick), an instance encodes the shards that changed since their last snapshot; its writer
//! thread ([`crate::snapshot_writer`]) writes them as one bundle `window/kg-<lo>-<hi>` while the
//! dataflow goes on, and the entries of all its shards (new sections, and older bundles'
//! sections for unchanged shards) go to the committer at `E`. On restore an instance reads
//! every snapshot of the manifest that overlaps its (possibly different) range
//! ([`crate::snapshot_restore`]) and keeps its own keys, so a rescale is a restore; its first
//! snapshot after a restore writes every shard.

use std::collections::BTreeMap;
use std::sync::Arc;

use timely::dataflow::channels::pact::{DistributorPact, Pipeline};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;

use weir_checkpoint::KeyGroupRange;
use weir_features::dead_letter::DeadLetter;
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::state_shards::{SHARDS, SHARDS_WITHOUT_CHECKPOINTS};
use weir_features::vocab::{Tick, Watermark};
use weir_features::watermark::WatermarkReport;

use crate::clock::unix_nanos;
use crate::epochs::{CheckpointPart, CheckpointStream, OperatorCheckpoints};
use crate::error::Result;
use crate::metrics::{JobMetrics, Operator};
use crate::placement::{KeyGroupRoutes, Placement};
use crate::record_batches::{room_after, RouteRecords, BATCH_RECORDS};
use crate::snapshot_restore::restore_key_groups;
use crate::snapshot_writer::SnapshotWriter;
use crate::window_instance::{WindowInstance, WindowLogic};

/// Everything a window instance needs to know.
#[derive(Clone, Debug)]
pub struct WindowConfig {
    /// The features, lateness and TTL rules every instance computes with.
    pub logic: WindowLogic,
    /// Number of key groups of the job.
    pub key_groups: u32,
    /// Number of window instances.
    pub parallelism: usize,
    /// Number of source instances whose reports make up the watermark.
    pub sources: usize,
    /// Worker layout.
    pub placement: Placement,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Checkpoint epochs, store and the checkpoint to restore.
    pub checkpoints: OperatorCheckpoints,
}

/// Rows a tick's firing emits per activation, about (whole shards are fired), in containers
/// of whole shards' rows, [`BATCH_RECORDS`] or more but the last: a bounded input read at
/// full speed closes tens of thousands of windows per 100 ms tick, and the operators after
/// this one (the sink's encoder and writer) take them in parts of this size instead of all
/// at once.
pub const FIRE_BUDGET_ROWS: usize = 8_192;

/// Operator name of the window state in checkpoints.
pub const WINDOW_OPERATOR: &str = "window";

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
    caps: TickCapabilities,
    events: Vec<Vec<Event>>,
    reports: Vec<WatermarkReport>,
}

/// The capabilities of one tick on each output.
struct TickCapabilities {
    rows: Capability<Tick>,
    late: Capability<Tick>,
    /// Held by the snapshot writer until the epoch's files are durable.
    parts: Capability<Tick>,
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
        let resumed = config.checkpoints.restore.as_ref();
        let clock = config.checkpoints.clock;
        let snapshots = clock.enabled() && config.checkpoints.store.is_some();
        let shards = if snapshots {
            SHARDS
        } else {
            SHARDS_WITHOUT_CHECKPOINTS
        };
        let mut window = WindowInstance::new(
            config.logic.clone(),
            range,
            (config.key_groups, shards),
            config.sources,
            resumed.and_then(|m| m.window_watermark).map(Watermark),
            config.metrics.clone(),
        );
        if let Some(instance) = instance {
            restore_state(&config, (instance, range), &mut window)?;
        }
        let worker = self.scope().worker();
        let mut builder = OperatorBuilder::new("WindowFeatures".to_owned(), self.scope());
        let routes = KeyGroupRoutes::new(config.placement, config.key_groups, config.parallelism);
        let route = move |event: &Event| routes.route(event.key_group);
        let exchange = DistributorPact(move |peers| RouteRecords::new(route, peers));
        let mut events_in = builder.new_input(self, exchange);
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

        let address = builder.operator_info().address;
        let activator = worker.sync_activator_for(address.to_vec());
        let rerun = worker.activator_for(address);
        let mut writer = match &config.checkpoints.store {
            Some(store) if snapshots && !window.is_empty() => Some(SnapshotWriter::start(
                store.clone(),
                WINDOW_OPERATOR,
                range,
                window.shards(),
                config.metrics.clone(),
                activator,
            )?),
            _ => None,
        };
        let flow = instance.map(|i| config.metrics.instance_flow(Operator::Window, i as u32));
        builder.build(move |initial_capabilities| {
            drop(initial_capabilities);
            let mut stash: BTreeMap<Tick, TickStash> = BTreeMap::new();
            // The complete tick whose windows are firing, when they did not all fit into one
            // activation's row budget.
            let mut firing: Option<(Tick, TickCapabilities)> = None;
            // The rows of one firing call (BATCH_RECORDS or more: whole shards are fired, and
            // one shard's windows of a tick can hold several thousand rows), built in place by
            // the window state and handed on as one container, which starts with room for as
            // many rows as the last one held and a quarter more, up to the activation's row
            // budget (`room_after`): a live stream's few rows a tick do not each hold a full
            // part's memory downstream, and a part a little longer than the last is not
            // copied into a vector twice its size (capped at BATCH_RECORDS, the room made a
            // hopping run's parts of 1 500-8 000 rows grow two or three times: fix 78).
            let (mut fired_rows, mut last_part) = (Vec::<FeatureRow>::new(), 0);
            move |frontiers| {
                let mut rows_handle = rows_out.activate();
                let mut late_handle = late_out.activate();
                let count_events = |n: usize| {
                    if let Some((events, _)) = &flow {
                        events.inc_by(n as u64);
                    }
                };
                // Complete ticks first, in order: their records (those not applied as they
                // arrived), then their reports; then fire, in parts of at most about
                // FIRE_BUDGET_ROWS rows per activation (the operator runs again for the rest).
                let mut budget = FIRE_BUDGET_ROWS;
                loop {
                    if firing.is_none() {
                        let Some((&tick, _)) = stash.first_key_value() else {
                            break;
                        };
                        if frontiers.iter().any(|f| f.less_equal(&tick)) {
                            break;
                        }
                        let Some(ready) = stash.remove(&tick) else {
                            break;
                        };
                        let now_ms = (unix_nanos() / 1_000_000) as i64;
                        let batches = ready.events.iter().map(Vec::as_slice);
                        let mut late = window.apply_tick(batches, &ready.reports, now_ms);
                        count_events(ready.events.iter().map(Vec::len).sum());
                        if !late.is_empty() {
                            late_handle
                                .session(&ready.caps.late)
                                .give_container(&mut late);
                        }
                        firing = Some((tick, ready.caps));
                    }
                    let Some((tick, caps)) = firing.take() else {
                        break;
                    };
                    if budget == 0 {
                        firing = Some((tick, caps));
                        rerun.activate();
                        break;
                    }
                    let now_ms = (unix_nanos() / 1_000_000) as i64;
                    fired_rows.reserve(room_after(last_part, FIRE_BUDGET_ROWS));
                    let part = budget.min(BATCH_RECORDS);
                    let fired = window.fire(now_ms, unix_nanos(), part, &mut fired_rows);
                    if !fired_rows.is_empty() {
                        last_part = fired_rows.len();
                        // Handed on whole: no row is copied again on its way to the sink.
                        rows_handle
                            .session(&caps.rows)
                            .give_container(&mut fired_rows);
                        fired_rows.clear();
                    }
                    if let Some((_, rows)) = &flow {
                        rows.inc_by(fired.rows as u64);
                    }
                    budget = budget.saturating_sub(fired.rows);
                    if !fired.complete {
                        // The next part, in this activation while the budget lasts.
                        firing = Some((tick, caps));
                        continue;
                    }
                    if let Some(writer) = writer.as_mut().filter(|_| clock.is_epoch(tick)) {
                        if let Some(watermark) = window.checkpoint_watermark() {
                            let part = CheckpointPart::Watermark(watermark);
                            parts_out.activate().session(&caps.parts).give(part);
                        }
                        let started = std::time::Instant::now();
                        match window.snapshot() {
                            Ok(changed) => {
                                writer.submit(tick, caps.parts, changed, started.elapsed());
                            }
                            Err(error) => {
                                tracing::error!(epoch = tick, %error, "cannot encode the window state; the epoch will not be committed");
                            }
                        }
                    }
                }
                reports_in.for_each(|cap, data| {
                    if let Some(entry) = stash_entry(&mut stash, &cap) {
                        entry.reports.append(data);
                    }
                });
                // A batch whose tick is the earliest incomplete one (both frontiers have
                // passed every earlier tick, and no firing is under way: the loop above applied
                // and fired every complete tick) is applied now, after the tick's batches stashed before it: the
                // same state as applying them all when the tick completes, without holding a
                // tick's records in memory.
                events_in.for_each(|cap, data| {
                    let Some(&tick) = cap.least() else {
                        return;
                    };
                    let earliest =
                        firing.is_none() && !frontiers.iter().any(|f| f.less_than(&tick));
                    let Some(entry) = stash_entry(&mut stash, &cap) else {
                        return;
                    };
                    if !earliest {
                        entry.events.push(std::mem::take(data));
                        return;
                    }
                    let now_ms = (unix_nanos() / 1_000_000) as i64;
                    let mut late = Vec::new();
                    for batch in entry.events.drain(..).chain([std::mem::take(data)]) {
                        window.apply_records(&batch, now_ms, &mut late);
                        count_events(batch.len());
                    }
                    if !late.is_empty() {
                        late_handle
                            .session(&entry.caps.late)
                            .give_container(&mut late);
                    }
                });
                if let Some(writer) = writer.as_mut() {
                    let incremental = writer.collect(|capability, part| {
                        parts_out.activate().session(capability).give(part);
                    });
                    if !incremental {
                        window.mark_all_changed();
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
            let caps = TickCapabilities {
                rows: cap.retain_least(0)?,
                late: cap.retain_least(1)?,
                parts: cap.retain_least(2)?,
            };
            Some(entry.insert(TickStash {
                caps,
                events: Vec::new(),
                reports: Vec::new(),
            }))
        }
    }
}

/// Loads this instance's keys from every snapshot file of the checkpoint to restore that
/// overlaps its key-group range.
fn restore_state(
    config: &WindowConfig,
    (instance, range): (usize, KeyGroupRange),
    window: &mut WindowInstance,
) -> Result<()> {
    let checkpoints = &config.checkpoints;
    let watermark = checkpoints
        .restore
        .as_ref()
        .and_then(|m| m.window_watermark);
    // Every restored file joins the run at the same instant (key TTLs skip the downtime).
    let now_ms = (unix_nanos() / 1_000_000) as i64;
    let placed = (instance, config.parallelism, config.key_groups);
    let restored = restore_key_groups(checkpoints, WINDOW_OPERATOR, placed, |range, bytes| {
        window.restore(range, bytes, now_ms, watermark)
    })?;
    if let Some(manifest) = checkpoints.restore.as_ref().filter(|_| restored) {
        tracing::info!(
            epoch = manifest.epoch.0,
            lo = range.lo,
            hi = range.hi,
            open_slots = window.open_slots(),
            "window state restored"
        );
    }
    Ok(())
}
