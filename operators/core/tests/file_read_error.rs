//! An input file that cannot be read stops the job instead of ending the file early
//! (DESIGN.md §7: nothing is skipped silently). Treating a read error as the end of the file
//! would drop its unread lines and flush every window as if the input were complete.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use timely::dataflow::operators::Inspect;

use weir_features::decode::JsonDecoder;
use weir_features::vocab::Watermark;
use weir_features::watermark::SourceProgress;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::epochs::EpochClock;
use weir_operators::file_source::{file_source, FileSourceConfig};
use weir_operators::metrics::JobMetrics;
use weir_operators::source::RecordDecoder;
use weir_operators::source_operator::Pacing;
use weir_operators::Placement;
use weir_testkit::schema::schema;

#[test]
fn a_read_error_stops_the_job_without_declaring_the_end_of_input() {
    // A directory opens like a file on Linux, and reading it fails (EISDIR).
    let dir = std::env::temp_dir().join(format!("weir-read-error-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let schema = schema("user", "ts", &[]);
    let metrics = Arc::new(JobMetrics::default());
    let stop = Arc::new(AtomicBool::new(false));
    let config = FileSourceConfig {
        paths: vec![dir.clone()],
        parallelism: 1,
        placement: Placement::new(1, 1),
        tick_ms: 10,
        decoder: RecordDecoder {
            decoder: JsonDecoder::new(schema),
            key_groups: 16,
            source_name: "unreadable".to_owned(),
            metrics: metrics.clone(),
        },
        max_out_of_orderness_ms: 0,
        max_batch: 64,
        pacing: Pacing {
            stop: stop.clone(),
            metrics: metrics.clone(),
            backlog: ScoreBacklog::default(),
            max_lag_ms: None,
        },
        epochs: EpochClock::OFF,
        resume: BTreeMap::new(),
    };
    let reports = Arc::new(Mutex::new(Vec::new()));
    let seen = reports.clone();
    timely::execute_directly(move |worker| {
        worker.dataflow::<u64, _, _>(|scope| {
            let source = file_source(scope, config).expect("a directory opens");
            source.reports.inspect(move |r| {
                seen.lock().expect("reports").push(r.progress);
            });
        });
    });
    let _ = std::fs::remove_dir(&dir);
    assert_eq!(JobMetrics::get(&metrics.source_read_failures), 1);
    assert!(stop.load(Ordering::SeqCst), "the job was not stopped");
    let reports = reports.lock().expect("reports");
    assert!(
        !reports.contains(&SourceProgress::Active(Watermark::MAX)),
        "the end of input was declared: {reports:?}"
    );
}
