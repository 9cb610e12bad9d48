//! Several windows per key (issue #3 item 3): the primary window's firings emit vectors whose
//! secondary-window features take that window's latest window closed at or before the primary
//! window's end, or the empty-window values when an aligned window had no records.

mod common;

use common::{event, user_ts_x_schema};
use std::collections::BTreeMap;

use anyhow::Result;

use weir_features::aggregate::AggKind::{Count, Sum};
use weir_features::job_features::JobFeatures;
use weir_features::job_features::Trigger;
use weir_features::keyed_features::KeyedFeatures;
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::vocab::Watermark;
use weir_features::window::WindowSpec;
use weir_testkit::spec::{over, spec};

fn run(job: &JobFeatures, events: &[Event]) -> Vec<FeatureRow> {
    let mut state = KeyedFeatures::new(job, 0);
    let mut rows = Vec::new();
    let mut max_ts = i64::MIN;
    for e in events {
        state.apply(job, e, Watermark(max_ts));
        max_ts = max_ts.max(e.ts);
        state.fire(job, Watermark(max_ts), &mut rows);
    }
    state.fire(job, Watermark::MAX, &mut rows);
    rows
}

#[test]
fn secondary_features_take_their_latest_closed_window_as_of_the_primary_end() -> Result<()> {
    let schema = user_ts_x_schema()?;
    let named = BTreeMap::from([
        ("five".to_owned(), WindowSpec::Tumbling { size: 300_000 }),
        (
            "sess".to_owned(),
            WindowSpec::Session {
                gap: 30_000,
                max_length: 3_600_000,
            },
        ),
    ]);
    let specs = vec![
        spec("count_1m", Count, None, None),
        over(spec("count_5m", Count, None, None), "five"),
        spec("sum_1m", Sum, Some("x"), None),
        over(spec("sum_session", Sum, Some("x"), None), "sess"),
    ];
    let job = JobFeatures::compile(
        &specs,
        &schema,
        &WindowSpec::Tumbling { size: 60_000 },
        &named,
    )?;
    assert_eq!(
        job.names(),
        ["count_1m", "count_5m", "sum_1m", "sum_session"]
    );
    let minute = 60_000;
    // Minutes 0..5 hold 1 event each at +10s; then minute 6 at +10s (5-minute window [0,5m)
    // closed with 5 events; [5m,10m) not closed when minute 6 fires). The session of minutes
    // 0..4 ends at 4m+10s+30s; minute 5 and 6 events start new sessions (gap 30 s).
    let events: Vec<Event> = [0, 1, 2, 3, 4, 6]
        .iter()
        .enumerate()
        .map(|(i, m)| event(&schema, "k", m * minute + 10_000, 1.0 + i as f64, i as i64))
        .collect();
    let rows = run(&job, &events);
    let by_end: BTreeMap<i64, Vec<f64>> = rows
        .iter()
        .map(|r| (r.window_end, r.values.to_vec()))
        .collect();
    // Minute 0 window [0,1m): no 5m window closed yet → the empty window's count 0; the
    // session [10s, 40s) closed before 1m → its sum 1.0.
    let first = &by_end[&minute];
    assert_eq!(first[..], [1.0, 0.0, 1.0, 1.0]);
    // Minute 4 window [4m,5m): the 5m window ending at 5m is closed as of 5m → 5 events.
    assert_eq!(by_end[&(5 * minute)][1], 5.0);
    // Minute 6 window [6m,7m): latest 5m window closed at or before 7m is [0,5m) → 5; the
    // sessions closed by 7m: the sessions are separate per minute (gap 30 s < 50 s between
    // events), so the latest closed one by 7m is minute 4's (sum 5.0); minute 6's session
    // [6m+10s, 6m+40s) is also closed by 7m → its sum 6.0.
    let last = &by_end[&(7 * minute)];
    assert_eq!(last[0..3], [1.0, 5.0, 6.0]);
    assert_eq!(last[3], 6.0);
    Ok(())
}

#[test]
fn unknown_window_and_no_primary_feature_are_rejected() -> Result<()> {
    let schema = user_ts_x_schema()?;
    let primary = WindowSpec::Tumbling { size: 60_000 };
    let named = BTreeMap::from([("five".to_owned(), WindowSpec::Tumbling { size: 300_000 })]);
    let err = JobFeatures::compile(
        &[over(spec("c", Count, None, None), "ten")],
        &schema,
        &primary,
        &named,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("window `ten` is not defined"), "{err}");
    let err = JobFeatures::compile(
        &[over(spec("c", Count, None, None), "five")],
        &schema,
        &primary,
        &named,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("primary [window]"), "{err}");
    Ok(())
}

#[test]
fn schedule_emits_each_key_latest_closed_windows_at_every_point() -> Result<()> {
    let schema = user_ts_x_schema()?;
    let minute = 60_000;
    let job = JobFeatures::compile(
        &[
            spec("count_1m", Count, None, None),
            spec("sum_1m", Sum, Some("x"), None),
        ],
        &schema,
        &WindowSpec::Tumbling { size: minute },
        &BTreeMap::new(),
    )?
    .with_trigger(Trigger::Schedule { every: 30_000 })?;
    // Key a: two events in minute 0, one in minute 2. Key b: one event in minute 1.
    let events = vec![
        event(&schema, "a", 10_000, 1.0, 0),
        event(&schema, "a", 20_000, 2.0, 1),
        event(&schema, "b", 70_000, 5.0, 2),
        event(&schema, "a", 130_000, 4.0, 3),
    ];
    let rows = run(&job, &events);
    let got: Vec<(String, i64, i64, Vec<f64>)> = rows
        .iter()
        .map(|r| {
            (
                r.key.to_string(),
                r.window_start,
                r.window_end,
                r.values.to_vec(),
            )
        })
        .collect();
    let row = |k: &str, t: i64, v: [f64; 2]| (k.to_owned(), t - 30_000, t, v.to_vec());
    // The window [0, 1m) is a's latest closed window at 60 s and 90 s; at 120 s and 150 s the
    // latest closed window [1m, 2m) is empty for a (count 0, sum missing) and b's; at 180 s
    // and 210 s a's [2m, 3m). Points with no window that had records emit nothing.
    let expected = vec![
        row("a", 60_000, [2.0, 3.0]),
        row("a", 90_000, [2.0, 3.0]),
        row("b", 120_000, [1.0, 5.0]),
        row("b", 150_000, [1.0, 5.0]),
        row("a", 180_000, [1.0, 4.0]),
        row("a", 210_000, [1.0, 4.0]),
    ];
    assert_eq!(got, expected);
    assert!(rows.iter().all(|r| r.revision == 0));
    Ok(())
}

#[test]
fn schedule_rejects_over_range_windows_and_non_positive_periods() -> Result<()> {
    let schema = user_ts_x_schema()?;
    let count = [spec("c", Count, None, None)];
    let compile =
        |window: WindowSpec| JobFeatures::compile(&count, &schema, &window, &BTreeMap::new());
    let err = compile(WindowSpec::OverRange { range: 60_000 })?
        .with_trigger(Trigger::Schedule { every: 60_000 })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("over_range"), "{err}");
    let err = compile(WindowSpec::Tumbling { size: 60_000 })?
        .with_trigger(Trigger::Schedule { every: 0 })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("every must be > 0"), "{err}");
    Ok(())
}

#[test]
fn a_late_primary_revision_still_finds_its_secondary_window() -> Result<()> {
    let schema = user_ts_x_schema()?;
    let named = BTreeMap::from([("five".to_owned(), WindowSpec::Tumbling { size: 300_000 })]);
    let specs = vec![
        spec("count_1m", Count, None, None),
        over(spec("count_5m", Count, None, None), "five"),
    ];
    let job = JobFeatures::compile(
        &specs,
        &schema,
        &WindowSpec::Tumbling { size: 60_000 },
        &named,
    )?;
    let minute = 60_000;
    let lateness = 20 * minute;
    let mut state = KeyedFeatures::new(&job, lateness);
    let mut rows = Vec::new();
    let mut watermark = Watermark::MIN;
    // 5-minute windows [0,5m) with 2 records, [5m,10m) with 1, [15m,20m) with 1; then the
    // watermark reaches 30m, and a record at 11m is late but within the allowed lateness
    // (30m - 20m = 10m): its 1-minute window [11m,12m) is emitted and must see, as of 12m,
    // the 5-minute window [5m,10m).
    for (i, m) in [1, 2, 6, 16, 30, 11].into_iter().enumerate() {
        let e = event(&schema, "k", m * minute, 1.0, i as i64);
        state.apply(&job, &e, watermark);
        watermark = Watermark(watermark.0.max(e.ts));
        state.fire(&job, watermark, &mut rows);
    }
    let late = rows
        .iter()
        .find(|r| r.window_end == 12 * minute)
        .expect("the late record's window was emitted");
    assert_eq!(
        late.values[..],
        [1.0, 1.0],
        "the 5-minute window as of 12m was dropped before no primary row could ask for it"
    );
    Ok(())
}

/// Schedule rows after `state` applies a record at 9:59.7 (allowed late) at watermark
/// 10:00.5 and fires at 10:00.6.
fn rows_after_a_late_record(job: &JobFeatures, mut state: KeyedFeatures) -> Result<Vec<i64>> {
    let schema = user_ts_x_schema()?;
    let mut rows = Vec::new();
    let e = event(&schema, "k", 599_700, 1.0, 0);
    state.apply(job, &e, Watermark(600_500));
    state.fire(job, Watermark(600_600), &mut rows);
    Ok(rows.iter().map(|r| r.window_end).collect())
}

#[test]
fn a_restored_schedule_does_not_re_evaluate_points_passed_before_the_checkpoint() -> Result<()> {
    let schema = user_ts_x_schema()?;
    let minute = 60_000;
    let job = JobFeatures::compile(
        &[spec("count_1m", Count, None, None)],
        &schema,
        &WindowSpec::Tumbling { size: minute },
        &BTreeMap::new(),
    )?
    .with_trigger(Trigger::Schedule { every: minute })?;
    let mut state = KeyedFeatures::new(&job, 5 * minute);
    let mut rows = Vec::new();
    state.fire(&job, Watermark(65_000), &mut rows);
    // The shard's last snapshot: schedule points up to 65 s evaluated.
    let snapshot = state.encode()?;
    // Points up to 10:00.5 pass with nothing to emit, which does not rewrite the snapshot;
    // the checkpoint is taken at that watermark.
    state.fire(&job, Watermark(600_500), &mut rows);
    assert!(rows.is_empty(), "no row expected: {rows:?}");
    let uninterrupted = rows_after_a_late_record(&job, state)?;
    let mut restored = KeyedFeatures::decode(&job, &snapshot)?;
    restored.resume(0, Some(600_500));
    assert_eq!(
        rows_after_a_late_record(&job, restored)?,
        uninterrupted,
        "the restored run emitted rows at schedule points the uninterrupted run had passed"
    );
    Ok(())
}
