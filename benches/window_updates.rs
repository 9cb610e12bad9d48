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

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{Rng, SeedableRng};

use weir_features::decode::JsonDecoder;
use weir_features::feature::{FeatureSet, FeatureSpec};
use weir_features::record::{Event, Value};
use weir_features::schema::{FieldDecl, FieldType, RecordSchema};
use weir_features::vocab::{Key, KeyGroup, SourcePosition, Watermark};
use weir_features::window::WindowSpec;
use weir_features::window_state::KeyedWindows;

const KEYS: usize = 100_000;
const EVENTS: usize = 200_000;

fn schema() -> RecordSchema {
    let fields = BTreeMap::from([
        ("user".to_owned(), FieldDecl::Type(FieldType::String)),
        ("ts".to_owned(), FieldDecl::Type(FieldType::TimestampMs)),
        ("type".to_owned(), FieldDecl::Type(FieldType::String)),
        ("dwell_ms".to_owned(), FieldDecl::Type(FieldType::F64)),
        (
            "amount".to_owned(),
            FieldDecl::Full {
                ty: FieldType::F64,
                required: false,
            },
        ),
    ]);
    RecordSchema::new(&fields, "user", "ts").unwrap_or_else(|e| panic!("{e}"))
}

fn features(schema: &RecordSchema) -> FeatureSet {
    let spec = |name: &str, agg: &str, field: Option<&str>, filter: Option<&str>| {
        let mut text = format!("name = \"{name}\"\nagg = \"{agg}\"\n");
        if let Some(field) = field {
            text.push_str(&format!("field = \"{field}\"\n"));
        }
        if let Some(filter) = filter {
            text.push_str(&format!("where = \"{filter}\"\n"));
        }
        toml::from_str::<FeatureSpec>(&text).unwrap_or_else(|e| panic!("{e}"))
    };
    let specs = vec![
        spec("events", "count", None, None),
        spec("views", "count_if", None, Some("type == 'view'")),
        spec("clicks", "count_if", None, Some("type == 'click'")),
        spec("purchases", "count_if", None, Some("type == 'purchase'")),
        spec("dwell_mean", "mean", Some("dwell_ms"), None),
        spec("dwell_max", "max", Some("dwell_ms"), None),
        spec("amount_sum", "sum", Some("amount"), None),
        spec("amount_max", "max", Some("amount"), None),
    ];
    FeatureSet::compile(&specs, schema).unwrap_or_else(|e| panic!("{e}"))
}

fn payloads() -> Vec<Vec<u8>> {
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

fn events(decoder: &JsonDecoder, payloads: &[Vec<u8>]) -> Vec<Event> {
    payloads
        .iter()
        .enumerate()
        .filter_map(|(i, p)| decoder.decode(p).ok().map(|d| (i, d)))
        .map(|(i, d)| Event {
            key_group: KeyGroup::of(d.key.as_bytes(), 4096),
            key: d.key,
            ts: d.ts,
            values: d.values,
            position: SourcePosition {
                partition: 0,
                offset: i as i64,
            },
        })
        .collect()
}

fn naive(events: &[Event], slots: (usize, usize, usize)) -> usize {
    let (kind, dwell, amount) = slots;
    let mut state: HashMap<(Key, i64), [f64; 10]> = HashMap::new();
    for e in events {
        let acc = state
            .entry((e.key.clone(), e.ts.div_euclid(60_000)))
            .or_insert([0.0; 10]);
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
    state.len()
}

fn bench(c: &mut Criterion) {
    let schema = schema();
    let features = features(&schema);
    let decoder = JsonDecoder::new(schema.clone());
    let payloads = payloads();
    let events = events(&decoder, &payloads);
    let slots = (
        schema.index_of("type").unwrap_or_default(),
        schema.index_of("dwell_ms").unwrap_or_default(),
        schema.index_of("amount").unwrap_or_default(),
    );

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
