//! The file sink's counters: its one writer instance counts every line it is handed and every
//! line it wrote, with their bytes, under the sink's `operator` label (instance 0), beside the
//! run's own output counter.

use std::sync::Arc;

use anyhow::Result;
use timely::dataflow::operators::Input;

use weir_features::vocab::Tick;
use weir_operators::epochs::EpochClock;
use weir_operators::file_sink::{FileSinkConfig, JsonlSink, Lines};
use weir_operators::metrics::{InstanceLabels, JobMetrics, Operator};
use weir_operators::placement::Placement;

#[test]
fn the_writer_counts_lines_in_and_written_with_their_bytes() -> Result<()> {
    let dir = weir_testkit::files::Scratch::new("file-sink");
    let path = dir.path().join("out.jsonl");
    let metrics = Arc::new(JobMetrics::default());
    let config = FileSinkConfig {
        path: path.clone(),
        placement: Placement::new(1, 1),
        metrics: metrics.clone(),
        operator: Operator::DeadLetterSink,
        epochs: EpochClock::OFF,
        append: false,
    };
    let built = timely::execute_directly(move |worker| {
        let mut built = Ok(());
        let mut input = worker.dataflow::<Tick, _, _>(|scope| {
            let (input, stream) = scope.new_input::<Vec<u64>>();
            // Two lines per record.
            let encode = |n: &u64, lines: &mut Lines<'_>| {
                lines.line(|out| out.extend(format!("{{\"n\":{n}}}").as_bytes()));
                lines.line(|out| out.extend(b"{}"));
            };
            built = stream
                .jsonl_sink(config, encode, |m| &m.dead_letters_delivered)
                .map(drop);
            input
        });
        for n in [1, 22, 333] {
            input.send(n);
        }
        drop(input);
        while worker.step() {}
        built
    });
    built?;
    let written = std::fs::read(&path)?;
    let labels = |operator| InstanceLabels {
        operator,
        instance: 0,
    };
    let sink = labels(Operator::DeadLetterSink);
    assert_eq!(metrics.records_in.handle(&sink).get(), 6);
    assert_eq!(metrics.records_out.handle(&sink).get(), 6);
    assert_eq!(metrics.sink_bytes.handle(&sink).get(), written.len() as u64);
    assert_eq!(metrics.dead_letters_delivered.get(), 6);
    assert_eq!(
        metrics
            .records_in
            .sum_where(|l| l.operator == Operator::ScoreSink),
        0
    );
    Ok(())
}
