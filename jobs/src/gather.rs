//! Exchanging a few small values among every worker of a run, outside the job's dataflow:
//! the start agreement before it is built (`crate::start_agreement`) and the cluster's
//! totals after it completes (`crate::cluster_totals`).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Inspect, Probe, ToStream};
use timely::worker::Worker;
use timely::ExchangeData;

/// Sends `mine` to every worker of the run and returns what every worker sent (this one's
/// too), once all have sent. Every worker must call it at the same point of its dataflow
/// sequence (dataflows are matched across workers by the order they are built in), so it
/// also works as a barrier.
pub fn all_gather<T: ExchangeData + Clone>(worker: &mut Worker, mine: Vec<T>) -> Vec<T> {
    let seen: Rc<RefCell<Vec<T>>> = Rc::default();
    let sink = seen.clone();
    let probe = worker.dataflow::<u64, _, _>(|scope| {
        let (probe, _) = mine
            .to_stream(scope)
            .broadcast()
            .inspect(move |value| sink.borrow_mut().push(value.clone()))
            .probe();
        probe
    });
    while !probe.done() {
        worker.step_or_park(Some(Duration::from_millis(20)));
    }
    seen.take()
}
