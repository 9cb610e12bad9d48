//! Lateness and idleness of the window operator (DESIGN.md §2), end to end through
//! `build_source` → `window_features` on real Timely workers, with scripted sources and an
//! injected clock ([`scripted`]): late records go to the late stream and are counted per
//! partition; records within the allowed lateness re-emit their window as a revision; an idle
//! partition (caught up and quiet) stops holding the watermark but a lagging one never does; an
//! idle source instance does not hold windows and cannot move the watermark back when it wakes
//! up; the end of input fires every open window.
//!
//! Every assertion is about what fired after which script step, which the harness makes
//! independent of wall-clock timing.

mod scripted;

use scripted::{rec, run, Scenario, Step};
use weir_features::dead_letter::DeadLetterReason;
use weir_features::vocab::SourcePosition;

type TestResult = Result<(), String>;

/// `(key, window_start, revision, [count, sum])`.
type RowSummary = (String, i64, u32, Vec<f64>);

fn row(key: &str, window_start: i64, revision: u32, n: f64, sum: f64) -> RowSummary {
    (key.to_owned(), window_start, revision, vec![n, sum])
}

fn scenario(workers: usize, partitions: Vec<i32>, steps: Vec<Step>) -> Scenario {
    Scenario {
        workers,
        partitions,
        caught_up: Vec::new(),
        start_clock_ms: 0,
        max_out_of_orderness_ms: 0,
        idle_timeout_ms: u64::MAX,
        allowed_lateness_ms: 0,
        steps,
    }
}

fn steps_of<T>(fired: &[scripted::Fired<T>]) -> Vec<Option<usize>> {
    fired.iter().map(|f| f.step).collect()
}

#[test]
fn late_record_goes_to_the_late_stream_and_is_counted_for_its_partition() -> TestResult {
    let outcome = run(scenario(
        1,
        vec![0, 1],
        vec![
            Step::on(0).records([rec(0, "a", 100, 1.0), rec(1, "b", 500, 2.0)]),
            // Both partitions pass 1000: WM = 2500 fires [0, 1000).
            Step::on(0).records([rec(0, "a", 2_500, 10.0), rec(1, "b", 2_600, 20.0)]),
            // 900 < WM 2500 - 0: late. Partition 1's third record (offset 2).
            Step::on(0).records([rec(1, "b", 900, 100.0)]),
        ],
    ))?;
    assert_eq!(
        outcome.row_summary(),
        vec![row("a", 0, 0, 1.0, 1.0), row("b", 0, 0, 1.0, 2.0)],
        "the late record is in no row and causes no revision"
    );
    assert_eq!(steps_of(&outcome.rows), vec![Some(1), Some(1)]);

    assert_eq!(outcome.late.len(), 1, "{:?}", outcome.late);
    let letter = &outcome.late[0];
    assert_eq!(letter.step, Some(2));
    assert_eq!(letter.item.reason, DeadLetterReason::Late);
    assert_eq!(
        letter.item.position,
        SourcePosition {
            partition: 1,
            offset: 2
        }
    );
    assert_eq!(letter.item.timestamp, Some(900));
    assert_eq!(letter.item.key.as_deref(), Some(&b"b"[..]));
    assert_eq!(letter.item.topic, "scripted");
    let raw = String::from_utf8_lossy(&letter.item.raw);
    assert!(raw.contains("900") && raw.contains("100"), "{raw}");

    assert_eq!(outcome.metrics.late_by_partition(), vec![(1, 1)]);
    assert_eq!(
        outcome.metrics.dead_letters_by_reason(),
        vec![(DeadLetterReason::Late, 1)]
    );
    Ok(())
}

#[test]
fn records_within_the_allowed_lateness_re_emit_their_window_as_a_revision() -> TestResult {
    let mut s = scenario(
        1,
        vec![0],
        vec![
            Step::on(0).records([rec(0, "a", 100, 1.0), rec(0, "a", 500, 2.0)]),
            // WM 1500 fires [0, 1000).
            Step::on(0).records([rec(0, "a", 1_500, 5.0)]),
            // 700 >= 1500 - 1000: updates [0, 1000), which fires again as revision 1.
            Step::on(0).records([rec(0, "a", 700, 10.0)]),
            // 200 < 1500 - 1000: late.
            Step::on(0).records([rec(0, "a", 200, 100.0)]),
            // WM 2600 fires [1000, 2000); WM - lateness = 1600 passes [0, 1000): dropped.
            Step::on(0).records([rec(0, "a", 2_600, 7.0)]),
            // 999 < 1600: late, although its window was still open for revisions a step ago.
            Step::on(0).records([rec(0, "a", 999, 1_000.0)]),
        ],
    );
    s.allowed_lateness_ms = 1_000;
    let outcome = run(s)?;
    assert_eq!(
        outcome.row_summary(),
        vec![
            row("a", 0, 0, 2.0, 3.0),
            row("a", 0, 1, 3.0, 13.0),
            row("a", 1_000, 0, 1.0, 5.0),
        ]
    );
    assert_eq!(steps_of(&outcome.rows), vec![Some(1), Some(2), Some(4)]);
    let late: Vec<(Option<usize>, i64)> = outcome
        .late
        .iter()
        .map(|f| (f.step, f.item.position.offset))
        .collect();
    assert_eq!(late, vec![(Some(3), 4), (Some(5), 6)]);
    assert_eq!(outcome.metrics.late_by_partition(), vec![(0, 2)]);
    Ok(())
}

#[test]
fn idle_partition_releases_the_watermark_but_a_lagging_one_holds_it() -> TestResult {
    let mut s = scenario(
        1,
        vec![0, 1],
        vec![
            Step::on(0)
                .at(0)
                .records([rec(0, "a", 100, 1.0), rec(1, "b", 200, 2.0)]),
            // Partition 1 holds WM at 200.
            Step::on(0).at(1_000).records([rec(0, "a", 1_500, 3.0)]),
            // Caught up, but quiet for 3000 < idle timeout 5000: still holds.
            Step::on(0).at(3_000).caught_up(1, true),
            // Quiet for ages but lagging: holds, however long.
            Step::on(0).at(100_000).caught_up(1, false),
            Step::on(0).at(100_001).records([rec(0, "a", 2_500, 4.0)]),
            // Caught up and quiet past the timeout: idle, WM = partition 0's 2500.
            Step::on(0).at(100_002).caught_up(1, true),
            // A record wakes partition 1 up: it counts again (WM stays 2500).
            Step::on(0).at(100_003).records([rec(1, "b", 2_600, 5.0)]),
            // WM = min(3100, 2600): [2000, 3000) still held by partition 1.
            Step::on(0).at(100_004).records([rec(0, "a", 3_100, 6.0)]),
            // Partition 1 advances: WM 3100.
            Step::on(0).at(100_005).records([rec(1, "b", 3_200, 7.0)]),
        ],
    );
    s.idle_timeout_ms = 5_000;
    let outcome = run(s)?;
    assert_eq!(
        outcome.row_summary(),
        vec![
            row("a", 0, 0, 1.0, 1.0),
            row("b", 0, 0, 1.0, 2.0),
            row("a", 1_000, 0, 1.0, 3.0),
            row("a", 2_000, 0, 1.0, 4.0),
            row("b", 2_000, 0, 1.0, 5.0),
        ]
    );
    assert_eq!(
        steps_of(&outcome.rows),
        vec![Some(5), Some(5), Some(5), Some(8), Some(8)],
        "nothing fires while partition 1 is lagging or not quiet long enough"
    );
    assert!(outcome.late.is_empty(), "{:?}", outcome.late);
    Ok(())
}

#[test]
fn idle_source_instance_does_not_hold_windows_nor_move_the_watermark_back() -> TestResult {
    let mut s = scenario(
        2,
        vec![0, 1],
        vec![
            Step::on(0).records([rec(0, "a", 100, 1.0), rec(0, "c", 300, 2.0)]),
            // Instance 1 (partition 1, caught up, quiet since fake time 0) is Idle: WM 2500.
            Step::on(0).records([rec(0, "a", 2_500, 3.0)]),
            // Instance 1 wakes up far behind: its records are late, WM stays 2500.
            Step::on(1).records([rec(1, "b", 200, 7.0)]),
            Step::on(1).records([rec(1, "b", 1_200, 8.0)]),
            // Instance 1 now holds at 1200 (< 2500): no window fires, none re-fires.
            Step::on(0).records([rec(0, "a", 3_500, 4.0)]),
            // Instance 1 passes 3000: WM 3100 fires [2000, 3000).
            Step::on(1).records([rec(1, "b", 3_100, 9.0)]),
        ],
    );
    s.caught_up = vec![1];
    s.idle_timeout_ms = 1_000;
    s.start_clock_ms = 5_000;
    let outcome = run(s)?;
    assert_eq!(
        outcome.row_summary(),
        vec![
            row("a", 0, 0, 1.0, 1.0),
            row("c", 0, 0, 1.0, 2.0),
            row("a", 2_000, 0, 1.0, 3.0),
        ]
    );
    assert_eq!(steps_of(&outcome.rows), vec![Some(1), Some(1), Some(5)]);
    let late: Vec<(Option<usize>, i32, i64)> = outcome
        .late
        .iter()
        .map(|f| (f.step, f.item.position.partition, f.item.position.offset))
        .collect();
    assert_eq!(late, vec![(Some(2), 1, 0), (Some(3), 1, 1)]);
    assert_eq!(outcome.metrics.late_by_partition(), vec![(1, 2)]);
    Ok(())
}

#[test]
fn end_of_input_fires_every_open_window() -> TestResult {
    let mut s = scenario(
        1,
        vec![0, 1],
        vec![
            Step::on(0).records([
                rec(0, "a", 100, 1.0),
                rec(0, "a", 2_200, 2.0),
                rec(1, "b", 1_500, 3.0),
            ]),
            Step::on(0).end_of_input(),
        ],
    );
    // Watermarks far behind the records: only the end of input can fire anything.
    s.max_out_of_orderness_ms = 10_000;
    let outcome = run(s)?;
    assert_eq!(
        outcome.row_summary(),
        vec![
            row("a", 0, 0, 1.0, 1.0),
            row("b", 1_000, 0, 1.0, 3.0),
            row("a", 2_000, 0, 1.0, 2.0),
        ]
    );
    assert_eq!(steps_of(&outcome.rows), vec![Some(1), Some(1), Some(1)]);
    Ok(())
}

#[test]
fn end_of_input_waits_for_every_source_instance() -> TestResult {
    let mut s = scenario(
        2,
        vec![0, 1],
        vec![
            Step::on(0).records([rec(0, "a", 100, 1.0), rec(0, "a", 2_200, 2.0)]),
            Step::on(1).records([rec(1, "b", 1_500, 3.0)]),
            // Instance 0 done (MAX), instance 1 still at 1500 - 10000: nothing fires.
            Step::on(0).end_of_input(),
            Step::on(1).end_of_input(),
        ],
    );
    s.max_out_of_orderness_ms = 10_000;
    let outcome = run(s)?;
    assert_eq!(
        outcome.row_summary(),
        vec![
            row("a", 0, 0, 1.0, 1.0),
            row("b", 1_000, 0, 1.0, 3.0),
            row("a", 2_000, 0, 1.0, 2.0),
        ]
    );
    assert_eq!(steps_of(&outcome.rows), vec![Some(3), Some(3), Some(3)]);
    Ok(())
}
