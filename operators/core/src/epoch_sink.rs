//! The shape every sink shares (DESIGN.md §5): write each batch as it arrives, and make the
//! output durable before letting a checkpoint epoch pass. A sink instance holds a capability
//! on its checkpoint stream at the oldest tick it has not made durable; when its input frontier
//! moves past an epoch `E` it takes a [`SinkWriter::mark`] of everything written so far and lets
//! the capability move on only once [`SinkWriter::durable_through`] that mark (Kafka: every
//! record acknowledged — checked without blocking the worker, which keeps running its other
//! operators and re-checks every millisecond; files: fsync), so the committer cannot commit `E`
//! while output of ticks `<= E` could still be lost. At the end of the input it flushes once
//! more (blocking), waits briefly for the acknowledgements of that flush to be counted, and
//! releases the writer; if anything it wrote is not durable then (a file write failed, or
//! Kafka records were still unacknowledged), it sends [`CheckpointPart::OutputLost`] at the tick it
//! held before letting go, so the committer commits no epoch from there on — releasing the
//! capability alone would let them all pass. Sinks differ only in their [`SinkWriter`].

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::ParallelizationContract;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::Stream;

use weir_features::vocab::Tick;

use crate::epochs::{CheckpointPart, CheckpointStream, EpochClock};

/// How one sink instance writes its records.
pub trait SinkWriter<D>: 'static {
    /// Writes (or queues for delivery) a batch, draining it.
    fn write(&mut self, batch: &mut Vec<D>);

    /// Writes a batch of tick `tick` ([`SinkWriter::write`] unless the writer keeps records of
    /// later epochs back, as a transactional Kafka sink does).
    fn write_at(&mut self, tick: Tick, batch: &mut Vec<D>) {
        let _ = tick;
        self.write(batch);
    }

    /// No record before tick `frontier` will arrive any more; called before each
    /// [`SinkWriter::mark`] (a writer that kept records back sends those before `frontier`).
    fn input_passed(&mut self, frontier: Tick) {
        let _ = frontier;
    }
    /// Makes everything written so far durable, blocking; `false` when it could not (logged
    /// by the writer; at the end of the input — `end_of_input` — the writer counts what is
    /// lost as delivery failures).
    fn flush(&mut self, end_of_input: bool) -> bool;

    /// A position covering everything written so far (for [`SinkWriter::durable_through`]).
    fn mark(&mut self) -> u64 {
        0
    }

    /// Without blocking when the writer can: `Some(true)` once everything up to `mark` is
    /// durable, `None` while it is still on its way, `Some(false)` when some of it was lost or
    /// could not be made durable (the epoch must not pass). By default a blocking
    /// [`SinkWriter::flush`].
    fn durable_through(&mut self, mark: u64) -> Option<bool> {
        let _ = mark;
        Some(self.flush(false))
    }
}

/// How often a sink waiting for its output to become durable checks again.
const DURABILITY_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// How long a sink waits at the end of its input, after its flush, for the acknowledgements
/// of what it flushed to be counted (a producer may report them on its own thread just after
/// the flush returns).
const SETTLE_AT_END: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether everything up to `mark` is durable, waiting up to [`SETTLE_AT_END`] for the
/// writer to know (blocking: the input has ended, the flush blocked too).
fn settled_at_end<D, W: SinkWriter<D>>(writer: &mut W, mark: u64) -> bool {
    let deadline = std::time::Instant::now() + SETTLE_AT_END;
    loop {
        match writer.durable_through(mark) {
            Some(durable) => return durable,
            None if std::time::Instant::now() < deadline => std::thread::sleep(DURABILITY_POLL),
            None => return false,
        }
    }
}

/// Runs `writer` (on workers that host a sink instance; `None` elsewhere) over `stream`.
pub fn epoch_sink<'scope, D, P, W>(
    stream: Stream<'scope, Tick, Vec<D>>,
    pact: P,
    name: &str,
    epochs: EpochClock,
    mut writer: Option<W>,
) -> CheckpointStream<'scope>
where
    D: Clone + 'static,
    P: ParallelizationContract<Tick, Vec<D>>,
    W: SinkWriter<D>,
{
    let worker = stream.scope().worker().clone();
    stream.unary_frontier::<CapacityContainerBuilder<Vec<CheckpointPart>>, _, _, _>(
        pact,
        name,
        move |capability, info| {
            let mut held = Some(capability);
            // The tick the capability may move to once the mark is durable.
            let mut waiting: Option<(Tick, u64)> = None;
            let activator = worker.activator_for(info.address);
            move |(input, frontier), output| {
                input.for_each(|time, batch| {
                    if let (Some(writer), Some(&tick)) = (writer.as_mut(), time.least()) {
                        writer.write_at(tick, batch);
                    }
                });
                let Some(capability) = held.as_mut() else {
                    return;
                };
                match frontier.frontier().iter().min().copied() {
                    None => {
                        if let Some(mut writer) = writer.take() {
                            let everything = writer.mark();
                            let flushed = writer.flush(true);
                            if !flushed || !settled_at_end(&mut writer, everything) {
                                output
                                    .session(&*capability)
                                    .give(CheckpointPart::OutputLost);
                            }
                        }
                        held = None;
                    }
                    Some(next) if next > *capability.time() => {
                        let Some(writer) = writer.as_mut() else {
                            capability.downgrade(&next);
                            return;
                        };
                        let (to, mark) = match waiting {
                            Some(waited) => waited,
                            None if epochs.epochs_in(*capability.time(), next).next().is_none() => {
                                capability.downgrade(&next);
                                return;
                            }
                            None => {
                                writer.input_passed(next);
                                *waiting.insert((next, writer.mark()))
                            }
                        };
                        // `Some(false)` (lost output) keeps the epoch from ever passing.
                        if writer.durable_through(mark) == Some(true) {
                            capability.downgrade(&to);
                            waiting = None;
                        } else {
                            activator.activate_after(DURABILITY_POLL);
                        }
                    }
                    Some(_) => {}
                }
            }
        },
    )
}
