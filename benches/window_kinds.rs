//! Window updates per second per window kind (issue #3 acceptance: ≥ 5 M updates/s per core on
//! tumbling and hopping windows with 100 k keys, pre-decoded records).
//!
//! Run: `cargo bench --bench window_kinds -- --warm-up-time 1 --measurement-time 3`
//! (results: BENCHMARKS.md). Every benchmark runs twice: timed by the wall clock (groups
//! `tumbling`, `hopping`, `session`) and by the thread's CPU time (`tumbling_cpu`, ...: per
//! core, not counting time the machine's other processes took the core; see
//! `common::cpu_time`). Append `_cpu` (or `tumbling/`, ...) to the command to run a subset.
//!
//! Input: 200 000 pre-decoded clickstream events (one every 10 ms of event time, in time
//! order) over 100 000 keys, the 8 features of `jobs/clickstream.toml`. For each window kind
//! `KeyedWindows::apply` (one thread, no firing) is measured from empty state (`new_slots`) and
//! with every slot/session already open (`existing_slots`), against a naive single-thread loop
//! measured in the same run (`naive`) that keeps 10 `f64`s per window in a `HashMap` and
//! hard-codes the features:
//! - `tumbling` (1 minute): naive = one `(key, window)` entry per event;
//! - `hopping` (size 5 minutes, slide 1 minute; the engine updates one 1-minute pane per
//!   event and merges panes at fire time): naive = update each of the 5 windows containing the
//!   event (textbook window assignment, no panes);
//! - `session` (gap 5 minutes, max_length 30 minutes): naive = a `Vec` of sessions per key,
//!   in-order greedy rule (extend the key's last session if the event is within `gap` of it
//!   and the session stays within `max_length`, else open a new one).
//!
//! Every `keyed_windows_*` benchmark runs again as `one_window_*` on the same records with
//! their event times packed into one minute (as in a live stream at this rate): all records
//! fall in the window being filled, which holds the slots of ~86 k keys (~2 records each), so
//! the state a record reaches is one ~30 MB hash table instead of a ~2 MB pane.
//!
//! `tumbling/map_floor_existing_slots` (and `one_window_map_floor`) is the memory floor of the
//! engine's state layout: the same pane start -> key -> entry maps with entries of the
//! engine's size (224 bytes), every entry present, and per event only the two lookups and two
//! word writes (no features).
//!
//! Allocator: the job binary's (`weir::allocator`: jemalloc, huge pages for blocks of 2 MiB and
//! more; `benches/common`).

mod common;

use common::cpu_time::ThreadCpuTime;
use common::{events, features, naive_update, payloads, schema, slots, Slots};
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;

use criterion::measurement::Measurement;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rustc_hash::FxBuildHasher;

use weir_features::decode::JsonDecoder;
use weir_features::record::Event;
use weir_features::vocab::{Key, Watermark};
use weir_features::window::WindowSpec;
use weir_features::window_state::KeyedWindows;

const MINUTE: i64 = 60_000;

/// Naive aligned windows of `size` every `slide`: every window containing the event.
fn naive_aligned(events: &[Event], size: i64, slide: i64, slots: Slots) -> usize {
    let mut state: HashMap<(Key, i64), [f64; 10]> = HashMap::new();
    for e in events {
        let mut start = e.ts.div_euclid(slide) * slide;
        while start > e.ts - size {
            let acc = state.entry((e.key.clone(), start)).or_insert([0.0; 10]);
            naive_update(acc, e, slots);
            start -= slide;
        }
    }
    state.len()
}

/// Naive in-order sessions: extend the key's last session or open a new one.
fn naive_sessions(events: &[Event], gap: i64, max_length: i64, slots: Slots) -> usize {
    let mut state: HashMap<Key, Vec<(i64, i64, [f64; 10])>> = HashMap::new();
    for e in events {
        let sessions = state.entry(e.key.clone()).or_default();
        match sessions.last_mut() {
            Some((start, end, acc)) if e.ts < *end && e.ts + gap - *start <= max_length => {
                *end = (*end).max(e.ts + gap);
                naive_update(acc, e, slots);
            }
            _ => {
                let mut acc = [0.0; 10];
                naive_update(&mut acc, e, slots);
                sessions.push((e.ts, e.ts + gap, acc));
            }
        }
    }
    state.values().map(Vec::len).sum()
}

/// Pane start -> key -> 24-byte key + 200 bytes: the size of the engine's (key, pane) entry
/// for the clickstream features.
type FloorMaps = BTreeMap<i64, HashMap<Key, [u64; 25], FxBuildHasher>>;

/// Floor maps holding every (1-minute pane, key) of `events`.
fn floor_maps(events: &[Event]) -> FloorMaps {
    let mut maps = FloorMaps::new();
    for e in events {
        maps.entry(e.ts.div_euclid(MINUTE) * MINUTE)
            .or_default()
            .entry(e.key.clone())
            .or_insert([0; 25]);
    }
    maps
}

/// Per event: find its pane and entry, write a word at each end of the entry.
fn floor_touch(events: &[Event], maps: &mut FloorMaps) -> usize {
    let mut found = 0;
    for e in events {
        let pane = maps.get_mut(&(e.ts.div_euclid(MINUTE) * MINUTE));
        if let Some(words) = pane.and_then(|keys| keys.get_mut(&e.key)) {
            words[0] += 1;
            words[24] = e.ts as u64;
            found += 1;
        }
    }
    found
}

/// Every window kind, timed by `M`; group names end in `suffix`.
fn bench<M: Measurement>(c: &mut Criterion<M>, suffix: &str) {
    let schema = schema();
    let features = features(&schema);
    let decoder = JsonDecoder::new(schema.clone());
    let events = events(&decoder, &payloads());
    let slots = slots(&schema);
    // (group, window, naive baseline over the same events)
    type Naive = fn(&[Event], Slots) -> usize;
    let kinds: [(&str, WindowSpec, Naive); 3] = [
        (
            "tumbling",
            WindowSpec::Tumbling { size: MINUTE },
            |events, slots| naive_aligned(events, MINUTE, MINUTE, slots),
        ),
        (
            "hopping",
            WindowSpec::Hopping {
                size: 5 * MINUTE,
                slide: MINUTE,
            },
            |events, slots| naive_aligned(events, 5 * MINUTE, MINUTE, slots),
        ),
        (
            "session",
            WindowSpec::Session {
                gap: 5 * MINUTE,
                max_length: 30 * MINUTE,
            },
            |events, slots| naive_sessions(events, 5 * MINUTE, 30 * MINUTE, slots),
        ),
    ];
    // The same records with their event times packed into one minute: every record falls in
    // the window being filled, which holds a slot for every key that has a record in it.
    let (first, n) = (events[0].ts, events.len() as i64);
    let one_window: Vec<Event> = events
        .iter()
        .enumerate()
        .map(|(i, e)| Event {
            ts: first + i as i64 * MINUTE / n,
            ..e.clone()
        })
        .collect();
    for (name, spec, naive) in kinds {
        let mut group = c.benchmark_group(format!("{name}{suffix}"));
        group.throughput(Throughput::Elements(events.len() as u64));
        let fresh = || KeyedWindows::new(spec.clone(), 0);
        for (input, prefix) in [(&events, "keyed_windows"), (&one_window, "one_window")] {
            let apply_all = |mut state: KeyedWindows| {
                for e in input {
                    state.apply(&features, e, Watermark::MIN);
                }
                state
            };
            group.bench_function(format!("{prefix}_new_slots"), |b| {
                b.iter_batched(fresh, apply_all, BatchSize::LargeInput)
            });
            let warm = apply_all(fresh());
            group.bench_function(format!("{prefix}_existing_slots"), |b| {
                b.iter_batched(|| warm.clone(), apply_all, BatchSize::LargeInput)
            });
        }
        group.bench_function("naive", |b| b.iter(|| black_box(naive(&events, slots))));
        if name == "tumbling" {
            let mut maps = floor_maps(&events);
            group.bench_function("map_floor_existing_slots", |b| {
                b.iter(|| black_box(floor_touch(&events, &mut maps)))
            });
            let mut maps = floor_maps(&one_window);
            group.bench_function("one_window_map_floor", |b| {
                b.iter(|| black_box(floor_touch(&one_window, &mut maps)))
            });
        }
        group.finish();
    }
}

fn wall_time(c: &mut Criterion) {
    bench(c, "");
}

fn cpu_time(c: &mut Criterion<ThreadCpuTime>) {
    bench(c, "_cpu");
}

criterion_group!(wall, wall_time);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu_time
}
criterion_main!(wall, cpu);
