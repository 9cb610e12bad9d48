//! The Timely operator every source runs (DESIGN.md §2): it owns four outputs (events, dead
//! letters, watermark reports, checkpoint parts) at the current wall-clock tick, polls its
//! [`SourceReader`], closes each tick with one progress report, and at the end of a bounded
//! input reports `Watermark::MAX` and drops its capabilities. Kafka and file sources only
//! implement the reader.
//!
//! Backpressure: a source reads nothing while a score instance of its process is at its
//! in-flight bound ([`Pacing::backlog`], immediate, this process only), or while the
//! progress of the stage the job attaches to [`SourceStreams::progress`] (the scores) lags
//! more than [`Pacing::max_lag_ms`] behind the slowest source instance (probed on the
//! sources' own `reports` output). Timely tracks progress across all workers and processes,
//! so the second rule holds a source back when scoring falls behind in another process,
//! whose rows would otherwise pile up in the exchange between them; measuring against the
//! slowest source, not this source's own tick, keeps hosts whose clocks disagree from
//! reading as lag. With the bound on, a source also reads nothing until every worker has
//! started the dataflow (until then every frontier is at tick 0, and nothing read could get
//! past the missing worker). Paused sources keep closing ticks, so progress goes on and they
//! resume by themselves. A source also reads nothing while another source instance of its
//! process is more than a few ticks behind it ([`Pacing::alignment`],
//! [`crate::source_alignment`]).
//!
//! Checkpoints (DESIGN.md §5): when the source moves past a checkpoint epoch `E` (including
//! epochs skipped while the worker was busy), it sends a report and its resume positions at
//! `E`, so every window instance has a tick `E` to snapshot at and the manifest of `E` holds
//! offsets that match exactly the records emitted at ticks `<= E`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::{Capability, Probe};
use timely::dataflow::Scope;

use weir_checkpoint::SourcePositions;
use weir_features::dead_letter::DeadLetter;
use weir_features::record::Event;
use weir_features::vocab::Tick;
use weir_features::watermark::{SourceProgress, WatermarkReport};

use crate::backpressure::ScoreBacklog;
use crate::clock::unix_ms;
use crate::epochs::{CheckpointPart, EpochClock};
use crate::metrics::{JobMetrics, Operator};
use crate::placement::Placement;
use crate::source::SourceStreams;
use crate::source_alignment::{AlignedSource, SourceAlignment};
use crate::source_pace::{pace, Pace};

type VecBuilder<D> = timely::container::CapacityContainerBuilder<Vec<D>>;

/// One source instance's reading logic.
pub trait SourceReader: 'static {
    /// This instance's index among the source instances.
    fn instance(&self) -> u32;
    /// Reads what is available (bounded per call) into `events` and `dead`; returns the number
    /// of raw records handled (0 = nothing available now).
    fn poll(&mut self, now_ms: u64, events: &mut Vec<Event>, dead: &mut Vec<DeadLetter>) -> usize;
    /// Event-time progress at `now_ms`.
    fn progress(&self, now_ms: u64) -> SourceProgress;
    /// The source read nothing for the `paused_ms` before `now_ms` (backpressure): that time
    /// must not make a partition idle, as its records may be waiting unread
    /// ([`weir_features::watermark::PartitionWatermarks::exclude_paused`]).
    fn exclude_paused(&mut self, paused_ms: u64, now_ms: u64);
    /// Whether a bounded input has been read completely.
    fn finished(&self) -> bool;
    /// The source's name in checkpoint manifests (topic, or the input files).
    fn source_name(&self) -> &str;
    /// Resume positions of this instance's partitions: the first offset not yet emitted and
    /// the partition's watermark, or finished for a partition read to its end whose position
    /// the reader derives on restore (a file range's end). Partitions that have not read
    /// anything may be left out, and a finished partition need be reported only once: the
    /// committer merges every report ([`weir_checkpoint::SourcePositions::merge`]).
    fn positions(&mut self) -> SourcePositions;
}

/// What holds a source instance back (see the module header).
#[derive(Clone, Debug)]
pub struct Pacing {
    /// Set to end the source without declaring the end of input.
    pub stop: Arc<AtomicBool>,
    /// Job counters (pauses, lag episodes, stopped sources).
    pub metrics: Arc<JobMetrics>,
    /// The score instances of this process at their in-flight bound: the source pauses
    /// while there is any.
    pub backlog: ScoreBacklog,
    /// Read nothing while the progress probed by [`SourceStreams::progress`] is more than
    /// this many milliseconds (rounded up to whole ticks) behind the slowest source instance,
    /// or before every worker has started; `None`: no bound.
    pub max_lag_ms: Option<u64>,
    /// The ticks of this process's source instances: read nothing while another is more
    /// than the alignment's slack of ticks behind.
    pub alignment: SourceAlignment,
}

/// What every source stage has, whatever it reads: where its instances run, its tick, its
/// checkpoint epochs and what stops and pauses it.
#[derive(Clone, Debug)]
pub struct SourceStage {
    /// Number of source instances.
    pub parallelism: usize,
    /// Worker layout.
    pub placement: Placement,
    /// Length of a tick in ms.
    pub tick_ms: u64,
    /// Checkpoint epochs.
    pub epochs: EpochClock,
    /// What stops and pauses the source.
    pub pacing: Pacing,
}

/// Builds the source operator of `stage` on this worker: where the worker holds one of the
/// stage's instances, `open` makes that instance's reader (by instance index).
pub fn build_placed_source<'scope, R: SourceReader, E>(
    scope: Scope<'scope, Tick>,
    name: &str,
    stage: SourceStage,
    open: impl FnOnce(u32) -> Result<R, E>,
) -> Result<SourceStreams<'scope>, E> {
    let instance = stage
        .placement
        .instance_on(scope.index(), stage.parallelism);
    let reader = instance.map(|i| open(i as u32)).transpose()?;
    Ok(build_source(
        scope,
        name,
        reader,
        stage.tick_ms,
        stage.epochs,
        stage.pacing,
    ))
}

/// Builds a source operator. Workers without an instance (`reader == None`) emit nothing and
/// hold no capability. `pacing` stops and pauses it (see the module header): a slow model
/// slows the input instead of growing memory.
pub fn build_source<'scope, R: SourceReader>(
    scope: Scope<'scope, Tick>,
    name: &str,
    reader: Option<R>,
    tick_ms: u64,
    epochs: EpochClock,
    pacing: Pacing,
) -> SourceStreams<'scope> {
    let tick_ms = tick_ms.max(1);
    let Pacing {
        stop,
        metrics,
        backlog,
        max_lag_ms,
        alignment,
    } = pacing;
    let max_lag_ticks = max_lag_ms.map(|ms| ms.div_ceil(tick_ms).max(1));
    let progress = ProbeHandle::<Tick>::new();
    // The slowest source instance's tick, cluster-wide (probed on `reports` below).
    let sources = ProbeHandle::<Tick>::new();
    let pace_now = {
        let (progress, sources) = (progress.clone(), sources.clone());
        move || {
            max_lag_ticks.map_or(Pace::Keeping, |lag| {
                progress.with_frontier(|output| {
                    sources.with_frontier(|sources| pace(&output, &sources, lag))
                })
            })
        }
    };
    let mut builder = OperatorBuilder::new(name.to_owned(), scope);
    let activator = scope.activator_for(builder.operator_info().address);
    let (events_out, events) = builder.new_output::<Vec<Event>>();
    let (dead_out, dead_letters) = builder.new_output::<Vec<DeadLetter>>();
    let (reports_out, reports) = builder.new_output::<Vec<WatermarkReport>>();
    let (parts_out, checkpoint) = builder.new_output::<Vec<CheckpointPart>>();
    let mut events_out = OutputBuilder::<_, VecBuilder<Event>>::from(events_out);
    let mut dead_out = OutputBuilder::<_, VecBuilder<DeadLetter>>::from(dead_out);
    let mut reports_out = OutputBuilder::<_, VecBuilder<WatermarkReport>>::from(reports_out);
    let mut parts_out = OutputBuilder::<_, VecBuilder<CheckpointPart>>::from(parts_out);

    builder.build(move |capabilities| {
        let tick = unix_ms() / tick_ms;
        let mut running = reader.and_then(|reader| {
            let caps = SourceCapabilities::at(&capabilities, tick)?;
            let flow = metrics.instance_flow(Operator::Source, reader.instance());
            Some(RunningSource {
                aligned: alignment.join(reader.instance()),
                reader,
                caps,
                flow,
                held_back: false,
                paused_at: None,
                events: Vec::new(),
                last_poll: 0,
            })
        });
        drop(capabilities);
        activator.activate();
        move |_frontiers| {
            let Some(RunningSource {
                reader,
                aligned,
                caps,
                flow,
                held_back,
                paused_at,
                events,
                last_poll,
            }) = running.as_mut()
            else {
                return;
            };
            if stop.load(Ordering::Relaxed) {
                // Every later snapshot holds the records read until now (the other instances
                // may go on to later epochs): the checkpoints from this tick on need the
                // positions after them, or a restore reads those records again.
                if epochs.enabled() {
                    parts_out
                        .activate()
                        .session(&caps.parts)
                        .give(offsets_part(reader));
                }
                tracing::info!(instance = reader.instance(), "source stopped");
                JobMetrics::add(&metrics.sources_stopped, 1);
                running = None;
                return;
            }
            let now = unix_ms();
            if let Some(since) = paused_at.take() {
                // Nothing was read since then: that time does not count as quiet.
                reader.exclude_paused(now.saturating_sub(since), now);
            }
            let tick = now / tick_ms;
            let current = caps.tick();
            if tick > current {
                // Close the current tick: all its records are out, so report its progress.
                let report = WatermarkReport {
                    source: reader.instance(),
                    progress: reader.progress(now),
                };
                reports_out.activate().session(&caps.reports).give(report);
                for epoch in epochs.epochs_in(current, tick) {
                    caps.downgrade(epoch);
                    if epoch > current {
                        reports_out.activate().session(&caps.reports).give(report);
                    }
                    parts_out
                        .activate()
                        .session(&caps.parts)
                        .give(offsets_part(reader));
                }
                caps.downgrade(tick);
            }
            let may_read = aligned.may_read(caps.tick());
            if backlog.is_backlogged() {
                // Scoring is behind: keep closing ticks, but read nothing until it catches up.
                JobMetrics::add(&metrics.source_pauses, 1);
                *paused_at = Some(now);
                activator.activate_after(Duration::from_millis(1));
                return;
            }
            let pace = pace_now();
            let lags = pace == Pace::Lagging;
            if lags != *held_back {
                *held_back = lags;
                if lags {
                    JobMetrics::add(&metrics.lag_episodes, 1);
                }
            }
            if pace != Pace::Keeping {
                // Some worker has not started, or the job's output (in some process) is
                // behind: keep closing ticks, read nothing until that changes.
                *paused_at = Some(now);
                activator.activate_after(Duration::from_millis(1));
                return;
            }
            if !may_read {
                // Another source of this process is ticks behind: what this one read now
                // would wait in the window operators until that tick closes.
                JobMetrics::add(&metrics.source_alignment_pauses, 1);
                *paused_at = Some(now);
                activator.activate_after(ALIGNMENT_RECHECK);
                return;
            }
            // Room for as many events as the last poll gave: a batch then does not grow (and
            // copy itself) while it fills.
            events.clear();
            events.reserve(*last_poll);
            let mut dead = Vec::new();
            let polled = reader.poll(now, events, &mut dead);
            *last_poll = events.len();
            // Every record read becomes one event or one dead letter (`RecordDecoder::push`);
            // `polled` may count progress that is not a record (a file range finished).
            flow.0.inc_by((events.len() + dead.len()) as u64);
            flow.1.inc_by(events.len() as u64);
            if !events.is_empty() {
                events_out
                    .activate()
                    .session(&caps.events)
                    .give_container(events);
            }
            if !dead.is_empty() {
                dead_out
                    .activate()
                    .session(&caps.dead_letters)
                    .give_container(&mut dead);
            }
            if reader.finished() {
                let report = WatermarkReport {
                    source: reader.instance(),
                    progress: reader.progress(now),
                };
                reports_out.activate().session(&caps.reports).give(report);
                if epochs.enabled() {
                    parts_out
                        .activate()
                        .session(&caps.parts)
                        .give(offsets_part(reader));
                }
                tracing::info!(
                    instance = reader.instance(),
                    "source reached the end of its bounded input"
                );
                running = None;
                return;
            }
            if polled > 0 {
                activator.activate();
            } else {
                let until_next_tick = tick_ms - now % tick_ms;
                activator.activate_after(Duration::from_millis(until_next_tick.min(5)));
            }
        }
    });
    SourceStreams {
        events,
        dead_letters,
        reports: reports.probe_with(&sources),
        checkpoint,
        progress,
    }
}

/// How soon a source held back by [`SourceAlignment`] looks again: the instance it waits
/// for moves on at its worker's next step, well within a tick.
const ALIGNMENT_RECHECK: Duration = Duration::from_micros(200);

/// A source instance that has neither stopped nor finished.
struct RunningSource<R> {
    reader: R,
    /// Its place among the process's sources (it leaves when this source ends).
    aligned: AlignedSource,
    caps: SourceCapabilities,
    /// This instance's records read and events decoded (`weir_records_in/out_total`).
    flow: (Counter, Counter),
    /// Whether the source is holding back for lagging progress.
    held_back: bool,
    /// When the last activation read nothing because of a pause.
    paused_at: Option<u64>,
    /// The batch a poll decodes into: handed to the exchange, which drains it and gives it
    /// back, so its memory stays warm across polls instead of being allocated for each one.
    events: Vec<Event>,
    /// Events the last poll gave (the batch's capacity, should it come back without it).
    last_poll: usize,
}

/// A running source's capabilities, one per output, all at its current tick.
struct SourceCapabilities {
    events: Capability<Tick>,
    dead_letters: Capability<Tick>,
    reports: Capability<Tick>,
    parts: Capability<Tick>,
}

impl SourceCapabilities {
    /// The operator's initial capabilities (one per output, in the order the outputs were
    /// made) delayed to `tick`.
    fn at(initial: &[Capability<Tick>], tick: Tick) -> Option<SourceCapabilities> {
        let [events, dead_letters, reports, parts] = initial else {
            return None;
        };
        Some(SourceCapabilities {
            events: events.delayed(&tick),
            dead_letters: dead_letters.delayed(&tick),
            reports: reports.delayed(&tick),
            parts: parts.delayed(&tick),
        })
    }

    /// The tick every capability is at.
    fn tick(&self) -> Tick {
        *self.events.time()
    }

    /// Moves every capability to `tick`.
    fn downgrade(&mut self, tick: Tick) {
        for cap in [
            &mut self.events,
            &mut self.dead_letters,
            &mut self.reports,
            &mut self.parts,
        ] {
            cap.downgrade(&tick);
        }
    }
}

/// The reader's resume positions as a checkpoint part.
fn offsets_part(reader: &mut impl SourceReader) -> CheckpointPart {
    CheckpointPart::Offsets {
        source: reader.source_name().to_owned(),
        positions: reader.positions(),
    }
}
