//! Window kinds against naive oracles: window assignment (tumbling, hopping), pane
//! combination and session merging, with random streams of bounded disorder, several keys and
//! an allowed lateness. Values are integers, so sums are exact in any order; the final
//! revision of every window must equal a recomputation from the accepted events.

use std::collections::BTreeMap;

use proptest::prelude::*;
use weir_features::aggregate::AggKind;
use weir_features::feature::FeatureSet;
use weir_features::record::{Event, Value};
use weir_features::row::FeatureRow;
use weir_features::vocab::{EventTime, Key, Watermark};
use weir_features::window::{Aligned, WindowSpec};
use weir_features::window_state::{Applied, KeyedWindows};
use weir_testkit::event::text;
use weir_testkit::schema::{schema, F64};
use weir_testkit::spec::spec;

/// Slots: k (0), ts (1), x (2).
fn features() -> FeatureSet {
    let schema = schema("k", "ts", &[("x", F64)]);
    assert_eq!(schema.index_of("x"), Some(2));
    let specs = [
        spec("n", AggKind::Count, None, None),
        spec("sum", AggKind::Sum, Some("x"), None),
        spec("min", AggKind::Min, Some("x"), None),
        spec("max", AggKind::Max, Some("x"), None),
        spec("first", AggKind::First, Some("x"), None),
        spec("last", AggKind::Last, Some("x"), None),
    ];
    FeatureSet::compile(&specs, &schema).unwrap_or_else(|e| panic!("{e}"))
}

/// An event read at a wall-clock time that is not in arrival order (a row's ingest time is
/// its records' latest, not its last record's).
fn event(key: &str, ts: EventTime, x: i32, offset: i64) -> Event {
    let values = [text(key), Value::Num(ts as f64), Value::Num(f64::from(x))];
    weir_testkit::event::event(key, ts)
        .values(values)
        .key_groups(64)
        .offset(offset)
        .ingested(1_000_000 + (offset as u64 * 7_919) % 1_000)
        .build()
}

/// The ingest time a row of `group` carries.
fn latest_ingest(group: &[&Event]) -> u64 {
    group.iter().map(|e| e.ingested_ms).max().unwrap_or(0)
}

/// Naive features of `events` (arrival order): count, sum, min, max, first, last.
fn naive(events: &[&Event]) -> Vec<f64> {
    let x = |e: &Event| e.values[2].as_f64().unwrap_or(f64::NAN);
    let first = events.iter().enumerate().min_by_key(|(i, e)| (e.ts, *i));
    let last = events.iter().enumerate().max_by_key(|(i, e)| (e.ts, *i));
    vec![
        events.len() as f64,
        events.iter().map(|e| x(e)).sum(),
        events.iter().map(|e| x(e)).fold(f64::INFINITY, f64::min),
        events
            .iter()
            .map(|e| x(e))
            .fold(f64::NEG_INFINITY, f64::max),
        first.map_or(f64::NAN, |(_, e)| x(e)),
        last.map_or(f64::NAN, |(_, e)| x(e)),
    ]
}

const KEYS: [&str; 3] = ["a", "bob", "carol-with-a-longer-id"];
const DISORDER: i64 = 3_000;
const OUT_OF_ORDERNESS: i64 = 1_000;

/// (key, true-time step, lag, x) per event.
fn arb_input() -> impl Strategy<Value = Vec<(usize, i64, i64, i32)>> {
    proptest::collection::vec((0usize..3, 0i64..600, 0i64..=DISORDER, -50i32..50), 0..250)
}

/// Runs `input` through the engine like the operator does; returns (accepted events, rows).
fn run(
    spec: &WindowSpec,
    lateness: i64,
    input: &[(usize, i64, i64, i32)],
) -> Result<(Vec<Event>, Vec<FeatureRow>), TestCaseError> {
    let features = features();
    let mut state = KeyedWindows::new(spec.clone(), lateness);
    let (mut now, mut max_ts, mut accepted, mut rows) = (0i64, None, Vec::new(), Vec::new());
    for (i, &(k, step, lag, x)) in input.iter().enumerate() {
        now += step;
        let e = event(KEYS[k], now - lag, x, i as i64);
        let wm = max_ts.map_or(Watermark::MIN, |m| {
            Watermark::bounded_out_of_orderness(m, OUT_OF_ORDERNESS)
        });
        match state.apply(&features, &e, wm) {
            Applied::Updated => {
                prop_assert!(wm == Watermark::MIN || e.ts >= wm.0 - lateness);
                max_ts = Some(max_ts.map_or(e.ts, |m: i64| m.max(e.ts)));
                accepted.push(e);
            }
            Applied::Late { watermark } => {
                prop_assert_eq!(watermark, wm);
                prop_assert!(e.ts < wm.0 - lateness);
            }
        }
        let wm = max_ts.map_or(Watermark::MIN, |m| {
            Watermark::bounded_out_of_orderness(m, OUT_OF_ORDERNESS)
        });
        let before = rows.len();
        state.fire(&features, wm, &mut rows);
        prop_assert!(rows[before..].iter().all(|r| r.window_end <= wm.0));
    }
    state.fire(&features, Watermark::MAX, &mut rows);
    prop_assert_eq!(state.open_slots(), 0);
    Ok((accepted, rows))
}

/// Equal with NaN == NaN.
fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x == y)
}

/// Naive sessions of one key's events: sorted by time, split where the next event is more
/// than `gap` after the previous one (events exactly `gap` apart touch and stay together), or
/// would make the session longer than `max_length`.
fn naive_sessions(mut events: Vec<&Event>, gap: i64, max_length: i64) -> Vec<Vec<&Event>> {
    events.sort_by_key(|e| e.ts);
    let mut sessions: Vec<Vec<&Event>> = Vec::new();
    for e in events {
        match sessions.last_mut() {
            Some(s) if e.ts - s[s.len() - 1].ts <= gap && e.ts + gap - s[0].ts <= max_length => {
                s.push(e)
            }
            _ => sessions.push(vec![e]),
        }
    }
    sessions
}

/// The latest rows: per key, each row replaces the earlier rows whose bounds it contains
/// (a revision: a session's bounds only grow, when extended or merged).
fn latest(rows: &[FeatureRow]) -> BTreeMap<(Key, EventTime), &FeatureRow> {
    let mut out: BTreeMap<(Key, EventTime), &FeatureRow> = BTreeMap::new();
    for row in rows {
        out.retain(|(k, _), r| {
            *k != row.key || r.window_start < row.window_start || row.window_end < r.window_end
        });
        out.insert((row.key.clone(), row.window_start), row);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_event_lands_in_exactly_the_windows_containing_it(
        ts in -1_000_000_000_000i64..4_000_000_000_000i64,
        slide in 1i64..100_000,
        factor in 1i64..20,
        extra in 0i64..100_000,
    ) {
        let size = (slide * factor + extra % slide.max(1)).max(slide);
        let geom = Aligned::new(size, slide);
        let got: Vec<_> = geom.windows_containing(ts).collect();
        let first_k = (ts - size).div_euclid(slide) + 1;
        let want: Vec<_> = (first_k..=ts.div_euclid(slide)).map(|k| (k * slide, k * slide + size)).collect();
        prop_assert_eq!(got.iter().map(|w| (w.start, w.end)).collect::<Vec<_>>(), want);
        prop_assert_eq!(size % geom.pane, 0);
        prop_assert_eq!(slide % geom.pane, 0);
        let pane = geom.pane_start(ts);
        prop_assert!(pane <= ts && ts < pane + geom.pane);
        prop_assert!(got.iter().all(|w| w.start <= pane && pane + geom.pane <= w.end));
    }

    #[test]
    fn aligned_windows_match_naive_recomputation(
        input in arb_input(),
        (size, slide) in prop_oneof![
            (1i64..4_000).prop_map(|s| (s, s)),
            (1i64..2_000, 1i64..6).prop_map(|(s, f)| (s * f, s)),
            (2i64..3_000, 1i64..3_000).prop_map(|(a, b)| (a.max(b), a.min(b))),
        ],
        lateness in prop_oneof![Just(0i64), 0i64..3_000],
    ) {
        let spec = if size == slide { WindowSpec::Tumbling { size } } else { WindowSpec::Hopping { size, slide } };
        prop_assert!(spec.validate().is_ok());
        let (accepted, rows) = run(&spec, lateness, &input)?;
        let geom = Aligned::new(size, slide);
        let mut groups: BTreeMap<(Key, EventTime), Vec<&Event>> = BTreeMap::new();
        for e in &accepted {
            for w in geom.windows_containing(e.ts) {
                groups.entry((e.key.clone(), w.end)).or_default().push(e);
            }
        }
        // Revisions of one (key, window) count up from 0 in emission order.
        let mut last: BTreeMap<(Key, EventTime), &FeatureRow> = BTreeMap::new();
        for row in &rows {
            let id = (row.key.clone(), row.window_end);
            prop_assert_eq!(row.revision, last.get(&id).map_or(0, |r| r.revision + 1));
            prop_assert_eq!(row.window_end - row.window_start, size);
            last.insert(id, row);
        }
        prop_assert_eq!(last.len(), groups.len(), "one (key, window) per window with records");
        for (id, row) in &last {
            let group = groups.get(id).map(Vec::as_slice).unwrap_or_default();
            prop_assert_eq!(row.records, group.len() as u64);
            prop_assert_eq!(Some(row.first), group.first().map(|e| e.position));
            prop_assert_eq!(Some(row.last), group.last().map(|e| e.position));
            prop_assert_eq!(row.ingested_at_ms, latest_ingest(group));
            prop_assert!(same(&row.values, &naive(group)), "{:?}: {:?} vs {:?}", id, row.values, naive(group));
        }
        if lateness == 0 {
            prop_assert!(rows.iter().all(|r| r.revision == 0));
        }
    }

    #[test]
    fn sessions_match_naive_recomputation(
        input in arb_input(),
        gap in 1i64..2_500,
        cut in prop_oneof![Just(None), (1i64..8).prop_map(Some)],
        lateness in prop_oneof![Just(0i64), 0i64..3_000],
    ) {
        // With a max_length cut, arrival order matters: only an in-order stream has the
        // canonical greedy split.
        let input: Vec<_> = match cut {
            Some(_) => input.into_iter().map(|(k, s, _, x)| (k, s, 0, x)).collect(),
            None => input,
        };
        let max_length = cut.map_or(i64::MAX / 4, |c| gap * c);
        let spec = WindowSpec::Session { gap, max_length };
        prop_assert!(spec.validate().is_ok());
        let (accepted, rows) = run(&spec, lateness, &input)?;
        let mut want: BTreeMap<(Key, EventTime), Vec<&Event>> = BTreeMap::new();
        for key in KEYS {
            let events = accepted.iter().filter(|e| e.key == key).collect();
            for s in naive_sessions(events, gap, max_length) {
                want.insert((Key::from(key), s[0].ts), s);
            }
        }
        let got = latest(&rows);
        prop_assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        for (id, row) in &got {
            let mut group = want.get(id).cloned().unwrap_or_default();
            let end = group.iter().map(|e| e.ts).max().unwrap_or_default() + gap;
            prop_assert_eq!(row.window_end, end);
            prop_assert!(row.window_end - row.window_start <= max_length);
            group.sort_by_key(|e| e.position.offset);
            prop_assert_eq!(row.records, group.len() as u64);
            prop_assert_eq!(row.ingested_at_ms, latest_ingest(&group));
            prop_assert!(same(&row.values, &naive(&group)), "{:?}: {:?} vs {:?}", id, row.values, naive(&group));
        }
    }

    #[test]
    fn session_result_does_not_depend_on_arrival_order(
        times in proptest::collection::vec((0usize..2, 0i64..20_000, Just(0i32)), 1..60),
        gap in 1i64..3_000,
        seed in any::<u64>(),
    ) {
        let features = features();
        let spec = WindowSpec::Session { gap, max_length: i64::MAX / 4 };
        let final_rows = |order: &[usize]| {
            let mut state = KeyedWindows::new(spec.clone(), 0);
            let mut rows = Vec::new();
            for &i in order {
                // x is a function of (key, ts): ties of first/last cannot depend on order.
                let (k, ts, x) = times[i];
                let x = x + (ts % 7) as i32;
                // Everything within the allowed lateness: the watermark has not moved.
                state.apply(&features, &event(KEYS[k], ts, x, i as i64), Watermark::MIN);
            }
            state.fire(&features, Watermark::MAX, &mut rows);
            rows.into_iter().map(|r| (r.key, r.window_start, r.window_end, r.records, r.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>())).collect::<Vec<_>>()
        };
        let in_order: Vec<usize> = (0..times.len()).collect();
        let mut shuffled = in_order.clone();
        let mut s = seed;
        for i in (1..shuffled.len()).rev() {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            shuffled.swap(i, (s >> 33) as usize % (i + 1));
        }
        prop_assert_eq!(final_rows(&in_order), final_rows(&shuffled));
    }
}
