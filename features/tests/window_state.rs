//! Keyed window state against a naive oracle (seeded random events, few keys, bounded
//! disorder: exactly one row per (key, window), equal to a recomputation from scratch), and
//! the lateness rules: late records are reported and not counted; allowed-late records
//! re-emit their window as a new revision until the watermark minus the lateness passes it.

use std::collections::BTreeMap;

use proptest::prelude::*;
use weir_features::aggregate::AggKind;
use weir_features::feature::FeatureSet;
use weir_features::record::{Event, Value};
use weir_features::row::FeatureRow;
use weir_features::schema::RecordSchema;
use weir_features::vocab::{EventTime, Key, KeyGroup, Watermark};
use weir_features::window::WindowSpec;
use weir_features::window_state::{Applied, KeyedWindows};
use weir_testkit::event::{maybe, text};
use weir_testkit::schema::{F64_OPTIONAL, STRING};
use weir_testkit::spec::spec;

/// Slots (by name): k, kind, ts, x.
fn schema() -> RecordSchema {
    weir_testkit::schema::schema("k", "ts", &[("kind", STRING), ("x", F64_OPTIONAL)])
}

const K: usize = 0;
const KIND: usize = 1;
const TS: usize = 2;
const X: usize = 3;

/// count, count_if(kind == 'a'), sum/mean/min/max of x, sum of x where kind == 'b'.
fn features() -> FeatureSet {
    let specs = [
        spec("n", AggKind::Count, None, None),
        spec("n_a", AggKind::CountIf, None, Some("kind == 'a'")),
        spec("x_sum", AggKind::Sum, Some("x"), None),
        spec("x_mean", AggKind::Mean, Some("x"), None),
        spec("x_min", AggKind::Min, Some("x"), None),
        spec("x_max", AggKind::Max, Some("x"), None),
        spec("x_sum_b", AggKind::Sum, Some("x"), Some("kind == 'b'")),
    ];
    let schema = schema();
    assert_eq!(schema.index_of("k"), Some(K));
    assert_eq!(schema.index_of("kind"), Some(KIND));
    assert_eq!(schema.index_of("ts"), Some(TS));
    assert_eq!(schema.index_of("x"), Some(X));
    FeatureSet::compile(&specs, &schema).unwrap_or_else(|e| panic!("test features: {e}"))
}

fn event(key: &str, ts: EventTime, kind: &str, x: Option<f64>, offset: i64) -> Event {
    let values = [text(key), text(kind), Value::Num(ts as f64), maybe(x)];
    weir_testkit::event::event(key, ts)
        .values(values)
        .key_groups(64)
        .offset(offset)
        .build()
}

/// The naive recomputation of every feature over `events` (in arrival order).
fn naive(events: &[&Event]) -> Vec<f64> {
    let xs: Vec<f64> = events.iter().filter_map(|e| e.values[X].as_f64()).collect();
    let xs_b: Vec<f64> = events
        .iter()
        .filter(|e| e.values[KIND] == Value::Str("b".into()))
        .filter_map(|e| e.values[X].as_f64())
        .collect();
    let sum = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().fold(0.0, |a, x| a + x)
        }
    };
    let n_a = events
        .iter()
        .filter(|e| e.values[KIND] == Value::Str("a".into()))
        .count();
    vec![
        events.len() as f64,
        n_a as f64,
        sum(&xs),
        if xs.is_empty() {
            f64::NAN
        } else {
            sum(&xs) / xs.len() as f64
        },
        xs.iter().copied().fold(f64::NAN, f64::min),
        xs.iter().copied().fold(f64::NAN, f64::max),
        sum(&xs_b),
    ]
}

/// Equal with NaN == NaN (NaN encodes "missing"); bit-exact otherwise.
fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x == y)
}

fn collect(state: &mut KeyedWindows, features: &FeatureSet, wm: Watermark) -> Vec<FeatureRow> {
    let mut rows = Vec::new();
    state.fire(features, wm, &mut rows);
    rows
}

/// (key, true time step, disorder, kind, x) per event.
fn arb_events() -> impl Strategy<Value = Vec<(usize, i64, i64, usize, Option<f64>)>> {
    proptest::collection::vec(
        (
            0usize..4,
            0i64..700,
            0i64..=DISORDER,
            0usize..3,
            proptest::option::weighted(0.8, prop_oneof![-1e3f64..1e3, Just(0.0), Just(-0.0)]),
        ),
        0..300,
    )
}

const DISORDER: i64 = 2_000;
const KEYS: [&str; 4] = ["alice", "bob", "carol-with-a-longer-id", "d"];
const KINDS: [&str; 3] = ["a", "b", "c"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn matches_naive_recomputation(
        input in arb_events(),
        size in prop_oneof![Just(1_000i64), Just(1_500), Just(10_000), 1i64..5_000],
        start in -50_000i64..50_000,
    ) {
        let features = features();
        let mut state = KeyedWindows::new(WindowSpec::Tumbling { size }, 0);
        // True time only moves forward; event time lags it by at most DISORDER.
        let mut now = start;
        let events: Vec<Event> = input
            .iter()
            .enumerate()
            .map(|(i, &(k, step, lag, kind, x))| {
                now += step;
                event(KEYS[k], now - lag, KINDS[kind], x, i as i64)
            })
            .collect();

        let mut rows = Vec::new();
        let mut max_ts: Option<EventTime> = None;
        for e in &events {
            let wm = max_ts.map_or(Watermark::MIN, |m| Watermark::bounded_out_of_orderness(m, DISORDER));
            prop_assert_eq!(state.apply(&features, e, wm), Applied::Updated, "{:?} at {:?}", e.ts, wm);
            let max = max_ts.map_or(e.ts, |m| m.max(e.ts));
            max_ts = Some(max);
            let wm = Watermark::bounded_out_of_orderness(max, DISORDER);
            state.fire(&features, wm, &mut rows);
            // Every emitted window is closed: its end is at or before the watermark.
            prop_assert!(rows.iter().all(|r| r.window_end <= wm.0));
        }
        state.fire(&features, Watermark::MAX, &mut rows);
        prop_assert_eq!(state.open_slots(), 0);

        // The oracle: group by (key, window start) in arrival order.
        let mut groups: BTreeMap<(Key, EventTime), Vec<&Event>> = BTreeMap::new();
        for e in &events {
            groups.entry((e.key.clone(), e.ts.div_euclid(size) * size)).or_default().push(e);
        }
        prop_assert_eq!(rows.len(), groups.len(), "one row per (key, window)");
        for row in &rows {
            let group = groups.get(&(row.key.clone(), row.window_start));
            prop_assert!(group.is_some(), "unexpected row {:?}", row);
            let group = group.map(Vec::as_slice).unwrap_or_default();
            prop_assert_eq!(row.window_end - row.window_start, size);
            prop_assert_eq!(row.revision, 0);
            prop_assert_eq!(row.records, group.len() as u64);
            prop_assert_eq!(row.key_group, KeyGroup::of(row.key.as_bytes(), 64));
            prop_assert_eq!(Some(row.first), group.first().map(|e| e.position));
            prop_assert_eq!(Some(row.last), group.last().map(|e| e.position));
            let want = naive(group);
            prop_assert!(same(&row.values, &want), "{:?}: got {:?}, want {:?}", (&row.key, row.window_start), row.values, want);
        }
    }
}

#[test]
fn late_record_without_allowed_lateness_is_reported_and_not_counted() {
    let features = features();
    let mut state = KeyedWindows::new(WindowSpec::Tumbling { size: 10 }, 0);
    assert_eq!(
        state.apply(&features, &event("u", 5, "a", Some(1.0), 0), Watermark::MIN),
        Applied::Updated
    );
    // Nothing fires before the window's end.
    assert!(collect(&mut state, &features, Watermark(8)).is_empty());
    // Behind the watermark, even though its window is still open: late.
    let wm = Watermark(8);
    assert_eq!(
        state.apply(&features, &event("u", 7, "a", Some(100.0), 1), wm),
        Applied::Late { watermark: wm }
    );
    // At the watermark: not late.
    assert_eq!(
        state.apply(&features, &event("u", 8, "b", Some(2.0), 2), wm),
        Applied::Updated
    );
    let rows = collect(&mut state, &features, Watermark(10));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].records, 2, "the late record is not counted");
    assert!(
        same(&rows[0].values, &[2.0, 1.0, 3.0, 1.5, 1.0, 2.0, 2.0]),
        "{:?}",
        rows[0].values
    );
    assert_eq!((rows[0].first.offset, rows[0].last.offset), (0, 2));
    // With no lateness the fired window is gone at once; a record for it is late.
    assert_eq!(state.open_slots(), 0);
    let wm = Watermark(10);
    assert_eq!(
        state.apply(&features, &event("u", 9, "a", None, 3), wm),
        Applied::Late { watermark: wm }
    );
    assert!(collect(&mut state, &features, Watermark::MAX).is_empty());
}

#[test]
fn allowed_late_record_re_emits_a_revision_until_the_window_is_dropped() {
    let features = features();
    let mut state = KeyedWindows::new(WindowSpec::Tumbling { size: 10 }, 5);
    assert_eq!(
        state.apply(&features, &event("u", 3, "a", Some(4.0), 0), Watermark::MIN),
        Applied::Updated
    );
    assert_eq!(
        state.apply(&features, &event("v", 4, "a", None, 1), Watermark::MIN),
        Applied::Updated
    );

    let first = collect(&mut state, &features, Watermark(10));
    assert_eq!(first.len(), 2);
    let u0 = first
        .iter()
        .find(|r| r.key == "u")
        .cloned()
        .unwrap_or_else(|| panic!("no row for u"));
    assert_eq!((u0.revision, u0.records), (0, 1));
    assert!(same(&u0.values, &[1.0, 1.0, 4.0, 4.0, 4.0, 4.0, f64::NAN]));
    // The window is kept for the allowed lateness; re-firing without changes emits nothing.
    assert_eq!(state.open_slots(), 2);
    assert!(collect(&mut state, &features, Watermark(12)).is_empty());

    // Late but within the allowed lateness (12 - 5 = 7 <= 8): updates and re-emits u only.
    assert_eq!(
        state.apply(&features, &event("u", 8, "b", Some(-2.0), 2), Watermark(12)),
        Applied::Updated
    );
    let second = collect(&mut state, &features, Watermark(12));
    assert_eq!(second.len(), 1);
    let u1 = &second[0];
    assert_eq!((u1.key.as_str(), u1.revision, u1.records), ("u", 1, 2));
    assert_eq!((u1.window_start, u1.window_end), (0, 10));
    assert!(
        same(&u1.values, &[2.0, 1.0, 2.0, 1.0, -2.0, 4.0, -2.0]),
        "{:?}",
        u1.values
    );
    assert_eq!((u1.first.offset, u1.last.offset), (0, 2));

    // Beyond the allowed lateness (14 - 5 = 9 > 8): late, not counted.
    let wm = Watermark(14);
    assert_eq!(
        state.apply(&features, &event("u", 8, "a", Some(50.0), 3), wm),
        Applied::Late { watermark: wm }
    );
    // Exactly at the horizon: still allowed, third revision.
    assert_eq!(
        state.apply(&features, &event("u", 9, "a", Some(1.0), 4), wm),
        Applied::Updated
    );
    let third = collect(&mut state, &features, wm);
    assert_eq!(third.len(), 1);
    assert_eq!((third[0].revision, third[0].records), (2, 3));
    assert!(
        same(&third[0].values, &[3.0, 2.0, 3.0, 1.0, -2.0, 4.0, -2.0]),
        "{:?}",
        third[0].values
    );
    assert_eq!(state.open_slots(), 2);

    // Once watermark - lateness reaches the window's end, the window is dropped...
    assert!(collect(&mut state, &features, Watermark(15)).is_empty());
    assert_eq!(state.open_slots(), 0);
    // ... and every record for it is late.
    let wm = Watermark(15);
    assert_eq!(
        state.apply(&features, &event("u", 9, "a", Some(1.0), 5), wm),
        Applied::Late { watermark: wm }
    );
    assert!(collect(&mut state, &features, Watermark::MAX).is_empty());
}

#[test]
fn windows_fire_in_end_order_and_keys_are_independent() {
    let features = features();
    let mut state = KeyedWindows::new(WindowSpec::Tumbling { size: 10 }, 0);
    for (i, (key, ts)) in [("a", 25), ("b", 3), ("a", 14), ("b", -1), ("a", 2)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(
            state.apply(
                &features,
                &event(key, ts, "c", None, i as i64),
                Watermark::MIN
            ),
            Applied::Updated
        );
    }
    assert_eq!(state.open_slots(), 5);
    let rows = collect(&mut state, &features, Watermark(20));
    let mut got: Vec<(&str, EventTime, u64)> = rows
        .iter()
        .map(|r| (r.key.as_str(), r.window_start, r.records))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [("a", 0, 1), ("a", 10, 1), ("b", -10, 1), ("b", 0, 1)]);
    // Rows come out window by window, earliest end first.
    assert!(rows.windows(2).all(|w| w[0].window_end <= w[1].window_end));
    assert_eq!(state.open_slots(), 1);
    // Missing values: no x at all gives NaN for sum/mean/min/max, 0 for counts.
    assert!(same(
        &rows[0].values,
        &[1.0, 0.0, f64::NAN, f64::NAN, f64::NAN, f64::NAN, f64::NAN]
    ));
    let rest = collect(&mut state, &features, Watermark::MAX);
    assert_eq!(rest.len(), 1);
    assert_eq!((rest[0].key.as_str(), rest[0].window_start), ("a", 20));
}

#[test]
fn allowed_late_event_bridging_two_fired_sessions_merges_them() {
    let features = features();
    let spec = WindowSpec::Session {
        gap: 10,
        max_length: 1_000,
    };
    let mut state = KeyedWindows::new(spec, 100);
    for (i, ts) in [0, 5, 22].into_iter().enumerate() {
        let e = event("u", ts, "a", Some(1.0), i as i64);
        assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    }
    let rows = collect(&mut state, &features, Watermark(32));
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r.window_start, r.window_end, r.revision, r.records))
        .collect();
    assert_eq!(got, [(0, 15, 0, 2), (22, 32, 0, 1)]);
    // 14 is within 10 of both sessions: it bridges them into [0, 32), a revision of both.
    let e = event("u", 14, "b", Some(5.0), 3);
    assert_eq!(state.apply(&features, &e, Watermark(32)), Applied::Updated);
    assert_eq!(state.open_slots(), 1);
    let rows = collect(&mut state, &features, Watermark(32));
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (r.window_start, r.window_end, r.revision, r.records),
        (0, 32, 1, 4)
    );
    assert!(same(&r.values[..3], &[4.0, 3.0, 8.0]), "{:?}", r.values);
    assert_eq!((r.first.offset, r.last.offset), (0, 3));
    // Kept while watermark - lateness is at its end: a record at 32 would still touch it.
    assert!(collect(&mut state, &features, Watermark(132)).is_empty());
    assert_eq!(state.open_slots(), 1);
    // Dropped once watermark - lateness passes its end; then records for it are late.
    assert!(collect(&mut state, &features, Watermark(133)).is_empty());
    assert_eq!(state.open_slots(), 0);
    let e = event("u", 32, "b", Some(5.0), 4);
    assert_eq!(
        state.apply(&features, &e, Watermark(133)),
        Applied::Late {
            watermark: Watermark(133)
        }
    );
}

#[test]
fn session_longer_than_max_length_is_split() {
    let features = features();
    let spec = WindowSpec::Session {
        gap: 10,
        max_length: 25,
    };
    let mut state = KeyedWindows::new(spec, 0);
    for (i, ts) in [0, 8, 14, 16, 24].into_iter().enumerate() {
        let e = event("u", ts, "a", None, i as i64);
        assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    }
    let rows = collect(&mut state, &features, Watermark::MAX);
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r.window_start, r.window_end, r.records))
        .collect();
    // 16 would stretch [0, 24) to [0, 26) > 25: it starts [16, 26), which 24 then extends
    // (24 does not touch [0, 24)).
    assert_eq!(got, [(0, 24, 3), (16, 34, 2)]);
}

#[test]
fn hopping_window_re_emits_every_fired_window_of_a_late_pane() {
    let features = features();
    let spec = WindowSpec::Hopping { size: 10, slide: 4 };
    assert!(spec.validate().is_ok());
    assert!(WindowSpec::Hopping { size: 4, slide: 10 }
        .validate()
        .is_err());
    let mut state = KeyedWindows::new(spec, 20);
    let e = event("u", 9, "a", Some(1.0), 0);
    assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    // 9 is in [0, 10), [4, 14), [8, 18).
    let ends: Vec<_> = collect(&mut state, &features, Watermark(20))
        .iter()
        .map(|r| (r.window_end, r.revision))
        .collect();
    assert_eq!(ends, [(10, 0), (14, 0), (18, 0)]);
    // 5 is in [-4, 6) (never fired: revision 0), [0, 10) and [4, 14) (pane [4, 6) of
    // gcd 2): both re-emit; [8, 18) does not.
    let e = event("u", 5, "b", Some(2.0), 1);
    assert_eq!(state.apply(&features, &e, Watermark(20)), Applied::Updated);
    let rows = collect(&mut state, &features, Watermark(20));
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r.window_end, r.revision, r.records))
        .collect();
    assert_eq!(got, [(6, 0, 1), (10, 1, 2), (14, 1, 2)]);
}

#[test]
fn quiet_keys_are_closed_by_timeout_and_forgotten() {
    let features = features();
    for spec in [
        WindowSpec::Tumbling { size: 10 },
        WindowSpec::Hopping { size: 10, slide: 5 },
        WindowSpec::Session {
            gap: 10,
            max_length: 100,
        },
    ] {
        let mut state = KeyedWindows::new(spec.clone(), 0);
        state.set_processing_time(1_000);
        let e = event("quiet", 3, "a", Some(1.0), 0);
        assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
        state.set_processing_time(5_000);
        let e = event("busy", 4, "a", Some(1.0), 1);
        assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
        assert_eq!(state.tracked_keys(), 2);
        // Not yet quiet for the TTL.
        assert_eq!(
            state.expire(&features, 5_999, 5_000, &mut Vec::new()),
            0,
            "{spec:?}"
        );
        let mut rows = Vec::new();
        assert_eq!(state.expire(&features, 6_000, 5_000, &mut rows), 1);
        assert!(!rows.is_empty(), "{spec:?}");
        assert!(rows
            .iter()
            .all(|r| r.key == "quiet" && r.closed_by_timeout && r.records == 1));
        assert_eq!(state.tracked_keys(), 1);
        // Only busy's state is left; it closes normally.
        let rest = collect(&mut state, &features, Watermark::MAX);
        assert!(rest.iter().all(|r| r.key == "busy" && !r.closed_by_timeout));
        assert!(!rest.is_empty());
        assert_eq!(state.open_slots(), 0);
    }
}

#[test]
fn a_restore_does_not_count_the_downtime_as_quiet_time() {
    let features = features();
    let mut state = KeyedWindows::new(WindowSpec::Tumbling { size: 10 }, 0);
    state.set_processing_time(1_000);
    let e = event("k", 3, "a", Some(1.0), 0);
    assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    // Checkpointed at 2 000 (quiet for 1 000 of a 5 000 TTL), restored at 100 000.
    state.set_processing_time(2_000);
    let mut restored = state.clone();
    restored.resume_processing_time(100_000);
    assert_eq!(
        restored.expire(&features, 100_000, 5_000, &mut Vec::new()),
        0,
        "expired at restore"
    );
    assert_eq!(
        restored.expire(&features, 103_999, 5_000, &mut Vec::new()),
        0,
        "expired early"
    );
    let mut rows = Vec::new();
    assert_eq!(
        restored.expire(&features, 104_000, 5_000, &mut rows),
        1,
        "quiet for the TTL after the restore, counting the 1 000 before the checkpoint"
    );
    assert!(rows.iter().all(|r| r.closed_by_timeout));
}

#[test]
fn a_window_re_opened_after_its_key_expired_is_a_new_revision() {
    let features = features();
    let mut state = KeyedWindows::new(WindowSpec::Tumbling { size: 10 }, 0);
    state.set_processing_time(1_000);
    let e = event("k", 3, "a", Some(1.0), 0);
    assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    let mut expired = Vec::new();
    assert_eq!(state.expire(&features, 7_000, 5_000, &mut expired), 1);
    assert_eq!(expired.len(), 1);
    assert_eq!((expired[0].window_end, expired[0].revision), (10, 0));
    // A record in the same window after the expiry: the window's next row is revision 1 of
    // the same window (same score id), not a second revision 0.
    state.set_processing_time(8_000);
    let e = event("k", 5, "a", Some(2.0), 1);
    assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    let rows = collect(&mut state, &features, Watermark::MAX);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].window_end, rows[0].revision), (10, 1));
    assert_eq!(rows[0].records, 1, "the expired state is gone");
}

/// Session windows (gap 10, at most 100 long, 100 of allowed lateness) whose keys' TTL is
/// tracked from processing time 1 000.
fn expiring_sessions() -> KeyedWindows {
    let spec = WindowSpec::Session {
        gap: 10,
        max_length: 100,
    };
    let mut state = KeyedWindows::new(spec, 100);
    state.set_processing_time(1_000);
    state
}

#[test]
fn a_session_re_opened_after_its_key_expired_is_a_new_revision() {
    let features = features();
    let mut state = expiring_sessions();
    let e = event("k", 3, "a", Some(1.0), 0);
    assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    let rows = collect(&mut state, &features, Watermark(13));
    assert_eq!((rows[0].window_end, rows[0].revision), (13, 0));
    // Quiet for the TTL: the fired, unchanged session is forgotten without a row.
    let mut expired = Vec::new();
    assert_eq!(state.expire(&features, 7_000, 5_000, &mut expired), 1);
    assert!(expired.is_empty(), "{expired:?}");
    assert_eq!((state.open_slots(), state.forgotten_windows()), (0, 1));

    // An allowed-late record at the same time: the same session again (key, end 13), so its
    // row must be revision 1, not a second revision 0.
    state.set_processing_time(8_000);
    let e = event("k", 3, "b", Some(2.0), 1);
    assert_eq!(state.apply(&features, &e, Watermark(13)), Applied::Updated);
    let rows = collect(&mut state, &features, Watermark(13));
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].window_end, rows[0].revision), (13, 1));
    assert_eq!(rows[0].records, 1, "the expired state is gone");

    // Changed again and expired before it fires: closed by timeout as revision 2, and a
    // record touching it after that is revision 3.
    let e = event("k", 8, "a", Some(3.0), 2);
    assert_eq!(state.apply(&features, &e, Watermark(13)), Applied::Updated);
    let mut expired = Vec::new();
    assert_eq!(state.expire(&features, 14_000, 5_000, &mut expired), 1);
    assert_eq!(expired.len(), 1);
    assert_eq!(
        (
            expired[0].window_end,
            expired[0].revision,
            expired[0].closed_by_timeout
        ),
        (18, 2, true)
    );
    let e = event("k", 12, "a", Some(4.0), 3);
    assert_eq!(state.apply(&features, &e, Watermark(13)), Applied::Updated);
    let rows = collect(&mut state, &features, Watermark(30));
    assert_eq!((rows[0].window_end, rows[0].revision), (22, 3));

    // Once no allowed record can touch a forgotten session, it is dropped: at watermark 122
    // (horizon 22) a record at 22 would still touch the one ending at 22.
    state.expire(&features, 30_000, 5_000, &mut Vec::new());
    assert_eq!(state.forgotten_windows(), 3);
    collect(&mut state, &features, Watermark(122));
    assert_eq!(state.forgotten_windows(), 1);
    collect(&mut state, &features, Watermark(123));
    assert_eq!(state.forgotten_windows(), 0);
    let e = event("k", 25, "a", Some(5.0), 4);
    assert_eq!(state.apply(&features, &e, Watermark(123)), Applied::Updated);
    let rows = collect(&mut state, &features, Watermark(200));
    assert_eq!((rows[0].window_end, rows[0].revision), (35, 0));
}

#[test]
fn two_sessions_each_covering_part_of_a_forgotten_one_both_continue_its_revisions() {
    let features = features();
    let mut state = expiring_sessions();
    for (i, ts) in [100, 108].into_iter().enumerate() {
        let e = event("k", ts, "a", Some(1.0), i as i64);
        assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
    }
    let rows = collect(&mut state, &features, Watermark(118));
    assert_eq!(
        (rows[0].window_start, rows[0].window_end, rows[0].revision),
        (100, 118, 0)
    );
    assert_eq!(state.expire(&features, 7_000, 5_000, &mut Vec::new()), 1);

    // [97, 107) touches the forgotten [100, 118); so does [108, 118), which does not touch
    // [97, 107) and ends where the forgotten session ended: it must not be (k, 118, 0) again.
    state.set_processing_time(8_000);
    for (i, ts) in [97, 108].into_iter().enumerate() {
        let e = event("k", ts, "b", Some(2.0), 2 + i as i64);
        assert_eq!(state.apply(&features, &e, Watermark(118)), Applied::Updated);
    }
    let rows = collect(&mut state, &features, Watermark(118));
    let ends: Vec<(i64, u32)> = rows.iter().map(|r| (r.window_end, r.revision)).collect();
    assert_eq!(ends, [(107, 1), (118, 1)]);
}
