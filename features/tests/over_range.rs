//! Per-event trailing-range windows (Flink OVER RANGE): every event emits exactly one row over
//! its key's events in `(ts - range, ts]`, later-arriving events in that range included,
//! checked against a naive recomputation on random streams with bounded disorder.

mod common;

use anyhow::{ensure, Result};
use common::{event, user_ts_x_schema};
use proptest::prelude::*;

use weir_features::aggregate::AggKind::{Count, Max, Sum};
use weir_features::feature::FeatureSet;
use weir_features::record::Event;
use weir_features::schema::RecordSchema;
use weir_features::vocab::Watermark;
use weir_features::window::WindowSpec;
use weir_features::window_state::KeyedWindows;
use weir_testkit::spec::spec;

fn features(schema: &RecordSchema) -> Result<FeatureSet> {
    let specs = [
        spec("n", Count, None, None),
        spec("s", Sum, Some("x"), None),
        spec("m", Max, Some("x"), None),
    ];
    Ok(FeatureSet::compile(&specs, schema)?)
}

fn check(raw: &[(u8, i64, i64)], range: i64, disorder: i64) -> Result<()> {
    let schema = user_ts_x_schema()?;
    let features = features(&schema)?;
    // Events in true-time order, each shifted back by at most `disorder`.
    let mut t = 0i64;
    let events: Vec<Event> = raw
        .iter()
        .enumerate()
        .map(|(i, (k, gap, jitter))| {
            t += gap;
            event(
                &schema,
                &format!("k{k}"),
                t - jitter.rem_euclid(disorder + 1),
                (i % 7) as f64,
                i as i64,
            )
        })
        .collect();
    let mut state = KeyedWindows::new(WindowSpec::OverRange { range }, 0);
    let mut rows = Vec::new();
    let mut max_ts = i64::MIN;
    for e in &events {
        let wm = if max_ts == i64::MIN {
            Watermark::MIN
        } else {
            Watermark(max_ts - disorder)
        };
        ensure!(
            matches!(
                state.apply(&features, e, wm),
                weir_features::window_state::Applied::Updated
            ),
            "unexpected late"
        );
        max_ts = max_ts.max(e.ts);
        state.fire(&features, Watermark(max_ts - disorder), &mut rows);
    }
    state.fire(&features, Watermark::MAX, &mut rows);
    ensure!(
        rows.len() == events.len(),
        "{} rows for {} events",
        rows.len(),
        events.len()
    );
    ensure!(state.open_slots() == 0, "state left after the end of input");
    for row in &rows {
        let trigger = &events[row.first.offset as usize];
        ensure!(
            row.window_end == trigger.ts + 1 && row.key == trigger.key,
            "row bounds"
        );
        let inside: Vec<f64> = events
            .iter()
            .filter(|e| e.key == trigger.key && e.ts > trigger.ts - range && e.ts <= trigger.ts)
            .map(|e| (e.position.offset % 7) as f64)
            .collect();
        let sum: f64 = inside.iter().sum();
        let max = inside.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        ensure!(
            row.values[..] == [inside.len() as f64, sum, max],
            "event {}: got {:?}, want {:?}",
            trigger.position.offset,
            row.values,
            (inside.len(), sum, max)
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn every_event_gets_its_trailing_range(raw in proptest::collection::vec((0u8..3, 0i64..400, 0i64..1_000), 1..120), range in 1i64..3_000) {
        check(&raw, range, 500).map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
    }
}

#[test]
fn invalid_range_is_rejected() {
    assert!(WindowSpec::OverRange { range: 0 }.validate().is_err());
}
