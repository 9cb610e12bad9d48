//! The sink shape (DESIGN.md §5): a sink's checkpoint stream must not pass an epoch until the
//! output written up to it is durable, without blocking the worker while it waits; output lost
//! for good keeps the epoch from ever passing, and is reported to the committer when the input
//! ends (so that the epochs the sink then lets go cannot commit).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::{Input, Inspect, Probe};
use timely::dataflow::ProbeHandle;

use weir_features::vocab::Tick;
use weir_operators::epoch_sink::{epoch_sink, SinkWriter};
use weir_operators::epochs::{CheckpointPart, EpochClock};

/// A writer whose records become durable only when the test acknowledges them.
struct AckedWriter {
    written: u64,
    acked: Arc<AtomicU64>,
    lost: bool,
    polls: Rc<RefCell<u64>>,
}

impl SinkWriter<u64> for AckedWriter {
    fn write(&mut self, batch: &mut Vec<u64>) {
        self.written += batch.len() as u64;
        batch.clear();
    }

    fn flush(&mut self, _end_of_input: bool) -> bool {
        true
    }

    fn mark(&mut self) -> u64 {
        self.written
    }

    fn durable_through(&mut self, mark: u64) -> Option<bool> {
        *self.polls.borrow_mut() += 1;
        if self.lost {
            return Some(false);
        }
        (self.acked.load(Ordering::Relaxed) >= mark).then_some(true)
    }
}

/// Sends 3 records at tick 1 and 2 at tick 3 (epochs every 2 ticks), moves the input to tick
/// 5, steps the worker and returns whether the sink's checkpoint frontier passed epochs 2 and
/// 4 before and after acknowledging `acks` records, and how often durability was polled.
fn run(acks: u64, lost: bool) -> (bool, bool, u64) {
    timely::execute_directly(move |worker| {
        let acked = Arc::new(AtomicU64::new(0));
        let polls = Rc::new(RefCell::new(0u64));
        let writer = AckedWriter {
            written: 0,
            acked: acked.clone(),
            lost,
            polls: polls.clone(),
        };
        let probe = ProbeHandle::<Tick>::new();
        let mut input = worker.dataflow::<Tick, _, _>(|scope| {
            let (input, stream) = scope.new_input::<Vec<u64>>();
            epoch_sink(
                stream,
                Pipeline,
                "TestSink",
                EpochClock::every(200, 100),
                Some(writer),
            )
            .probe_with(&probe);
            input
        });
        input.advance_to(1);
        for r in 0..3 {
            input.send(r);
        }
        input.advance_to(3);
        input.send(3);
        input.send(4);
        input.advance_to(5);
        for _ in 0..50 {
            worker.step();
        }
        // Nothing acknowledged: the sink holds the checkpoint stream at or before epoch 2,
        // and the worker keeps stepping (it is not blocked in the sink).
        let held = probe.less_equal(&2);
        acked.store(acks, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while probe.less_equal(&4) && std::time::Instant::now() < deadline {
            worker.step();
        }
        let passed = !probe.less_equal(&4);
        let polled = *polls.borrow();
        (held, passed, polled)
    })
}

#[test]
fn an_epoch_passes_only_once_its_output_is_acknowledged() {
    let (held, passed, polls) = run(5, false);
    assert!(held, "the epoch passed before any acknowledgement");
    assert!(
        passed,
        "the epochs did not pass after every record was acknowledged"
    );
    assert!(polls > 1, "durability was checked once, as if blocking");
}

#[test]
fn partial_acknowledgement_holds_the_epoch() {
    let (held, passed, _) = run(4, false);
    assert!(held);
    assert!(
        !passed,
        "epoch 4 passed with one of its records unacknowledged"
    );
}

#[test]
fn lost_output_never_lets_the_epoch_pass() {
    let (held, passed, _) = run(5, true);
    assert!(held);
    assert!(!passed);
}

/// Writes 3 records at tick 1, acknowledges `acks` of them (`lost`: the writer reports a
/// loss; `late_acks`: 3 more acknowledgements arrive 50 ms after the input ends, as a
/// producer's callbacks may after its flush), ends the input and runs the dataflow to its
/// end; returns whether the sink sent `CheckpointPart::OutputLost`.
fn ended(acks: u64, lost: bool, late_acks: bool) -> bool {
    timely::execute_directly(move |worker| {
        let acked = Arc::new(AtomicU64::new(acks));
        let later = acked.clone();
        let writer = AckedWriter {
            written: 0,
            acked,
            lost,
            polls: Rc::new(RefCell::new(0)),
        };
        let reported = Rc::new(RefCell::new(false));
        let seen = reported.clone();
        let mut input = worker.dataflow::<Tick, _, _>(|scope| {
            let (input, stream) = scope.new_input::<Vec<u64>>();
            epoch_sink(
                stream,
                Pipeline,
                "TestSink",
                EpochClock::every(200, 100),
                Some(writer),
            )
            .inspect(move |part| {
                if matches!(part, CheckpointPart::OutputLost) {
                    *seen.borrow_mut() = true;
                }
            });
            input
        });
        input.advance_to(1);
        for r in 0..3 {
            input.send(r);
        }
        input.advance_to(5);
        for _ in 0..20 {
            worker.step();
        }
        drop(input);
        if late_acks {
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                later.fetch_add(3, Ordering::Relaxed);
            });
        }
        while worker.step() {}
        let reported = *reported.borrow();
        reported
    })
}

#[test]
fn output_lost_when_the_input_ends_is_reported_to_the_committer() {
    assert!(
        ended(3, true, false),
        "a sink that lost output let its epochs go without saying so"
    );
    assert!(
        ended(2, false, false),
        "a record still unacknowledged at the end was not reported"
    );
    assert!(!ended(3, false, false), "durable output was reported lost");
    assert!(
        !ended(0, false, true),
        "acknowledgements counted just after the flush were taken for a loss"
    );
}
