//! Benchmark M (issue #18): bytes of memory per open (key, window) of the window state, for
//! count/sum/max per key, tumbling 1 m, hopping 5 m / 1 m and session 30 s. (Resident memory
//! of run F is in F's table, `benches/features_file.rs`.)
//!
//! Run: `cargo bench --bench window_memory` (or `scripts/bench.sh M`, which writes its
//! section of BENCHMARKS.md). Optional: `WEIR_BENCH_M_KEYS` (default 200 000),
//! `WEIR_BENCH_M_OUT` (the markdown table, default `<target dir>/bench-results/M.md`).
//!
//! Method: the global allocator is the `weir` binary's (`weir::allocator`) wrapped in a counter of
//! the bytes currently allocated (what callers asked for; jemalloc's size classes round each
//! request up by at most 25 %, not counted). For each window kind, one event of each of
//! `KEYS` keys, all in one window, is applied to an empty `KeyedWindows` (no firing), and the
//! growth of allocated bytes is divided by the open slots it reports: one (key, pane) for the
//! aligned windows (a hopping window's five windows share a key's panes) and one (key,
//! session) for sessions. It is also divided by the open (key, window)s: a slot for tumbling
//! and session windows; for hopping windows, each key's one pane is in `size / slide` windows,
//! all open (a key with a pane in every slide would have as many panes as windows, so there
//! the two figures are the same). Baseline, same run: a `HashMap<Key, [f64; 3]>` holding
//! the same keys with the three values and nothing else (the key's inline 24 bytes, 24 bytes
//! of values, the hash table's slack).

// A global allocator is an `unsafe` trait; the three methods only forward to the job's
// allocator.
#![allow(unsafe_code)]

#[path = "results/mod.rs"]
mod results;

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use weir_features::aggregate::AggKind;
use weir_features::feature::FeatureSet;
use weir_features::record::Value;
use weir_features::vocab::{Key, Watermark};
use weir_features::window::WindowSpec;
use weir_features::window_state::KeyedWindows;
use weir_testkit::schema::F64;
use weir_testkit::spec::spec;

/// The job's allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static JOB_ALLOCATOR: weir::allocator::JobAllocator = weir::allocator::JobAllocator;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the job's allocator, under the caller's contract.
        unsafe { JOB_ALLOCATOR.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { JOB_ALLOCATOR.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as for `dealloc`; the job's allocator (jemalloc) keeps the alignment.
        unsafe { JOB_ALLOCATOR.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const MINUTE: i64 = 60_000;

fn main() -> anyhow::Result<()> {
    let keys = env_usize("WEIR_BENCH_M_KEYS", 200_000);
    let schema = weir_testkit::schema::schema("user", "ts", &[("x", F64)]);
    let specs = [
        spec("n", AggKind::Count, None, None),
        spec("x_sum", AggKind::Sum, Some("x"), None),
        spec("x_max", AggKind::Max, Some("x"), None),
    ];
    let features = FeatureSet::compile(&specs, &schema)?;
    let t0 = 1_767_225_600_000i64;
    let events: Vec<_> = (0..keys)
        .map(|i| {
            let key = format!("u{i:07}");
            let ts = t0 + (i as i64 * MINUTE / keys as i64);
            weir_testkit::event::event(&key, ts)
                .by_name(&schema, |_| Value::Num((i % 997) as f64))
                .offset(i as i64)
                .build()
        })
        .collect();

    let before = live();
    let mut naive: HashMap<Key, [f64; 3]> = HashMap::new();
    for e in &events {
        naive.insert(e.key.clone(), [1.0, e.ts as f64, e.ts as f64]);
    }
    let naive_bytes = (live() - before) as f64 / keys as f64;
    drop(naive);

    let kinds = [
        ("tumbling 1 m", WindowSpec::Tumbling { size: MINUTE }),
        (
            "hopping 5 m / 1 m",
            WindowSpec::Hopping {
                size: 5 * MINUTE,
                slide: MINUTE,
            },
        ),
        (
            "session 30 s",
            WindowSpec::Session {
                gap: 30_000,
                max_length: 60 * MINUTE,
            },
        ),
    ];
    let mut table = String::new();
    writeln!(
        table,
        "Input: {keys} keys, one event each, in one minute; features count, sum and max of one field.\n"
    )?;
    writeln!(
        table,
        "| state | open slots | bytes per open slot | / baseline | open (key, window)s | bytes per open (key, window) |"
    )?;
    writeln!(table, "|---|---|---|---|---|---|")?;
    writeln!(
        table,
        "| baseline `HashMap<Key, [f64; 3]>` | {keys} | {naive_bytes:.0} | 1 | {keys} | {naive_bytes:.0} |"
    )?;
    for (name, spec) in kinds {
        let geometry = spec.aligned();
        let before = live();
        let mut state = KeyedWindows::new(spec, 0);
        for e in &events {
            state.apply(&features, e, Watermark::MIN);
        }
        let slots = state.open_slots();
        let grown = (live() - before) as f64;
        // Open (key, window)s: each key's one event is in every aligned window containing it,
        // all open; a key's session is one window.
        let windows: usize = match geometry {
            Some(geometry) => events
                .iter()
                .map(|e| geometry.windows_containing(e.ts).count())
                .sum(),
            None => slots,
        };
        let bytes = grown / slots as f64;
        writeln!(
            table,
            "| {name} | {slots} | {bytes:.0} | {:.2} | {windows} | {:.0} |",
            bytes / naive_bytes,
            grown / windows as f64
        )?;
        drop(state);
    }
    results::write_table("WEIR_BENCH_M_OUT", "M", &table)?;
    Ok(())
}
