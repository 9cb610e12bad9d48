//! Checkpoint cost (issue #4 acceptance), against baselines measured in the same run.
//!
//! Run: `cargo bench --bench checkpoint` (results: BENCHMARKS.md). Not a criterion benchmark:
//! each measurement takes seconds, so every case runs `REPEATS` times and the median is
//! printed.
//!
//! 1. **1 M keys**: the window state of 1 000 000 keys (one open 1-hour tumbling window each,
//!    the 8 clickstream features) in one instance's 4096 key-group shards, as the operator
//!    keeps it — a full checkpoint (encode every shard on the worker, then write them as one
//!    bundle: `StateShards::changed_snapshots` + `LocalDirStore::write_bundle`, fsync + rename)
//!    against a plain `fs::write` + `fsync` of the same number of bytes; restore (read,
//!    checksum, decode every shard) against a plain `fs::read`; a rescale restore (instance 0
//!    of 2); and incremental checkpoints after 10 … 10 000 updates of random keys.
//!    Target: restore ≤ 5 s.
//!    `-- s3`: the full checkpoint (write of the bundle, manifest commit) and the restore of the
//!    same state on moto's S3-compatible server against the local directory (issue #17).
//! 2. **Throughput with checkpoints**: the job's dataflow (file source, window features,
//!    feature rows to a file; 1 worker) over 2 M events of 100 k keys, with no checkpoints vs a
//!    checkpoint every 500 ms (20× more often than the default 10 s). Target: ≤ 5 % loss at
//!    10 s; reported as the ratio of events/s. For the target's own interval:
//!    `WEIR_BENCH_CHECKPOINT_INTERVAL=10s WEIR_BENCH_RUN_EVENTS=20000000 WEIR_BENCH_REPEATS=1
//!    cargo bench --bench checkpoint -- throughput` (runs of about 40 s).

#[path = "common/mod.rs"]
mod common;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use weir_checkpoint::range::overlapping;
use weir_checkpoint::{
    KeyGroupRange, LocalDirStore, Manifest, ObjectStoreSnapshotStore, Retries, S3Options,
    SnapshotStore,
};
use weir_features::decode::JsonDecoder;
use weir_features::job_features::JobFeatures;
use weir_features::record::Event;
use weir_features::state_shards::{ShardSnapshot, StateShards, SHARDS};
use weir_features::vocab::{Epoch, Watermark};
use weir_features::window::WindowSpec;
use weir_testkit::event::from_decoded;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

/// Runs per case (`WEIR_BENCH_REPEATS` overrides), median shown.
const REPEATS: usize = 3;

fn repeats() -> usize {
    std::env::var("WEIR_BENCH_REPEATS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(REPEATS)
        .max(1)
}
const STATE_KEYS: usize = 1_000_000;
/// Events of the throughput case (`WEIR_BENCH_RUN_EVENTS` overrides).
const RUN_EVENTS: usize = 2_000_000;
const RUN_KEYS: usize = 100_000;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let started = Instant::now();
    let out = f();
    (started.elapsed(), out)
}

/// One event of key `u<i>` (7 digits) at `ts`.
fn key_event(decoder: &JsonDecoder, i: usize, ts: i64, rng: &mut impl Rng) -> Event {
    let payload = format!(
        "{{\"user\":\"u{i:07}\",\"ts\":{ts},\"type\":\"view\",\"dwell_ms\":{:.1}}}",
        rng.random_range(10.0..9000.0)
    );
    let decoded = decoder
        .decode(payload.as_bytes())
        .unwrap_or_else(|e| panic!("{e:?}"));
    from_decoded(decoded, G, i as i64)
}

const G: u32 = 4096;
const T0: i64 = 1_767_225_600_000;

/// The sharded state of one window instance owning every key group, holding `STATE_KEYS`
/// keys with one event each in one window; and a decoder for more events.
fn million_keys() -> (JobFeatures, StateShards, JsonDecoder) {
    let schema = common::schema();
    let job = JobFeatures::single(
        WindowSpec::Tumbling { size: 3_600_000 },
        common::features(&schema),
    );
    let decoder = JsonDecoder::new(schema);
    let mut state = StateShards::new(&job, 0, (0, G), G, SHARDS);
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for i in 0..STATE_KEYS {
        let event = key_event(&decoder, i, T0 + (i as i64 % 1_000_000), &mut rng);
        state.apply(&job, &event, Watermark::MIN);
    }
    (job, state, decoder)
}

/// The bundle sections of encoded shards.
fn sections(changed: &[ShardSnapshot]) -> Vec<(KeyGroupRange, &[u8])> {
    changed
        .iter()
        .map(|s| (KeyGroupRange { lo: s.lo, hi: s.hi }, s.bytes.as_slice()))
        .collect()
}

/// What the window operator does at an epoch: encode the changed shards on the worker (the
/// pause), then write each durably (its writer thread). Returns (pause, write, shards, bytes).
fn checkpoint(
    state: &mut StateShards,
    store: &dyn SnapshotStore,
    epoch: Epoch,
) -> (Duration, Duration, usize, usize) {
    let (pause, changed) = time(|| state.changed_snapshots().unwrap_or_else(|e| panic!("{e}")));
    let bytes = changed.iter().map(|s| s.bytes.len()).sum();
    let sections = sections(&changed);
    let (write, _) = time(|| {
        if !sections.is_empty() {
            store
                .write_bundle(epoch, "window", KeyGroupRange { lo: 0, hi: G }, &sections)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    });
    (pause, write, changed.len(), bytes)
}

/// Restores the instance `instance` of `parallelism` from the bundle of `epoch` (all shards).
fn restore(
    job: &JobFeatures,
    store: &dyn SnapshotStore,
    manifest: &Manifest,
    instance: usize,
    parallelism: usize,
) -> StateShards {
    let mine = KeyGroupRange::of_instance(instance, parallelism, G);
    let mut state = StateShards::new(job, 0, (mine.lo, mine.hi), G, SHARDS);
    let files = overlapping(&manifest.files, "window", instance, parallelism, G);
    store
        .for_each_snapshot(
            manifest.epoch,
            &mut files.iter().map(|(f, _)| *f),
            &mut |entry, bytes| {
                state
                    .restore(job, (entry.range.lo, entry.range.hi), bytes, (0, None))
                    .unwrap_or_else(|e| panic!("{e}"));
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    state
}

/// A manifest listing the full bundle of `epoch` (what the committer would write).
fn full_manifest(
    store: &dyn SnapshotStore,
    epoch: Epoch,
    state: &mut StateShards,
) -> (Manifest, Duration, Duration, usize, usize) {
    state.mark_all_changed();
    let (pause, changed) = time(|| state.changed_snapshots().unwrap_or_else(|e| panic!("{e}")));
    let bytes = changed.iter().map(|s| s.bytes.len()).sum();
    let sections = sections(&changed);
    let (write, files) = time(|| {
        store
            .write_bundle(epoch, "window", KeyGroupRange { lo: 0, hi: G }, &sections)
            .unwrap_or_else(|e| panic!("{e}"))
    });
    let mut manifest = Manifest::new(epoch, G);
    manifest.parallelism.insert("window".to_owned(), 1);
    manifest.files = files;
    (manifest, pause, write, changed.len(), bytes)
}

/// The S3 case of `state_costs`: a full checkpoint and a restore of the same 1 M-key state in a
/// bucket of moto's S3-compatible server (started here, `testkit::s3_server`), against the same
/// on the local directory in the same run.
fn s3_state_costs() {
    let (job, mut state, _) = million_keys();
    let dir = scratch_dir("bench-s3");
    let local = LocalDirStore::open(dir.join("ckpt")).unwrap_or_else(|e| panic!("{e}"));
    let server = weir_testkit::s3_server::S3Server::start();
    server.create_bucket("bench");
    let options = S3Options {
        config: weir_testkit::s3_server::aws_options(&server.address()),
        retries: Retries::default(),
    };
    let s3 = ObjectStoreSnapshotStore::open_with("s3://bench/ckpt", &options)
        .unwrap_or_else(|e| panic!("{e}"));
    let stores: [(&str, &dyn SnapshotStore); 2] = [("local directory", &local), ("S3 (moto)", &s3)];
    let mut medians = Vec::new();
    for (name, store) in stores {
        let (mut write, mut restored) = (vec![], vec![]);
        for round in 0..repeats() {
            let epoch = Epoch(round as u64 + 1);
            let (mut manifest, _, written, _, _) = full_manifest(store, epoch, &mut state);
            manifest.tick_ms = 1;
            let (commit, _) = time(|| {
                store
                    .commit_manifest(&manifest)
                    .unwrap_or_else(|e| panic!("{e}"))
            });
            write.push(written + commit);
            let (took, whole) = time(|| restore(&job, store, &manifest, 0, 1));
            assert_eq!(whole.open_slots(), STATE_KEYS);
            restored.push(took);
        }
        medians.push((name, median(write), median(restored)));
    }
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let ((_, local_write, local_restore), (_, s3_write, s3_restore)) = (medians[0], medians[1]);
    for (name, write, restored) in &medians {
        println!(
            "  {name}: full 1 M-key checkpoint (bundle write + manifest commit) {} | restore {}",
            ms(*write),
            ms(*restored)
        );
    }
    println!(
        "  S3 against the local directory: write {:.2}x, restore {:.2}x",
        s3_write.as_secs_f64() / local_write.as_secs_f64(),
        s3_restore.as_secs_f64() / local_restore.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn state_costs() {
    let (job, mut state, decoder) = million_keys();
    let dir = scratch_dir("bench-state");
    let store = LocalDirStore::open(dir.join("ckpt")).unwrap_or_else(|e| panic!("{e}"));
    let (mut pause, mut write, mut raw_write, mut restored, mut raw_read, mut rescale) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut size, mut files) = (0, 0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for round in 0..repeats() {
        let epoch = Epoch(round as u64 + 1);
        let (manifest, encoded, written, shards, bytes) = full_manifest(&store, epoch, &mut state);
        (size, files) = (bytes, shards);
        pause.push(encoded);
        write.push(written);
        let raw = dir.join(format!("raw-{round}"));
        let blob = vec![7u8; bytes];
        let (took, _) = time(|| {
            let mut file = std::fs::File::create(&raw).unwrap_or_else(|e| panic!("{e}"));
            file.write_all(&blob).unwrap_or_else(|e| panic!("{e}"));
            file.sync_all().unwrap_or_else(|e| panic!("{e}"));
        });
        raw_write.push(took);
        let (took, _) = time(|| std::fs::read(&raw).unwrap_or_else(|e| panic!("{e}")));
        raw_read.push(took);
        let (took, whole) = time(|| restore(&job, &store, &manifest, 0, 1));
        restored.push(took);
        assert_eq!(whole.open_slots(), STATE_KEYS);
        let (took, half) = time(|| restore(&job, &store, &manifest, 0, 2));
        rescale.push(took);
        assert!(half.open_slots() < STATE_KEYS);
    }
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let (pause, write, raw_write) = (median(pause), median(write), median(raw_write));
    let (restored, raw_read, rescale) = (median(restored), median(raw_read), median(rescale));
    println!(
        "state of {STATE_KEYS} keys: full snapshot {:.1} MB, {files} shards in one bundle file",
        size as f64 / 1e6
    );
    println!(
        "  full checkpoint = encode (worker pause) {} + durable writes {} = {} | raw write+fsync of one file {} ({:.2}x)",
        ms(pause),
        ms(write),
        ms(pause + write),
        ms(raw_write),
        (pause + write).as_secs_f64() / raw_write.as_secs_f64()
    );
    println!(
        "  restore (read, checksum, decode every shard) {} | raw read {} | rescale restore (instance 0 of 2) {}",
        ms(restored),
        ms(raw_read),
        ms(rescale)
    );
    // Incremental epochs: `updates` records of random keys after a full checkpoint.
    for (n, updates) in [10usize, 100, 1_000, 10_000, 100_000]
        .into_iter()
        .enumerate()
    {
        state.mark_all_changed();
        checkpoint(&mut state, &store, Epoch(100 + 2 * n as u64));
        for u in 0..updates {
            let key = rng.random_range(0..STATE_KEYS);
            let event = key_event(&decoder, key, T0 + u as i64, &mut rng);
            state.apply(&job, &event, Watermark::MIN);
        }
        let (encoded, written, shards, bytes) =
            checkpoint(&mut state, &store, Epoch(101 + 2 * n as u64));
        println!(
            "  incremental after {updates} updates of random keys: {shards}/{files} shards, {:.1} MB, worker pause {}, writes {}",
            bytes as f64 / 1e6,
            ms(encoded),
            ms(written)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The checkpoint interval of the throughput case (`WEIR_BENCH_CHECKPOINT_INTERVAL`, e.g.
/// `10s`; default `500ms`).
fn interval() -> String {
    std::env::var("WEIR_BENCH_CHECKPOINT_INTERVAL").unwrap_or_else(|_| "500ms".to_owned())
}

fn run_events() -> usize {
    std::env::var("WEIR_BENCH_RUN_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(RUN_EVENTS)
}

fn job_text(input: &Path, checkpoint: Option<&Path>) -> String {
    let checkpoint = checkpoint.map_or(String::new(), |dir| {
        format!(
            "[checkpoint]\n{}\nretain = 2\n",
            checkpoint_toml(dir, &interval())
        )
    });
    format!(
        r#"
name = "bench-checkpoint"
[runtime]
workers = 1
[source]
kind = "file"
paths = ["{input}"]
key = "user"
event_time = "ts"
[source.fields]
{fields}
[window]
kind = "tumbling"
size = "1m"
[[features]]
name = "events"
agg = "count"
[[features]]
name = "dwell_mean"
agg = "mean"
field = "dwell_ms"
[[features]]
name = "amount_sum"
agg = "sum"
field = "amount"
[model]
path = "unused"
[sink]
kind = "file"
path = "rows.jsonl"
{checkpoint}
"#,
        input = input.display(),
        fields = weir_testkit::clickstream::fields_toml(),
    )
}

fn throughput_with_checkpoints() {
    let dir = scratch_dir("bench-run");
    let input = dir.join("events.jsonl");
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let events = run_events();
    let mut text = String::with_capacity(events * 80);
    for i in 0..events {
        let kind = ["view", "click", "purchase"][rng.random_range(0..3)];
        text.push_str(&format!(
            "{{\"user\":\"u{:06}\",\"ts\":{},\"type\":\"{kind}\",\"dwell_ms\":{:.1}}}\n",
            rng.random_range(0..RUN_KEYS),
            1_767_225_600_000i64 + i as i64,
            rng.random_range(10.0..9000.0)
        ));
    }
    std::fs::write(&input, text).unwrap_or_else(|e| panic!("{e}"));
    let run = |checkpoints: bool, round: usize| {
        let ckpt = dir.join(format!("ckpt-{round}"));
        let text = job_text(&input, checkpoints.then_some(ckpt.as_path()));
        let mut job: weir::JobFile = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        job.base_dir = dir.clone();
        let job = job.compile().unwrap_or_else(|e| panic!("{e:#}"));
        let summary = weir::run::run_job_with(
            job,
            weir::pipeline::Mode::FeaturesOnly,
            Arc::new(AtomicBool::new(false)),
            &weir::run::RunOptions {
                restore: weir::checkpointing::RestoreChoice::Fresh,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(summary.events_in, events as u64);
        summary
    };
    let (mut plain, mut with) = (vec![], vec![]);
    let mut committed = 0;
    let mut snapshot_ms = 0.0;
    for round in 0..repeats() {
        plain.push(run(false, round).elapsed);
        let summary = run(true, round);
        committed = summary.checkpoints_committed;
        snapshot_ms = summary.snapshot_time.as_secs_f64() * 1e3;
        with.push(summary.elapsed);
    }
    let (plain, with) = (median(plain), median(with));
    let rate = |d: Duration| events as f64 / d.as_secs_f64() / 1e6;
    println!(
        "dataflow, 1 worker, {events} events / {RUN_KEYS} keys: no checkpoints {:.2} M events/s | checkpoint every {} {:.2} M events/s = {:.3}x ({committed} checkpoints in the last run, {snapshot_ms:.0} ms encoding+writing)",
        rate(plain),
        interval(),
        rate(with),
        plain.as_secs_f64() / with.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters by name.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    if wanted("state") {
        state_costs();
    }
    if wanted("s3") {
        s3_state_costs();
    }
    if wanted("throughput") {
        throughput_with_checkpoints();
    }
}
