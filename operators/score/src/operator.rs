//! The scoring operator (DESIGN.md §6): feature rows are exchanged to the score instances, cut
//! into micro-batches (at most `max_batch_rows` rows of one tick, sent when full, when the
//! input frontier passes their tick, or after `max_batch_delay`; `crate::batcher`), and scored
//! off the worker thread by the instance's pinned inference thread (`crate::inference_thread`),
//! which sees only the batch's contiguous feature values (`crate::inference_batch`). Results
//! come back over a channel and wake the operator through a `SyncActivator`; the operator holds
//! a capability for each in-flight batch's tick and emits its rows at that tick, so nothing is
//! emitted at a tick that already closed. The rows leave as columns: one [`ScoredBatch`] per
//! run of input rows (rows, scores, and each model version's verdict), not one record per row.
//! At most `max_in_flight` batches are queued or running per instance: at the bound the
//! operator stops pulling its input (rows wait in Timely's channel, and the tick cannot close)
//! instead of queueing more work, and counts itself in `JobMetrics::score_backlog`, which makes
//! this process's sources stop reading until it has room again (a slow model slows the input;
//! memory does not grow). A failed batch never stops the job: each of its rows becomes a score
//! record with an error and no score, plus a dead letter.

use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;
use timely::scheduling::SyncActivator;

use weir_features::dead_letter::DeadLetter;
use weir_features::row::FeatureRow;
use weir_features::scored::ScoredBatch;
use weir_features::vocab::Tick;
use weir_operators::clock::unix_ms;
use weir_operators::metrics::{JobMetrics, Operator};
use weir_operators::placement::KeyGroupRoutes;

use crate::batcher::Batcher;
/// The operator's configuration, defined with the inference thread's in `crate::config`.
pub use crate::config::ScoreConfig;
use crate::error::Result;
use crate::inference_thread::InferenceThread;

type VecBuilder<D> = timely::container::CapacityContainerBuilder<Vec<D>>;

/// The outputs of the scoring stage.
pub struct ScoreStreams<'scope> {
    /// Every feature row with its score record (an error instead of a score when inference
    /// failed), in scored batches.
    pub scores: Stream<'scope, Tick, Vec<ScoredBatch>>,
    /// Dead letters for failed inferences.
    pub dead_letters: Stream<'scope, Tick, Vec<DeadLetter>>,
}

/// Extension trait: `rows.score(config)`.
pub trait Score<'scope> {
    /// Scores every feature row; starts (and warms) an inference thread per score instance.
    fn score(self, config: ScoreConfig) -> Result<ScoreStreams<'scope>>;
}

impl<'scope> Score<'scope> for Stream<'scope, Tick, Vec<FeatureRow>> {
    fn score(self, config: ScoreConfig) -> Result<ScoreStreams<'scope>> {
        let scope = self.scope();
        let (placement, key_groups, parallelism) =
            (config.placement, config.key_groups, config.parallelism);
        let routes = KeyGroupRoutes::new(placement, key_groups, parallelism);
        let route = move |row: &FeatureRow| routes.route(row.key_group);
        // Start (and load) the inference thread before reserving the operator, so a load
        // error leaves no half-built operator behind. It is woken through the operator's
        // `SyncActivator`, known once the operator exists (no result comes before a job).
        let wake_slot = Arc::new(OnceLock::<SyncActivator>::new());
        let thread = match placement.instance_on(scope.index(), parallelism) {
            Some(instance) => {
                let slot = wake_slot.clone();
                Some(InferenceThread::spawn(
                    config.inference_setup(instance),
                    instance,
                    config.batching.max_in_flight,
                    move || {
                        if let Some(activator) = slot.get() {
                            // Fails only once the worker is gone and nothing waits for results.
                            let _ = activator.activate();
                        }
                    },
                )?)
            }
            None => None,
        };
        let mut builder = OperatorBuilder::new("Score".to_owned(), scope);
        let address = builder.operator_info().address;
        let _ = wake_slot.set(scope.worker().sync_activator_for(address.to_vec()));
        let mut rows_in = builder.new_input(self, Exchange::new(route));
        let (scores_out, scores) = builder.new_output::<Vec<ScoredBatch>>();
        let (dead_out, dead_letters) = builder.new_output::<Vec<DeadLetter>>();
        let mut scores_out = OutputBuilder::<_, VecBuilder<ScoredBatch>>::from(scores_out);
        let mut dead_out = OutputBuilder::<_, VecBuilder<DeadLetter>>::from(dead_out);
        let activator = scope.activator_for(address);
        let flow = placement
            .instance_on(scope.index(), parallelism)
            .map(|i| config.metrics.instance_flow(Operator::Score, i as u32));
        let metrics = config.metrics.clone();
        let mut state = thread.map(|thread| Batcher::<Caps>::new(thread, &config));
        builder.build(move |capabilities| {
            drop(capabilities);
            move |frontiers| {
                let (Some(st), Some((flow_in, flow_out))) = (state.as_mut(), flow.as_ref()) else {
                    rows_in.for_each(|_, _| {});
                    return;
                };
                let mut scores_handle = scores_out.activate();
                let mut dead_handle = dead_out.activate();
                let mut finished = st.finished();
                if st.has_room() {
                    rows_in.for_each(|cap, rows| {
                        if let (Some(s), Some(d)) = (cap.retain_least(0), cap.retain_least(1)) {
                            flow_in.inc_by(rows.len() as u64);
                            st.push(*s.time(), (s, d), rows);
                        }
                    });
                }
                st.close_open(|tick| !frontiers[0].less_equal(tick));
                st.send(&mut finished);
                for ((score_cap, dead_cap), mut outcome) in finished {
                    count_produced(&metrics, flow_out, &outcome.scored);
                    scores_handle
                        .session(&score_cap)
                        .give_container(&mut outcome.scored);
                    if !outcome.dead.is_empty() {
                        dead_handle
                            .session(&dead_cap)
                            .give_container(&mut outcome.dead);
                    }
                }
                st.report_backlog();
                if let Some(delay) = st.open_deadline() {
                    // Wakes the operator when the open batch's delay runs out.
                    activator.activate_after(delay);
                }
            }
        });
        Ok(ScoreStreams {
            scores,
            dead_letters,
        })
    }
}

/// Counts score records leaving a score instance and their latencies from window close, from
/// window end and from ingest.
fn count_produced(metrics: &JobMetrics, out: &Counter, scored: &[ScoredBatch]) {
    let now_ms = unix_ms();
    for batch in scored {
        out.inc_by(batch.rows.len() as u64);
        metrics.latency.scores_produced(&batch.rows, now_ms);
    }
}

/// The capabilities a batch's results are emitted with (scores, dead letters).
type Caps = (Capability<Tick>, Capability<Tick>);
