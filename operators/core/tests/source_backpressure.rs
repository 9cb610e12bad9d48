//! Backpressure from scoring to the sources: while a score instance is in the `ScoreBacklog` a
//! source reads nothing (but its ticks go on); once it leaves, the source reads
//! everything. Uses the file source, so no broker is needed.

mod file_input;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use timely::dataflow::operators::Inspect;

use weir_operators::backpressure::ScoreBacklog;
use weir_operators::file_source::file_source;
use weir_operators::metrics::JobMetrics;
use weir_testkit::files::scratch_dir;

use file_input::{file_config, user_lines};

const LINES: u64 = 500;

#[test]
fn a_score_backlog_pauses_the_source_until_it_clears() -> Result<()> {
    let dir = scratch_dir("backpressure");
    let path = dir.join("events.jsonl");
    std::fs::write(&path, user_lines(LINES, |i| i))?;
    let metrics = Arc::new(JobMetrics::default());
    let backlog = ScoreBacklog::default();
    backlog.enter();
    let mut config = file_config(vec![path], "events", &metrics);
    config.stage.pacing.backlog = backlog.clone();
    let seen = Arc::new(AtomicU64::new(0));
    let (seen_w, metrics_w) = (seen.clone(), metrics.clone());
    let (paused_events, paused_pauses) = timely::execute_directly(move |worker| {
        worker.dataflow::<u64, _, _>(|scope| {
            let source = file_source(scope, config).expect("the input file exists");
            source.events.inspect(move |_| {
                seen_w.fetch_add(1, Ordering::SeqCst);
            });
        });
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            worker.step_or_park(Some(Duration::from_millis(5)));
        }
        let paused = (
            seen.load(Ordering::SeqCst),
            JobMetrics::get(&metrics_w.source_pauses),
        );
        backlog.leave();
        while worker.step_or_park(Some(Duration::from_millis(5))) {}
        paused
    });
    let _ = std::fs::remove_dir_all(&dir);
    ensure!(
        paused_events == 0,
        "{paused_events} events read while paused"
    );
    ensure!(paused_pauses > 0, "the source never paused");
    ensure!(
        metrics.events_in() == LINES,
        "{} of {LINES} events read after the backlog cleared",
        metrics.events_in()
    );
    Ok(())
}
