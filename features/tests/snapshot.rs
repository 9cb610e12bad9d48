//! Window state snapshots (issue #4): encoding a job's keyed state, splitting it by key group
//! into any number of instances and merging it back must not change a single output row
//! compared with a run that never stopped — for every window kind and both triggers.

mod common;

use anyhow::Result;
use common::{snapshot_events as events, snapshot_job as job, snapshot_window_kinds};

use weir_features::keyed_features::{JobFeatures, KeyedFeatures};
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::schedule::Trigger;
use weir_features::vocab::{KeyGroup, Watermark};
use weir_features::window::WindowSpec;

const GROUPS: u32 = 16;

/// Applies `events` with a watermark trailing by 5 s, firing after each event.
fn feed(
    state: &mut KeyedFeatures,
    job: &JobFeatures,
    events: &[Event],
    wm: &mut i64,
    out: &mut Vec<FeatureRow>,
) {
    for e in events {
        state.apply(job, e, Watermark(*wm));
        *wm = (*wm).max(e.ts - 5_000);
        state.fire(job, Watermark(*wm), |r| out.push(r));
    }
}

fn sorted(mut rows: Vec<FeatureRow>) -> Vec<String> {
    rows.iter_mut().for_each(|r| r.fired_at_ns = 0);
    let mut text: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
    text.sort();
    text
}

fn check(job: &JobFeatures, seed: u64, split_into: u32) -> Result<()> {
    let events = events(seed)?;
    let (head, tail) = events.split_at(events.len() / 2);
    let (mut straight, mut wm) = (KeyedFeatures::new(job, 2_000), i64::MIN);
    let mut expected = Vec::new();
    feed(&mut straight, job, &events, &mut wm, &mut expected);
    straight.fire(job, Watermark::MAX, |r| expected.push(r));

    let (mut before, mut wm) = (KeyedFeatures::new(job, 2_000), i64::MIN);
    let mut got = Vec::new();
    feed(&mut before, job, head, &mut wm, &mut got);
    let bytes = before.encode()?;
    // Restore into `split_into` instances by key group, then merge them back into one.
    let mut merged: Option<KeyedFeatures> = None;
    for part in 0..split_into {
        let mut piece = KeyedFeatures::decode(job, &bytes)?;
        piece.retain_keys(&|k| KeyGroup::of(k.as_bytes(), GROUPS).0 % split_into == part);
        match &mut merged {
            None => merged = Some(piece),
            Some(m) => m.absorb(piece)?,
        }
    }
    let mut after = merged.ok_or_else(|| anyhow::anyhow!("no parts"))?;
    feed(&mut after, job, tail, &mut wm, &mut got);
    after.fire(job, Watermark::MAX, |r| got.push(r));
    assert!(expected.len() > 100, "only {} rows", expected.len());
    assert_eq!(
        sorted(expected),
        sorted(got),
        "seed {seed}, {split_into} parts"
    );
    Ok(())
}

#[test]
fn restored_and_rescaled_state_continues_exactly() -> Result<()> {
    for primary in snapshot_window_kinds() {
        for trigger in [Trigger::Close, Trigger::Schedule { every: 30_000 }] {
            let job = job(primary.clone(), trigger)?;
            for (seed, parts) in [(1, 1), (2, 2), (3, 3)] {
                check(&job, seed, parts)?;
            }
        }
    }
    Ok(())
}

#[test]
fn snapshots_of_another_version_or_job_are_refused() -> Result<()> {
    let job1 = job(WindowSpec::Tumbling { size: 60_000 }, Trigger::Close)?;
    let mut bytes = KeyedFeatures::new(&job1, 0).encode()?;
    bytes[0] = 99;
    let err = KeyedFeatures::decode(&job1, &bytes)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("format version 99"), "{err}");
    let err = KeyedFeatures::decode(&job1, &[1, 0])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("shorter than its header"), "{err}");
    Ok(())
}
