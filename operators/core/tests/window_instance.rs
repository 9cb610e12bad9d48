//! [`WindowInstance`] without Timely: ticks of records and watermark reports in, rows and late
//! dead letters out, state TTL expiry on its interval, and snapshots that restore into an
//! instance that goes on as the original would.

use std::sync::Arc;

use weir_checkpoint::KeyGroupRange;
use weir_features::aggregate::AggKind::{Count, Sum};
use weir_features::dead_letter::DeadLetterReason;
use weir_features::feature::FeatureSet;
use weir_features::job_features::JobFeatures;
use weir_features::record::{Event, Value};
use weir_features::row::FeatureRow;
use weir_features::state_shards::SHARDS;
use weir_features::vocab::Watermark;
use weir_features::watermark::{SourceProgress, WatermarkReport};
use weir_features::window::WindowSpec;
use weir_operators::metrics::JobMetrics;
use weir_operators::window_instance::{WindowInstance, WindowLogic, EXPIRY_INTERVAL_MS};
use weir_testkit::event::text;
use weir_testkit::schema::{schema, F64};
use weir_testkit::spec::spec;

/// Key groups of the test instances.
const KEY_GROUPS: u32 = 64;
/// Tumbling window size of the test job.
const WINDOW_MS: i64 = 1_000;

type TestResult = Result<(), String>;

/// Features `n = count()` and `x_sum = sum(x)` of `x` over tumbling windows of [`WINDOW_MS`],
/// records keyed by `k` at event time `ts`.
fn logic(allowed_lateness_ms: i64, state_ttl_ms: Option<i64>) -> Result<WindowLogic, String> {
    let schema = schema("k", "ts", &[("x", F64)]);
    let specs = [
        spec("n", Count, None, None),
        spec("x_sum", Sum, Some("x"), None),
    ];
    let features = FeatureSet::compile(&specs, &schema).map_err(|e| format!("features: {e}"))?;
    Ok(WindowLogic {
        features: JobFeatures::single(WindowSpec::Tumbling { size: WINDOW_MS }, features),
        schema,
        allowed_lateness_ms,
        source_name: "clicks".to_owned(),
        state_ttl_ms,
    })
}

/// An instance owning every key group, fed by `sources` source instances.
fn instance(logic: WindowLogic, sources: usize) -> (WindowInstance, Arc<JobMetrics>) {
    let metrics = Arc::new(JobMetrics::default());
    let all = KeyGroupRange {
        lo: 0,
        hi: KEY_GROUPS,
    };
    let window = WindowInstance::new(
        logic,
        all,
        (KEY_GROUPS, SHARDS),
        sources,
        None,
        metrics.clone(),
    );
    (window, metrics)
}

fn event(key: &str, ts: i64, x: f64, offset: i64) -> Event {
    let values = [text(key), Value::Num(ts as f64), Value::Num(x)];
    weir_testkit::event::event(key, ts)
        .values(values)
        .key_groups(KEY_GROUPS)
        .offset(offset)
        .build()
}

fn report(source: u32, watermark: i64) -> WatermarkReport {
    WatermarkReport {
        source,
        progress: SourceProgress::Active(Watermark(watermark)),
    }
}

/// The rows `window.fire` emits with no row budget, collected, and checked against the
/// count it returns.
fn fire(window: &mut WindowInstance, now_ms: i64, fired_at_ns: u64) -> Vec<FeatureRow> {
    let mut rows = Vec::new();
    let fired = window.fire(now_ms, fired_at_ns, usize::MAX, &mut rows);
    assert!(
        fired.complete,
        "without a budget one call fires every shard"
    );
    assert_eq!(
        fired.rows,
        rows.len(),
        "fire's count is the rows it emitted"
    );
    rows
}

/// `(key, window_start, revision, [count, sum])` of each row.
fn summary(rows: &[FeatureRow]) -> Vec<(String, i64, u32, Vec<f64>)> {
    rows.iter()
        .map(|r| {
            let key = r.key.as_str().to_owned();
            (key, r.window_start, r.revision, r.values.to_vec())
        })
        .collect()
}

#[test]
fn a_tick_applies_its_records_before_its_reports_fire_windows() -> TestResult {
    let (mut window, _) = instance(logic(0, None)?, 1);
    let batch = [
        event("a", 100, 1.0, 0),
        event("a", 900, 2.0, 1),
        event("b", 1_500, 5.0, 2),
    ];
    let late = window.apply_tick([&batch[..]], &[report(0, 1_000)], 0);
    assert!(late.is_empty());
    let rows = fire(&mut window, 0, 42);
    assert_eq!(summary(&rows), vec![("a".to_owned(), 0, 0, vec![2.0, 3.0])]);
    assert!(rows.iter().all(|r| r.fired_at_ns == 42));
    // The next tick's report closes b's window; nothing fires twice.
    window.apply_tick([], &[report(0, 2_000)], 0);
    let rows = fire(&mut window, 0, 43);
    assert_eq!(
        summary(&rows),
        vec![("b".to_owned(), 1_000, 0, vec![1.0, 5.0])]
    );
    assert!(fire(&mut window, 0, 44).is_empty());
    Ok(())
}

#[test]
fn a_tick_fired_in_parts_of_a_row_budget_emits_the_rows_of_one_firing() -> TestResult {
    let batch: Vec<Event> = (0..200)
        .map(|i| event(&format!("k{i}"), 100 + i, i as f64, i))
        .collect();
    let tick = |window: &mut WindowInstance| {
        window.apply_tick([&batch[..]], &[report(0, WINDOW_MS)], 0);
    };
    let (mut whole, _) = instance(logic(0, None)?, 1);
    tick(&mut whole);
    let expected = summary(&fire(&mut whole, 0, 7));
    assert_eq!(expected.len(), 200);

    let (mut parts, _) = instance(logic(0, None)?, 1);
    tick(&mut parts);
    let budget = 5;
    let (mut rows, mut calls) = (Vec::new(), 0);
    loop {
        calls += 1;
        let before = rows.len();
        let fired = parts.fire(0, 7, budget, &mut rows);
        assert_eq!(fired.rows, rows.len() - before);
        if fired.complete {
            break;
        }
        assert!(
            fired.rows >= budget,
            "a part stops only once it has its budget"
        );
    }
    assert!(
        calls > 200 / (2 * budget),
        "{calls} calls for 200 rows in parts of {budget}"
    );
    assert_eq!(summary(&rows), expected, "the same rows in the same order");
    assert!(fire(&mut parts, 0, 8).is_empty(), "nothing fires twice");
    Ok(())
}

#[test]
fn the_watermark_is_the_minimum_over_every_source() -> TestResult {
    let (mut window, _) = instance(logic(0, None)?, 2);
    window.apply_tick([&[event("a", 100, 1.0, 0)][..]], &[report(0, 5_000)], 0);
    assert!(
        fire(&mut window, 0, 0).is_empty(),
        "source 1 has not reported yet"
    );
    window.apply_tick([], &[report(1, 1_000)], 0);
    assert_eq!(window.watermark(), Watermark(1_000));
    assert_eq!(fire(&mut window, 0, 0).len(), 1);
    Ok(())
}

#[test]
fn records_behind_the_allowed_lateness_become_counted_dead_letters() -> TestResult {
    let (mut window, metrics) = instance(logic(500, None)?, 1);
    window.apply_tick([&[event("a", 1_200, 1.0, 0)][..]], &[report(0, 2_000)], 0);
    fire(&mut window, 0, 0);
    // 1_600 >= 2_000 - 500: inside the allowed lateness, it revises its window.
    let batch = [event("a", 1_600, 4.0, 1), event("a", 1_400, 9.0, 2)];
    let late = window.apply_tick([&batch[..]], &[], 0);
    assert_eq!(late.len(), 1);
    let letter = &late[0];
    assert_eq!(letter.reason, DeadLetterReason::Late);
    assert_eq!(letter.topic, "clicks");
    assert_eq!(letter.position.offset, 2);
    assert_eq!(letter.timestamp, Some(1_400));
    assert_eq!(letter.key.as_deref(), Some(&b"a"[..]));
    assert!(
        letter.error.contains("behind the watermark 2000")
            && letter.error.contains("allowed lateness of 500 ms"),
        "{}",
        letter.error
    );
    assert_eq!(metrics.late_by_partition(), vec![(0, 1)]);
    assert_eq!(metrics.dead_letters_total(), 1);
    let rows = fire(&mut window, 0, 0);
    assert_eq!(
        summary(&rows),
        vec![("a".to_owned(), 1_000, 1, vec![2.0, 5.0])]
    );
    Ok(())
}

#[test]
fn quiet_keys_expire_on_the_expiry_interval_only() -> TestResult {
    let ttl = 5_000;
    let (mut window, _) = instance(logic(0, Some(ttl))?, 1);
    let start = 1_000_000;
    window.apply_tick([&[event("a", 100, 1.0, 0)][..]], &[report(0, 0)], start);
    assert!(
        fire(&mut window, start, 0).is_empty(),
        "the first check finds nothing quiet"
    );
    // Quiet long enough, but the last check was less than the interval ago.
    let soon = start + EXPIRY_INTERVAL_MS - 1;
    window.apply_tick([&[event("b", 100, 1.0, 1)][..]], &[], soon);
    assert!(fire(&mut window, soon, 0).is_empty());
    let later = start + ttl;
    let rows = fire(&mut window, later, 0);
    assert_eq!(summary(&rows), vec![("a".to_owned(), 0, 0, vec![1.0, 1.0])]);
    assert!(rows.iter().all(|r| r.closed_by_timeout));
    assert_eq!(window.open_slots(), 1, "b is still open");
    Ok(())
}

#[test]
fn a_snapshot_restores_into_an_instance_that_goes_on_the_same() -> TestResult {
    let (mut original, _) = instance(logic(0, None)?, 1);
    let batch = [event("a", 100, 1.0, 0), event("b", 1_300, 2.0, 1)];
    original.apply_tick([&batch[..]], &[report(0, 1_000)], 0);
    fire(&mut original, 0, 0);
    assert_eq!(original.checkpoint_watermark(), Some(1_000));
    let shards = original.snapshot().map_err(|e| e.to_string())?;
    assert!(!shards.is_empty());
    assert!(
        original.snapshot().map_err(|e| e.to_string())?.is_empty(),
        "nothing changed since the last snapshot"
    );
    original.mark_all_changed();
    assert_eq!(
        original.snapshot().map_err(|e| e.to_string())?.len(),
        shards.len()
    );

    let (mut restored, _) = instance(logic(0, None)?, 1);
    for shard in &shards {
        let range = KeyGroupRange {
            lo: shard.lo,
            hi: shard.hi,
        };
        restored
            .restore(range, &shard.bytes, 0, Some(1_000))
            .map_err(|e| e.to_string())?;
    }
    assert_eq!(restored.open_slots(), original.open_slots());
    let next = [event("b", 1_700, 3.0, 2)];
    let mut outputs = Vec::new();
    for window in [&mut original, &mut restored] {
        window.apply_tick([&next[..]], &[report(0, 2_000)], 0);
        outputs.push(summary(&fire(window, 0, 0)));
    }
    assert_eq!(outputs[0], vec![("b".to_owned(), 1_000, 0, vec![2.0, 5.0])]);
    assert_eq!(outputs[0], outputs[1]);
    Ok(())
}

#[test]
fn the_end_of_a_bounded_input_is_no_checkpoint_watermark() -> TestResult {
    let (mut window, _) = instance(logic(0, None)?, 1);
    window.apply_tick([&[event("a", 100, 1.0, 0)][..]], &[report(0, i64::MAX)], 0);
    assert_eq!(fire(&mut window, 0, 0).len(), 1);
    assert_eq!(window.checkpoint_watermark(), None);
    Ok(())
}
