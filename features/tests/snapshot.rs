//! Window state snapshots (issue #4): encoding a job's keyed state, splitting it by key group
//! into any number of instances and merging it back must not change a single output row
//! compared with a run that never stopped — for every window kind and both triggers.

mod common;

use common::{event, user_ts_x_schema};
use std::collections::BTreeMap;

use anyhow::Result;
use rand::{Rng, SeedableRng};

use weir_features::feature::FeatureSpec;
use weir_features::keyed_features::{JobFeatures, KeyedFeatures};
use weir_features::record::Event;
use weir_features::row::FeatureRow;
use weir_features::schedule::Trigger;
use weir_features::vocab::{KeyGroup, Watermark};
use weir_features::window::WindowSpec;

const GROUPS: u32 = 16;

fn job(primary: WindowSpec, trigger: Trigger) -> Result<JobFeatures> {
    let schema = user_ts_x_schema()?;
    let specs: Vec<FeatureSpec> = toml::from_str::<BTreeMap<String, Vec<FeatureSpec>>>(
        r#"
        [[f]]
        name = "n"
        agg = "count"
        [[f]]
        name = "x_sum"
        agg = "sum"
        field = "x"
        [[f]]
        name = "x_last"
        agg = "last"
        field = "x"
        [[f]]
        name = "x_max_sess"
        agg = "max"
        field = "x"
        window = "sess"
        "#,
    )?
    .remove("f")
    .unwrap_or_default();
    let named = BTreeMap::from([(
        "sess".to_owned(),
        WindowSpec::Session {
            gap: 20_000,
            max_length: 120_000,
        },
    )]);
    Ok(JobFeatures::compile(&specs, &schema, &primary, &named)?.with_trigger(trigger)?)
}

fn events(seed: u64) -> Result<Vec<Event>> {
    let schema = user_ts_x_schema()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut clock = 0i64;
    Ok((0..3_000)
        .map(|i| {
            clock += rng.random_range(0..400);
            let ts = clock - rng.random_range(0..3) * 1_000;
            let key = format!("k{}", rng.random_range(0..40));
            event(&schema, &key, ts, f64::from(rng.random_range(0..100)), i)
        })
        .collect())
}

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
    let kinds = [
        WindowSpec::Tumbling { size: 60_000 },
        WindowSpec::Hopping {
            size: 90_000,
            slide: 30_000,
        },
        WindowSpec::Session {
            gap: 10_000,
            max_length: 60_000,
        },
    ];
    for primary in kinds {
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
