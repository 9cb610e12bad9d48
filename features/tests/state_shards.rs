//! Incremental snapshots of sharded window state (issue #4): a job checkpointed every few
//! ticks writes only the shards that changed, and a restore from those files — at another
//! parallelism, twice in a row — continues with exactly the rows of a run that never stopped,
//! for every window kind and both triggers.

mod common;

use anyhow::{bail, Result};

use common::{seeded_events, snapshot_events, snapshot_job, snapshot_window_kinds};
use rand::Rng;
use weir_features::job_features::JobFeatures;
use weir_features::job_features::Trigger;
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::state_shards::{StateShards, SHARDS, SHARDS_WITHOUT_CHECKPOINTS};
use weir_features::vocab::{KeyGroup, Watermark};
use weir_features::window::WindowSpec;

/// Key groups: one shard each, most of them empty or idle.
const G: u32 = 256;
const LATENESS_MS: i64 = 2_000;
const EVENTS_PER_TICK: usize = 40;
const TICKS_PER_EPOCH: usize = 3;

/// What a committed checkpoint lists: every shard's key-group range and latest bytes.
type Checkpoint = Vec<(u32, u32, Vec<u8>)>;

/// One window instance: its shards and the latest written bytes of each.
struct Instance {
    state: StateShards,
    files: Vec<Option<Vec<u8>>>,
}

/// The window instances of a job at one parallelism.
struct Job {
    instances: Vec<Instance>,
}

fn range_of(instance: u32, parallelism: u32) -> (u32, u32) {
    let bound = |i: u32| (i * G).div_ceil(parallelism).min(G);
    (bound(instance), bound(instance + 1))
}

impl Job {
    /// `parallelism` instances, restored from `checkpoint` when given.
    fn start(job: &JobFeatures, parallelism: u32, checkpoint: Option<&Checkpoint>) -> Result<Job> {
        Job::start_in(job, (parallelism, SHARDS), checkpoint)
    }

    /// [`Job::start`] with the job's key groups cut into `shards`.
    fn start_in(
        job: &JobFeatures,
        (parallelism, shards): (u32, u32),
        checkpoint: Option<&Checkpoint>,
    ) -> Result<Job> {
        let mut instances = Vec::new();
        for i in 0..parallelism {
            let (lo, hi) = range_of(i, parallelism);
            let mut state = StateShards::new(job, LATENESS_MS, (lo, hi), G, shards);
            for (flo, fhi, bytes) in checkpoint.into_iter().flatten() {
                if *flo < hi && lo < *fhi {
                    state.restore(job, (*flo, *fhi), bytes, (0, None))?;
                }
            }
            let files = vec![None; state.len()];
            instances.push(Instance { state, files });
        }
        Ok(Job { instances })
    }

    /// One tick: the records applied at the watermark `before`, then every instance fired at
    /// `after`.
    fn tick(
        &mut self,
        job: &JobFeatures,
        batch: &[Event],
        before: i64,
        after: i64,
        out: &mut Vec<FeatureRow>,
    ) -> Result<()> {
        let p = self.instances.len() as u64;
        for event in batch {
            let owner = u64::from(event.key_group.0) * p / u64::from(G);
            let Some(instance) = self.instances.get_mut(owner as usize) else {
                bail!("no instance {owner}");
            };
            instance.state.apply(job, event, Watermark(before));
        }
        for instance in &mut self.instances {
            instance.state.fire(job, Watermark(after), out);
        }
        Ok(())
    }

    /// Writes the changed shards; returns the checkpoint and how many shards were written.
    fn checkpoint(&mut self) -> Result<(Checkpoint, usize)> {
        let mut written = 0;
        let mut checkpoint = Vec::new();
        for instance in &mut self.instances {
            for shard in instance.state.changed_snapshots()? {
                if let Some(file) = instance.files.get_mut(shard.index) {
                    *file = Some(shard.bytes);
                    written += 1;
                }
            }
            for ((lo, hi), file) in instance.state.ranges().zip(&instance.files) {
                let Some(bytes) = file else {
                    bail!("shard {lo}..{hi} was never written");
                };
                checkpoint.push((lo, hi, bytes.clone()));
            }
        }
        Ok((checkpoint, written))
    }

    fn finish(&mut self, job: &JobFeatures, out: &mut Vec<FeatureRow>) {
        for instance in &mut self.instances {
            instance.state.fire(job, Watermark::MAX, out);
        }
    }
}

fn sorted(rows: &[FeatureRow]) -> Vec<String> {
    let mut text: Vec<String> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.fired_at_ns = 0;
            format!("{r:?}")
        })
        .collect();
    text.sort();
    text
}

/// Runs `ticks` from `from` on `job`, checkpointing every few ticks. Returns the rows, the
/// checkpoint taken after tick `stop_at` (if reached), and (shards written, shards listed)
/// over all checkpoints after the first.
struct Leg {
    rows: Vec<FeatureRow>,
    checkpoint_at_stop: Option<Checkpoint>,
    written: usize,
    listed: usize,
}

fn run_leg(
    job: &JobFeatures,
    instances: &mut Job,
    ticks: &[Vec<Event>],
    from: usize,
    stop_at: Option<usize>,
    watermarks: &[i64],
) -> Result<Leg> {
    let mut leg = Leg {
        rows: Vec::new(),
        checkpoint_at_stop: None,
        written: 0,
        listed: 0,
    };
    for (t, batch) in ticks.iter().enumerate().skip(from) {
        let before = if t == 0 { i64::MIN } else { watermarks[t - 1] };
        instances.tick(job, batch, before, watermarks[t], &mut leg.rows)?;
        if t % TICKS_PER_EPOCH == TICKS_PER_EPOCH - 1 {
            let (checkpoint, written) = instances.checkpoint()?;
            if t >= from + TICKS_PER_EPOCH {
                leg.written += written;
                leg.listed += checkpoint.len();
            }
            if Some(t) == stop_at {
                leg.checkpoint_at_stop = Some(checkpoint);
                return Ok(leg);
            }
        }
    }
    instances.finish(job, &mut leg.rows);
    Ok(leg)
}

/// 3 000 seeded events in phases of 250: each phase uses 8 keys of its own, so keys go idle
/// and their shards change afterwards only by firing and dropping windows. Up to 2 s out of
/// order.
fn phased_events(seed: u64) -> Result<Vec<Event>> {
    let mut events = seeded_events(seed, |i, rng| {
        format!("p{}k{}", i / 250, rng.random_range(0..8))
    })?;
    for e in &mut events {
        e.key_group = KeyGroup::of(e.key.as_bytes(), G);
    }
    Ok(events)
}

fn check(job: &JobFeatures, seed: u64, parallelisms: [u32; 3]) -> Result<()> {
    let events = phased_events(seed)?;
    let ticks: Vec<Vec<Event>> = events.chunks(EVENTS_PER_TICK).map(<[_]>::to_vec).collect();
    let mut watermarks = Vec::new();
    let mut wm = i64::MIN;
    for batch in &ticks {
        wm = batch.iter().map(|e| e.ts - 5_000).fold(wm, i64::max);
        watermarks.push(wm);
    }
    // Restore points: ends of epochs at about 1/3 and 2/3 of the input.
    let epoch_end =
        |share: usize| (ticks.len() * share / 3) / TICKS_PER_EPOCH * TICKS_PER_EPOCH - 1;
    let (first_stop, second_stop) = (epoch_end(1), epoch_end(2));

    let straight = run_leg(
        job,
        &mut Job::start(job, parallelisms[0], None)?,
        &ticks,
        0,
        None,
        &watermarks,
    )?;
    let mut got = Vec::new();
    let first = run_leg(
        job,
        &mut Job::start(job, parallelisms[0], None)?,
        &ticks,
        0,
        Some(first_stop),
        &watermarks,
    )?;
    got.extend(first.rows);
    let second = run_leg(
        job,
        &mut Job::start(job, parallelisms[1], first.checkpoint_at_stop.as_ref())?,
        &ticks,
        first_stop + 1,
        Some(second_stop),
        &watermarks,
    )?;
    got.extend(second.rows);
    let third = run_leg(
        job,
        &mut Job::start(job, parallelisms[2], second.checkpoint_at_stop.as_ref())?,
        &ticks,
        second_stop + 1,
        None,
        &watermarks,
    )?;
    got.extend(third.rows);

    assert!(
        straight.rows.len() > 100,
        "only {} rows",
        straight.rows.len()
    );
    let (expected, got) = (sorted(&straight.rows), sorted(&got));
    let missing: Vec<&String> = expected
        .iter()
        .filter(|r| !got.contains(r))
        .take(3)
        .collect();
    let extra: Vec<&String> = got
        .iter()
        .filter(|r| !expected.contains(r))
        .take(3)
        .collect();
    assert!(
        expected == got,
        "seed {seed}, parallelism {parallelisms:?}: {} rows expected, {} got; missing {missing:#?}, extra {extra:#?}",
        expected.len(),
        got.len()
    );
    // Incremental: with 8 keys at a time in 256 shards most checkpoints rewrite few shards.
    assert!(
        straight.written * 3 < straight.listed,
        "{} of {} shards rewritten",
        straight.written,
        straight.listed
    );
    Ok(())
}

#[test]
fn incremental_restores_continue_exactly() -> Result<()> {
    let over_range = WindowSpec::OverRange { range: 30_000 };
    for primary in snapshot_window_kinds().into_iter().chain([over_range]) {
        let over_range = matches!(primary, WindowSpec::OverRange { .. });
        for trigger in [Trigger::Close, Trigger::Schedule { every: 30_000 }] {
            if over_range && trigger != Trigger::Close {
                continue;
            }
            let job = snapshot_job(primary.clone(), trigger)?;
            for (seed, parallelisms) in [(1, [1, 1, 1]), (2, [1, 3, 2]), (3, [2, 1, 3])] {
                check(&job, seed, parallelisms)?;
            }
        }
    }
    Ok(())
}

#[test]
fn rows_do_not_depend_on_the_number_of_shards() -> Result<()> {
    let job = snapshot_job(WindowSpec::Tumbling { size: 60_000 }, Trigger::Close)?;
    let events = phased_events(11)?;
    let ticks: Vec<Vec<Event>> = events.chunks(EVENTS_PER_TICK).map(<[_]>::to_vec).collect();
    let watermarks: Vec<i64> = ticks
        .iter()
        .scan(i64::MIN, |wm, batch| {
            *wm = batch.iter().map(|e| e.ts - 5_000).fold(*wm, i64::max);
            Some(*wm)
        })
        .collect();
    let rows = |shards: u32| -> Result<Vec<String>> {
        let mut instances = Job::start_in(&job, (2, shards), None)?;
        assert_eq!(
            instances.instances[0].state.len(),
            (shards.min(G) as usize / 2).max(1)
        );
        let leg = run_leg(&job, &mut instances, &ticks, 0, None, &watermarks)?;
        Ok(sorted(&leg.rows))
    };
    let fine = rows(SHARDS)?;
    assert!(!fine.is_empty());
    assert_eq!(fine, rows(SHARDS_WITHOUT_CHECKPOINTS)?);
    assert_eq!(fine, rows(1)?);
    Ok(())
}

#[test]
fn unchanged_shards_are_not_encoded_again() -> Result<()> {
    let job = snapshot_job(WindowSpec::Tumbling { size: 60_000 }, Trigger::Close)?;
    let mut state = StateShards::new(&job, LATENESS_MS, (0, G), G, SHARDS);
    assert_eq!(state.len(), G as usize, "one shard per key group");
    assert_eq!(
        state.changed_snapshots()?.len(),
        G as usize,
        "the first snapshot is full"
    );
    assert!(state.changed_snapshots()?.is_empty());
    let mut events = snapshot_events(7)?;
    let Some(event) = events.first_mut() else {
        bail!("no events");
    };
    event.key_group = KeyGroup::of(event.key.as_bytes(), G);
    state.apply(&job, event, Watermark::MIN);
    let changed = state.changed_snapshots()?;
    assert_eq!(changed.len(), 1);
    let kg = event.key_group.0;
    assert!(changed.iter().all(|s| s.lo <= kg && kg < s.hi));
    // Firing with nothing due changes nothing; firing the window does.
    let mut rows = Vec::new();
    state.fire(&job, Watermark(event.ts), &mut rows);
    assert!(state.changed_snapshots()?.is_empty());
    state.fire(&job, Watermark(event.ts + 120_000), &mut rows);
    assert_eq!(rows.len(), 1);
    assert_eq!(state.changed_snapshots()?.len(), 1);
    state.mark_all_changed();
    assert_eq!(state.changed_snapshots()?.len(), G as usize);
    Ok(())
}
