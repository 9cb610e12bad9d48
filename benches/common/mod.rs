//! Shared input of the window benchmarks (`window_updates`, `window_kinds`): the clickstream
//! schema and its 8 features, 200 k seeded events over 100 k keys, and the naive baseline's
//! per-window arithmetic. One copy, so both benchmarks measure exactly the same input.
//! [`cpu_time`] measures per-core time on a shared machine. They run with the job binary's
//! allocator.

#![allow(dead_code)]

pub mod cpu_time;

/// The job binary's allocator (`jobs/src/main.rs`: `weir::allocator`), so
/// these benchmarks measure the window state as a job holds it.
#[global_allocator]
static ALLOCATOR: weir::allocator::JobAllocator = weir::allocator::JobAllocator;

use rand::{Rng, SeedableRng};

use weir_features::decode::JsonDecoder;
use weir_features::feature::FeatureSet;
use weir_features::record::{Event, Value};
use weir_features::schema::RecordSchema;
use weir_testkit::event::from_decoded;

/// Distinct keys.
pub const KEYS: usize = 100_000;
/// Events generated.
pub const EVENTS: usize = 200_000;

/// The clickstream schema (`jobs/clickstream.toml`'s `[source.fields]`).
pub fn schema() -> RecordSchema {
    weir_testkit::clickstream::schema()
}

/// The clickstream job's 8 features (its `[[features]]`).
pub fn features(schema: &RecordSchema) -> FeatureSet {
    let specs = weir_testkit::clickstream::features();
    FeatureSet::compile(&specs, schema).unwrap_or_else(|e| panic!("{e}"))
}

/// Seeded JSON payloads, one every 10 ms of event time.
pub fn payloads() -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    (0..EVENTS)
        .map(|i| {
            let user = rng.random_range(0..KEYS);
            let kind = ["view", "click", "purchase"][rng.random_range(0..3)];
            let ts = 1_767_225_600_000i64 + (i as i64) * 10;
            let amount = if kind == "purchase" { format!(",\"amount\":{:.2}", rng.random_range(1.0..100.0)) } else { String::new() };
            format!("{{\"user\":\"u{user:06}\",\"ts\":{ts},\"type\":\"{kind}\",\"dwell_ms\":{:.1}{amount}}}", rng.random_range(10.0..9000.0))
                .into_bytes()
        })
        .collect()
}

/// The payloads decoded into events.
pub fn events(decoder: &JsonDecoder, payloads: &[Vec<u8>]) -> Vec<Event> {
    payloads
        .iter()
        .enumerate()
        .filter_map(|(i, p)| decoder.decode(p).ok().map(|d| (i, d)))
        .map(|(i, d)| from_decoded(d, 4096, i as i64))
        .collect()
}

/// Schema slots of `type`, `dwell_ms` and `amount`.
pub type Slots = (usize, usize, usize);

/// The naive baseline's arithmetic for one event on one window's 10 `f64`s.
#[inline]
pub fn naive_update(acc: &mut [f64; 10], e: &Event, (kind, dwell, amount): Slots) {
    acc[0] += 1.0;
    if let Value::Str(s) = &e.values[kind] {
        match s.as_str() {
            "view" => acc[1] += 1.0,
            "click" => acc[2] += 1.0,
            "purchase" => acc[3] += 1.0,
            _ => {}
        }
    }
    if let Value::Num(x) = e.values[dwell] {
        acc[4] += x;
        acc[5] = acc[5].max(x);
    }
    if let Value::Num(x) = e.values[amount] {
        acc[6] += x;
        acc[7] = acc[7].max(x);
        acc[8] += 1.0;
    }
}

/// The slots of `type`, `dwell_ms` and `amount` in `schema`.
pub fn slots(schema: &RecordSchema) -> Slots {
    (
        schema.index_of("type").unwrap_or_default(),
        schema.index_of("dwell_ms").unwrap_or_default(),
        schema.index_of("amount").unwrap_or_default(),
    )
}
