//! Window-update and decode throughput (issue #2/#3 groundwork).
//!
//! Run: `cargo bench --bench window_updates` (results: BENCHMARKS.md).
//!
//! Compares, in the same run:
//! - `apply/keyed_windows`: `KeyedWindows::apply` on pre-decoded events (100 k keys, 1-minute
//!   tumbling windows, the clickstream job's 8 features) against `apply/naive_hashmap`, a
//!   hand-written loop over a `HashMap<(key, window), [f64; 8]>` doing the same arithmetic;
//! - `decode/json_decoder`: `JsonDecoder::decode` against `decode/serde_json_value`, parsing into
//!   `serde_json::Value` and picking the fields out.

mod common;

use common::{events, features, naive_update, payloads, schema, slots, Slots};
use std::collections::HashMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use weir_features::decode::JsonDecoder;
use weir_features::record::Event;
use weir_features::vocab::{Key, Watermark};
use weir_features::window::WindowSpec;
use weir_features::window_state::KeyedWindows;

fn naive(events: &[Event], slots: Slots) -> usize {
    let mut state: HashMap<(Key, i64), [f64; 10]> = HashMap::new();
    for e in events {
        let acc = state
            .entry((e.key.clone(), e.ts.div_euclid(60_000)))
            .or_insert([0.0; 10]);
        naive_update(acc, e, slots);
    }
    state.len()
}

fn bench(c: &mut Criterion) {
    let schema = schema();
    let features = features(&schema);
    let decoder = JsonDecoder::new(schema.clone());
    let payloads = payloads();
    let events = events(&decoder, &payloads);
    let slots = slots(&schema);

    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(events.len() as u64));
    let fresh = || KeyedWindows::new(WindowSpec::Tumbling { size: 60_000 }, 0);
    let apply_all = |mut state: KeyedWindows| {
        for e in &events {
            state.apply(&features, e, Watermark::MIN);
        }
        state
    };
    // Most events open a new (key, window) slot: 100 k keys, ~33 windows, 200 k events.
    group.bench_function("keyed_windows_new_slots", |b| {
        b.iter_batched(fresh, apply_all, BatchSize::LargeInput)
    });
    // Every slot already exists: the steady state of a busy key.
    let warm = apply_all(fresh());
    group.bench_function("keyed_windows_existing_slots", |b| {
        b.iter_batched(|| warm.clone(), apply_all, BatchSize::LargeInput)
    });
    group.bench_function("naive_hashmap", |b| {
        b.iter(|| black_box(naive(&events, slots)))
    });
    group.finish();

    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(payloads.len() as u64));
    group.bench_function("json_decoder", |b| {
        b.iter(|| {
            payloads
                .iter()
                .filter(|p| decoder.decode(p).is_ok())
                .count()
        })
    });
    group.bench_function("serde_json_value", |b| {
        b.iter(|| {
            payloads
                .iter()
                .filter_map(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
                .filter(|v| v["user"].is_string() && v["ts"].is_i64() && v["dwell_ms"].is_f64())
                .count()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
