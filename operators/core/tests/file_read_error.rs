//! An input file that cannot be read stops the job instead of ending the file early
//! (DESIGN.md §7: nothing is skipped silently). Treating a read error as the end of the file
//! would drop its unread lines and flush every window as if the input were complete.

mod file_input;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use timely::dataflow::operators::Inspect;

use weir_features::vocab::Watermark;
use weir_features::watermark::SourceProgress;
use weir_operators::file_source::file_source;
use weir_operators::metrics::JobMetrics;
use weir_testkit::files::scratch_dir;

use file_input::file_config;

#[test]
fn a_read_error_stops_the_job_without_declaring_the_end_of_input() {
    // A directory opens like a file on Linux, and reading it fails (EISDIR).
    let dir = scratch_dir("read-error");
    let metrics = Arc::new(JobMetrics::default());
    let config = file_config(vec![dir.clone()], "unreadable", &metrics);
    let stop = config.stage.pacing.stop.clone();
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
