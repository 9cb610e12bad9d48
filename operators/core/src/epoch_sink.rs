//! The shape every sink shares (DESIGN.md §5): write each batch as it arrives, and make the
//! output durable before letting a checkpoint epoch pass. A sink instance holds a capability
//! on its checkpoint stream at the oldest tick it has not flushed; when its input frontier
//! moves past an epoch `E` it flushes (Kafka: waits for every acknowledgement; files: fsync)
//! and only then lets the capability move on, so the committer cannot commit `E` while output
//! of ticks `<= E` could still be lost. At the end of the input it flushes once more and
//! releases the writer. Sinks differ only in their [`SinkWriter`].

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
    /// Makes everything written so far durable; `false` when it could not (logged by the
    /// writer; before an epoch the sink tries again at its next activation, at the end of the
    /// input — `end_of_input` — the writer counts what is lost as delivery failures).
    fn flush(&mut self, end_of_input: bool) -> bool;
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
    stream.unary_frontier::<CapacityContainerBuilder<Vec<CheckpointPart>>, _, _, _>(
        pact,
        name,
        move |capability, _info| {
            let mut held = Some(capability);
            move |(input, frontier), _output| {
                input.for_each(|_time, batch| {
                    if let Some(writer) = writer.as_mut() {
                        writer.write(batch);
                    }
                });
                let Some(capability) = held.as_mut() else {
                    return;
                };
                match frontier.frontier().iter().min().copied() {
                    None => {
                        if let Some(mut writer) = writer.take() {
                            writer.flush(true);
                        }
                        held = None;
                    }
                    Some(next) if next > *capability.time() => {
                        let passes_epoch = epochs.epochs_in(*capability.time(), next).next();
                        let durable = passes_epoch.is_none()
                            || writer.as_mut().is_none_or(|writer| writer.flush(false));
                        if durable {
                            capability.downgrade(&next);
                        }
                    }
                    Some(_) => {}
                }
            }
        },
    )
}
