//! Window state snapshots (issue #4): encoding a job's keyed state, splitting it by key group
//! into any number of instances and merging it back must not change a single output row
//! compared with a run that never stopped — for every window kind and both triggers.

mod common;

use anyhow::Result;
use common::{
    snapshot_events as events, snapshot_job as job, snapshot_job_same_in_every_format,
    snapshot_window_kinds,
};

use weir_features::job_features::JobFeatures;
use weir_features::job_features::Trigger;
use weir_features::keyed_features::KeyedFeatures;
use weir_features::record::Event;
use weir_features::row::FeatureRow;
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
        state.fire(job, Watermark(*wm), out);
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
    straight.fire(job, Watermark::MAX, &mut expected);

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
    after.fire(job, Watermark::MAX, &mut got);
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

/// Snapshots do not keep ingest times (a restored window's records were read by an earlier
/// run): a state fed events with ingest times encodes to the bytes of one fed the same events
/// without (so the format did not change when rows started carrying them), and rows of
/// windows restored whole have none, for every window kind and both triggers.
#[test]
fn ingest_times_stay_out_of_snapshots() -> Result<()> {
    // An over_range window emits per event: the close trigger only.
    let over_range = (WindowSpec::OverRange { range: 30_000 }, Trigger::Close);
    let triggers = [Trigger::Close, Trigger::Schedule { every: 30_000 }];
    let kinds = snapshot_window_kinds()
        .into_iter()
        .flat_map(|w| triggers.map(|t| (w.clone(), t)))
        .chain([over_range]);
    for (primary, trigger) in kinds {
        let job = job(primary.clone(), trigger)?;
        let plain = &events(6)?[..1_500];
        let mut ingested = plain.to_vec();
        for (i, e) in ingested.iter_mut().enumerate() {
            e.ingested_ms = 1_000 + i as u64;
        }
        let mut states = Vec::new();
        let mut rows = Vec::new();
        for (events, with_ingest) in [(&ingested[..], true), (plain, false)] {
            let (mut state, mut wm) = (KeyedFeatures::new(&job, 2_000), i64::MIN);
            rows.clear();
            feed(&mut state, &job, events, &mut wm, &mut rows);
            states.push(state.encode()?);
            if with_ingest {
                assert!(!rows.is_empty(), "{primary:?} {trigger:?}");
                assert!(rows.iter().all(|r| r.ingested_at_ms >= 1_000));
            }
        }
        assert_eq!(states[0], states[1], "{primary:?} {trigger:?}");
        let mut restored = KeyedFeatures::decode(&job, &states[0])?;
        rows.clear();
        restored.fire(&job, Watermark::MAX, &mut rows);
        assert!(!rows.is_empty(), "{primary:?} {trigger:?}");
        assert!(rows.iter().all(|r| r.ingested_at_ms == 0));
    }
    Ok(())
}

/// `feed`, one event per 10 ms of processing time from the `from`-th of the stream on,
/// expiring the keys quiet for 300 ms after every 50th.
fn feed_expiring(
    state: &mut KeyedFeatures,
    job: &JobFeatures,
    events: &[Event],
    from: usize,
    wm: &mut i64,
    out: &mut Vec<FeatureRow>,
) {
    for (i, e) in events.iter().enumerate() {
        let now = (from + i) as i64 * 10;
        state.set_processing_time(now);
        state.apply(job, e, Watermark(*wm));
        *wm = (*wm).max(e.ts - 5_000);
        state.fire(job, Watermark(*wm), out);
        if (from + i) % 50 == 49 {
            state.expire(job, now, 300, out);
        }
    }
}

/// Sessions forgotten by the state TTL keep their revision numbers (so a row never repeats a
/// `(key, window_end, revision)`), and a snapshot keeps them: restored and rescaled in the
/// middle of the stream, the run emits exactly the rows of a run that never stopped.
#[test]
fn sessions_forgotten_by_expiry_keep_their_revisions_across_a_restore() -> Result<()> {
    let session = WindowSpec::Session {
        gap: 10_000,
        max_length: 60_000,
    };
    let job = job(session, Trigger::Close)?;
    let events = events(4)?;
    let half = events.len() / 2;

    let (mut straight, mut wm) = (KeyedFeatures::new(&job, 2_000), i64::MIN);
    let mut expected = Vec::new();
    feed_expiring(&mut straight, &job, &events, 0, &mut wm, &mut expected);
    straight.fire(&job, Watermark::MAX, &mut expected);
    let mut ids = std::collections::HashSet::new();
    for r in &expected {
        assert!(
            ids.insert((r.key.clone(), r.window_end, r.revision)),
            "emitted twice: {r:?}"
        );
    }
    assert!(expected
        .iter()
        .any(|r| r.closed_by_timeout && r.revision > 0));

    let (mut before, mut wm) = (KeyedFeatures::new(&job, 2_000), i64::MIN);
    let mut got = Vec::new();
    feed_expiring(&mut before, &job, &events[..half], 0, &mut wm, &mut got);
    assert!(
        before.forgotten_windows() > 0,
        "the snapshot must hold forgotten sessions for this test to mean anything"
    );
    let bytes = before.encode()?;
    let mut after: Option<KeyedFeatures> = None;
    for part in 0..2 {
        let mut piece = KeyedFeatures::decode(&job, &bytes)?;
        piece.retain_keys(&|k| KeyGroup::of(k.as_bytes(), GROUPS).0 % 2 == part);
        match &mut after {
            None => after = Some(piece),
            Some(m) => m.absorb(piece)?,
        }
    }
    let mut after = after.ok_or_else(|| anyhow::anyhow!("no parts"))?;
    assert_eq!(after.forgotten_windows(), before.forgotten_windows());
    after.resume((half as i64 - 1) * 10, None);
    feed_expiring(&mut after, &job, &events[half..], half, &mut wm, &mut got);
    after.fire(&job, Watermark::MAX, &mut got);
    assert_eq!(sorted(expected), sorted(got));
    Ok(())
}

/// A version-1 snapshot (before forgotten sessions were kept) still restores.
#[test]
fn version_1_snapshots_restore() -> Result<()> {
    let job =
        snapshot_job_same_in_every_format(snapshot_window_kinds()[2].clone(), Trigger::Close)?;
    let mut state = KeyedFeatures::new(&job, 2_000);
    let (mut wm, mut rows) = (i64::MIN, Vec::new());
    let events = events(5)?;
    feed(&mut state, &job, &events[..500], &mut wm, &mut rows);
    let mut v1 = 1u32.to_le_bytes().to_vec();
    v1.extend(bincode::serialize(&state)?);
    let mut restored = KeyedFeatures::decode(&job, &v1)?;
    let (mut want, mut got) = (Vec::new(), Vec::new());
    state.fire(&job, Watermark::MAX, &mut want);
    restored.fire(&job, Watermark::MAX, &mut got);
    assert!(!want.is_empty());
    assert_eq!(sorted(want), sorted(got));
    let mut trailing = v1.clone();
    trailing.push(0);
    let err = KeyedFeatures::decode(&job, &trailing)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("bytes remaining"), "{err}");
    Ok(())
}
