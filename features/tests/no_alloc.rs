//! Proves the hot path of the window operator does not touch the heap: once a (key, window)
//! slot exists, `KeyedWindows::apply` (window assignment, key lookup, predicate evaluation,
//! accumulator updates) performs zero allocations. Keys are at most 24 bytes, so they live
//! inline in their `CompactString`.
//!
//! The test installs a counting global allocator. Counting is switched on per thread, so the
//! test harness's own threads cannot disturb the count.

// A `GlobalAlloc` impl is necessarily `unsafe` (its methods are `unsafe fn`s and forward to
// `System`); the workspace forbids unsafe code, and this test binary is the one place that needs it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use weir_features::aggregate::AggKind;
use weir_features::feature::FeatureSet;
use weir_features::record::{Event, Value};
use weir_features::vocab::{Key, Watermark};
use weir_features::window::WindowSpec;
use weir_features::window_state::{Applied, KeyedWindows};
use weir_testkit::event::{event, text};
use weir_testkit::schema::{schema, F64_OPTIONAL, STRING};
use weir_testkit::spec::spec;

/// Wraps `System`, counting allocations made by threads that switched counting on.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note_allocation() {
    // `try_with`: the allocator may run while thread-locals are being torn down.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the same arguments; counting does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while running `f`.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (usize, R) {
    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let result = f();
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(false));
    (after - before, result)
}

/// Slots (by name): amount, k, kind, ts.
fn setup() -> (FeatureSet, Vec<Key>) {
    let schema = schema("k", "ts", &[("kind", STRING), ("amount", F64_OPTIONAL)]);
    // Eight features: the most that stay inline in `Accumulators`.
    let specs = [
        spec("events", AggKind::Count, None, None),
        spec("views", AggKind::CountIf, None, Some("kind == 'view'")),
        spec(
            "clicks",
            AggKind::CountIf,
            None,
            Some("kind == \"click-through-event\""),
        ),
        spec("big", AggKind::CountIf, None, Some("amount >= 500")),
        spec("amount_sum", AggKind::Sum, Some("amount"), None),
        spec("amount_mean", AggKind::Mean, Some("amount"), None),
        spec(
            "amount_min",
            AggKind::Min,
            Some("amount"),
            Some("kind != 'view'"),
        ),
        spec("amount_max", AggKind::Max, Some("amount"), None),
    ];
    let features = FeatureSet::compile(&specs, &schema).unwrap_or_else(|e| panic!("features: {e}"));
    // Short keys and keys of exactly 24 bytes (the inline limit).
    let keys: Vec<Key> = (0..40)
        .map(|i| {
            if i % 2 == 0 {
                Key::from(format!("u{i}"))
            } else {
                Key::from(format!("user-{i:0>19}"))
            }
        })
        .collect();
    assert!(keys.iter().all(|k| k.len() <= 24 && !k.is_heap_allocated()));
    (features, keys)
}

const KINDS: [&str; 3] = ["view", "click-through-event", "purchase"];

#[test]
fn apply_to_existing_windows_does_not_allocate() {
    // Tumbling; hopping (panes of gcd(3000, 1000) = 1000, one pane update per record);
    // sessions (one session per key spanning all the records).
    assert_apply_does_not_allocate(WindowSpec::Tumbling { size: 1_000 }, 5, 1);
    assert_apply_does_not_allocate(
        WindowSpec::Hopping {
            size: 3_000,
            slide: 1_000,
        },
        5,
        3,
    );
    assert_apply_does_not_allocate(
        WindowSpec::Session {
            gap: 10_000,
            max_length: 1_000_000,
        },
        1,
        1,
    );
}

/// Warms every (key, pane) or session up, then applies 100 k records counting allocations;
/// `slots_per_key` is the number of panes or sessions each key ends up with.
/// `windows_per_record` the number of windows each record is in.
fn assert_apply_does_not_allocate(
    spec: WindowSpec,
    slots_per_key: usize,
    windows_per_record: usize,
) {
    let (features, keys) = setup();
    let mut state = KeyedWindows::new(spec, 0);
    const WINDOWS: i64 = 5;

    // Events built up front: building them is not what is measured.
    let make = |i: usize| {
        let key = keys[i % keys.len()].clone();
        let ts = (i as i64 * 7_919) % (WINDOWS * 1_000);
        let kind = KINDS[i % KINDS.len()];
        let amount = if i.is_multiple_of(5) {
            Value::Missing
        } else {
            Value::Num((i % 1_000) as f64)
        };
        let values = [
            amount,
            Value::Str(key.clone()),
            text(kind),
            Value::Num(ts as f64),
        ];
        event(&key, ts)
            .values(values)
            .key_groups(4096)
            .offset(i as i64)
            .build()
    };
    let events: Vec<Event> = (0..100_000).map(make).collect();
    assert!(events
        .iter()
        .all(|e| !e.values.spilled() && !e.key.is_heap_allocated()));

    // Warm-up: one record for every (key, window) creates all slots (this may allocate).
    for key in &keys {
        for w in 0..WINDOWS {
            let mut e = make(0);
            e.key = key.clone();
            e.ts = w * 1_000 + 1;
            assert_eq!(state.apply(&features, &e, Watermark::MIN), Applied::Updated);
        }
    }
    let slots = state.open_slots();
    assert_eq!(slots, keys.len() * slots_per_key);

    // The counter works: a deliberate allocation is seen.
    let (seen, boxed) = allocations_in(|| Box::new(42u64));
    assert_eq!((seen, *boxed), (1, 42));

    let (allocations, updated) = allocations_in(|| {
        let mut updated = 0usize;
        for e in &events {
            if state.apply(&features, e, Watermark(0)) == Applied::Updated {
                updated += 1;
            }
        }
        updated
    });
    assert_eq!(updated, events.len());
    assert_eq!(
        state.open_slots(),
        slots,
        "no new (key, window) slot was needed"
    );
    assert_eq!(
        allocations, 0,
        "KeyedWindows::apply allocated {allocations} times for existing slots"
    );

    // The records were all counted, warm-up included; a hopping record is in size / slide
    // windows.
    let mut rows = Vec::new();
    state.fire(&features, Watermark::MAX, &mut rows);
    let records: u64 = rows.iter().map(|row| row.records).sum();
    let warm_up = keys.len() * WINDOWS as usize;
    assert_eq!(
        records as usize,
        (events.len() + warm_up) * windows_per_record
    );
}

/// The decoder calls the event-time parsers once per record: none of them may touch the heap,
/// on success or failure (their errors carry no heap data).
#[test]
fn timestamp_parsers_allocate_nothing() {
    use weir_features::timestamp::{
        from_epoch_millis, from_epoch_seconds, from_rfc3339, JsonNumber,
    };
    let numbers = [
        JsonNumber::U64(1_796_040_000_000),
        JsonNumber::I64(-1),
        JsonNumber::F64(1_796_040_000.25),
        JsonNumber::F64(1000.5),
        JsonNumber::F64(f64::NAN),
        JsonNumber::U64(u64::MAX),
    ];
    let texts = [
        "2026-11-30T12:00:00Z",
        "2026-11-30T13:00:00.123456789+01:00",
        "2026-11-30",
        "not a time",
    ];
    let (count, outcomes) = allocations_in(|| {
        let mut ok = 0;
        for n in numbers {
            ok += usize::from(from_epoch_millis(n).is_ok());
            ok += usize::from(from_epoch_seconds(n).is_ok());
        }
        for text in texts {
            ok += usize::from(from_rfc3339(text).is_ok());
        }
        ok
    });
    assert_eq!(count, 0, "the timestamp parsers allocated {count} times");
    // U64 and I64 pass both numeric parsers, the two fractions only as seconds, two texts
    // are times.
    assert_eq!(outcomes, 2 + 2 + 1 + 1 + 2);
}
