//! An input file that cannot be read to its end stops the job instead of ending the file early
//! (DESIGN.md §7: nothing is skipped silently). Treating a read error as the end of the file
//! would drop its unread lines and flush every window as if the input were complete. The error
//! here is a gzip file cut in half (a download that stopped): its first lines decompress, then
//! the stream ends inside a deflate block.

mod file_input;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use timely::dataflow::operators::Inspect;

use weir_features::vocab::Watermark;
use weir_features::watermark::SourceProgress;
use weir_operators::file_source::file_source;
use weir_operators::metrics::JobMetrics;
use weir_testkit::files::scratch_dir;

use file_input::{file_config, user_lines};

const LINES: u64 = 5_000;

#[test]
fn a_read_error_stops_the_job_without_declaring_the_end_of_input() {
    let dir = scratch_dir("read-error");
    let path = dir.join("events.jsonl.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(user_lines(LINES, |i| i % 50).as_bytes())
        .expect("compress");
    let compressed = encoder.finish().expect("compress");
    std::fs::write(&path, &compressed[..compressed.len() / 2]).expect("write");
    let metrics = Arc::new(JobMetrics::default());
    let config = file_config(vec![path], "truncated", &metrics);
    let stop = config.stage.pacing.stop.clone();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let events = Arc::new(AtomicU64::new(0));
    let (seen, counted) = (reports.clone(), events.clone());
    timely::execute_directly(move |worker| {
        worker.dataflow::<u64, _, _>(|scope| {
            let source = file_source(scope, config).expect("a gzip file opens");
            source.reports.inspect(move |r| {
                seen.lock().expect("reports").push(r.progress);
            });
            source.events.inspect(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            });
        });
    });
    let _ = std::fs::remove_dir_all(&dir);
    let events = events.load(Ordering::SeqCst);
    assert!(
        events > 0 && events < LINES,
        "{events} of {LINES} lines read"
    );
    assert_eq!(JobMetrics::get(&metrics.source_read_failures), 1);
    assert!(stop.load(Ordering::SeqCst), "the job was not stopped");
    let reports = reports.lock().expect("reports");
    assert!(
        !reports.contains(&SourceProgress::Active(Watermark::MAX)),
        "the end of input was declared: {reports:?}"
    );
}
