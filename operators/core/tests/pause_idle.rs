//! A pause is not quiet (DESIGN.md §2: a partition is idle only when it has no lag). While
//! scoring is behind, sources read nothing; a partition that was caught up when the pause
//! began may have records waiting, so however long the pause lasts it must not be reported
//! idle. Otherwise another source that resumes first moves the watermark past the waiting
//! records and they all become late.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use timely::dataflow::operators::Inspect;

use weir_checkpoint::SourcePositions;
use weir_features::dead_letter::DeadLetter;
use weir_features::record::Event;
use weir_features::vocab::Watermark;
use weir_features::watermark::{PartitionWatermarks, SourceProgress};
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::epochs::EpochClock;
use weir_operators::metrics::JobMetrics;
use weir_operators::source_operator::{build_source, Pacing, SourceReader};

const IDLE_TIMEOUT_MS: u64 = 200;

/// One partition that delivered a record at its first poll and then reached its end (caught
/// up), on the wall clock like the Kafka source.
struct CaughtUpReader {
    watermarks: PartitionWatermarks,
    polled: bool,
}

impl SourceReader for CaughtUpReader {
    fn instance(&self) -> u32 {
        0
    }

    fn poll(
        &mut self,
        now_ms: u64,
        _events: &mut Vec<Event>,
        _dead: &mut Vec<DeadLetter>,
    ) -> usize {
        if !self.polled {
            self.polled = true;
            self.watermarks.observe(0, 5_000, now_ms);
            self.watermarks.set_caught_up(0, true);
        }
        0
    }

    fn progress(&self, now_ms: u64) -> SourceProgress {
        self.watermarks.progress(now_ms)
    }

    fn exclude_paused(&mut self, paused_ms: u64, now_ms: u64) {
        self.watermarks.exclude_paused(paused_ms, now_ms);
    }

    fn finished(&self) -> bool {
        false
    }

    fn source_name(&self) -> &str {
        "waiting"
    }

    fn positions(&mut self) -> SourcePositions {
        SourcePositions::default()
    }
}

/// Runs the source for `read_ms`, then pauses it (score backlog) for `pause_ms`; returns the
/// progress reported during the pause.
fn reports_during_pause(read_ms: u64, pause_ms: u64) -> Vec<SourceProgress> {
    let metrics = Arc::new(JobMetrics::default());
    let mut watermarks = PartitionWatermarks::new(0, IDLE_TIMEOUT_MS);
    watermarks.assign(0, weir_operators::clock::unix_ms());
    let reader = CaughtUpReader {
        watermarks,
        polled: false,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let backlog = ScoreBacklog::default();
    let pacing = Pacing {
        stop: stop.clone(),
        metrics: metrics.clone(),
        backlog: backlog.clone(),
        max_lag_ms: None,
        alignment: Default::default(),
    };
    let reports = Arc::new(Mutex::new(Vec::new()));
    let paused = Arc::new(AtomicBool::new(false));
    let (seen, during) = (reports.clone(), paused.clone());
    timely::execute_directly(move |worker| {
        worker.dataflow::<u64, _, _>(|scope| {
            let source = build_source(scope, "waiting", Some(reader), 10, EpochClock::OFF, pacing);
            source.reports.inspect(move |report| {
                if during.load(Ordering::SeqCst) {
                    seen.lock().expect("reports").push(report.progress);
                }
            });
        });
        let run = |ms: u64, worker: &mut timely::worker::Worker| {
            let until = Instant::now() + Duration::from_millis(ms);
            while Instant::now() < until {
                worker.step_or_park(Some(Duration::from_millis(2)));
            }
        };
        run(read_ms, worker);
        backlog.enter();
        paused.store(true, Ordering::SeqCst);
        run(pause_ms, worker);
        paused.store(false, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst); // ends the source, so the dataflow completes
    });
    let reports = reports.lock().expect("reports").clone();
    reports
}

#[test]
fn a_partition_caught_up_before_a_pause_is_not_idle_however_long_the_pause() {
    let reports = reports_during_pause(50, 4 * IDLE_TIMEOUT_MS);
    assert!(reports.len() > 20, "too few reports: {}", reports.len());
    let idle = reports
        .iter()
        .filter(|p| **p == SourceProgress::Idle)
        .count();
    assert_eq!(
        idle,
        0,
        "{idle} of {} reports during the pause said idle",
        reports.len()
    );
    assert!(reports
        .iter()
        .all(|p| *p == SourceProgress::Active(Watermark(5_000))));
}

#[test]
fn a_partition_idle_before_the_pause_stays_idle() {
    let reports = reports_during_pause(2 * IDLE_TIMEOUT_MS, 2 * IDLE_TIMEOUT_MS);
    assert!(
        reports.iter().all(|p| *p == SourceProgress::Idle),
        "an idle partition came back during a pause: {reports:?}"
    );
}
