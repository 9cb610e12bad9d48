//! Backpressure from scoring to the sources: while a score instance is in the `ScoreBacklog` a
//! source reads nothing (but its ticks go on); once it leaves, the source reads
//! everything. Uses the file source, so no broker is needed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use timely::dataflow::operators::Inspect;

use weir_features::decode::JsonDecoder;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::epochs::EpochClock;
use weir_operators::file_source::{file_source, FileSourceConfig};
use weir_operators::metrics::JobMetrics;
use weir_operators::source::RecordDecoder;
use weir_operators::source_operator::Pacing;
use weir_operators::Placement;
use weir_testkit::schema::schema;

const LINES: u64 = 500;

#[test]
fn a_score_backlog_pauses_the_source_until_it_clears() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-backpressure-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("events.jsonl");
    let text: String = (0..LINES)
        .map(|i| format!("{{\"user\":\"u{i}\",\"ts\":{}}}\n", 1_000 + i))
        .collect();
    std::fs::write(&path, text)?;
    let schema = schema("user", "ts", &[]);
    let metrics = Arc::new(JobMetrics::default());
    let backlog = ScoreBacklog::default();
    backlog.enter();
    let config = FileSourceConfig {
        paths: vec![path],
        parallelism: 1,
        placement: Placement::new(1, 1),
        tick_ms: 10,
        decoder: RecordDecoder {
            decoder: JsonDecoder::new(schema),
            key_groups: 16,
            source_name: "events".to_owned(),
            metrics: metrics.clone(),
        },
        max_out_of_orderness_ms: 0,
        max_batch: 64,
        pacing: Pacing {
            stop: Arc::new(AtomicBool::new(false)),
            metrics: metrics.clone(),
            backlog: backlog.clone(),
            max_lag_ms: None,
        },
        epochs: EpochClock::OFF,
        resume: BTreeMap::new(),
    };
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
        JobMetrics::get(&metrics.events_in) == LINES,
        "{} of {LINES} events read after the backlog cleared",
        JobMetrics::get(&metrics.events_in)
    );
    Ok(())
}
