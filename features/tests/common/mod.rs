//! Shared builders of the feature-engine tests that use the small `{user, ts, x}` schema.

#![allow(dead_code)]

use std::collections::BTreeMap;

use anyhow::Result;
use rand::{Rng, SeedableRng};

use weir_features::aggregate::AggKind::{Count, Last, Max, Min, Sum};
use weir_features::feature::FeatureSpec;
use weir_features::job_features::JobFeatures;
use weir_features::job_features::Trigger;
use weir_features::window::WindowSpec;

use weir_features::record::{Event, Value};
use weir_features::schema::RecordSchema;
use weir_testkit::schema::{schema, F64};
use weir_testkit::spec::{over, spec};

/// `user` (string key), `ts` (event time), `x` (f64).
pub fn user_ts_x_schema() -> Result<RecordSchema> {
    Ok(schema("user", "ts", &[("x", F64)]))
}

/// An event of that schema on partition 0 at `offset`.
pub fn event(schema: &RecordSchema, key: &str, ts: i64, x: f64, offset: i64) -> Event {
    weir_testkit::event::event(key, ts)
        .by_name(schema, |_| Value::Num(x))
        .offset(offset)
        .build()
}

/// The snapshot tests' job: count, sum and last of `x` over `primary`, plus the max of `x`
/// over a session window (gap 20 s, at most 2 min), emitted by `trigger`.
pub fn snapshot_job(primary: WindowSpec, trigger: Trigger) -> Result<JobFeatures> {
    snapshot_job_with(spec("n", Count, None, None), primary, trigger)
}

/// [`snapshot_job`] with the min of `x` in place of its count: its slots hold the same words
/// in every snapshot format (a `count` without `where` kept a word before format 5), so its
/// state written in an older format's frame is a snapshot of that format.
pub fn snapshot_job_same_in_every_format(
    primary: WindowSpec,
    trigger: Trigger,
) -> Result<JobFeatures> {
    snapshot_job_with(spec("x_min", Min, Some("x"), None), primary, trigger)
}

fn snapshot_job_with(
    first: FeatureSpec,
    primary: WindowSpec,
    trigger: Trigger,
) -> Result<JobFeatures> {
    let schema = user_ts_x_schema()?;
    let specs = [
        first,
        spec("x_sum", Sum, Some("x"), None),
        spec("x_last", Last, Some("x"), None),
        over(spec("x_max_sess", Max, Some("x"), None), "sess"),
    ];
    let named = BTreeMap::from([(
        "sess".to_owned(),
        WindowSpec::Session {
            gap: 20_000,
            max_length: 120_000,
        },
    )]);
    Ok(JobFeatures::compile(&specs, &schema, &primary, &named)?.with_trigger(trigger)?)
}

/// 3 000 seeded events of 40 keys, 0-400 ms apart, up to 2 s out of order.
pub fn snapshot_events(seed: u64) -> Result<Vec<Event>> {
    seeded_events(seed, |_, rng| format!("k{}", rng.random_range(0..40)))
}

/// 3 000 seeded events 0-400 ms apart, up to 2 s out of order; `key(i, rng)` names the key
/// of the `i`-th.
pub fn seeded_events(
    seed: u64,
    key: impl Fn(i64, &mut rand::rngs::StdRng) -> String,
) -> Result<Vec<Event>> {
    let schema = user_ts_x_schema()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut clock = 0i64;
    Ok((0..3_000)
        .map(|i| {
            clock += rng.random_range(0..400);
            let ts = clock - rng.random_range(0..3) * 1_000;
            let key = key(i, &mut rng);
            event(&schema, &key, ts, f64::from(rng.random_range(0..100)), i)
        })
        .collect())
}

/// A tumbling, a hopping and a session window: the kinds the snapshot tests cover.
pub fn snapshot_window_kinds() -> [WindowSpec; 3] {
    [
        WindowSpec::Tumbling { size: 60_000 },
        WindowSpec::Hopping {
            size: 90_000,
            slide: 30_000,
        },
        WindowSpec::Session {
            gap: 10_000,
            max_length: 60_000,
        },
    ]
}
