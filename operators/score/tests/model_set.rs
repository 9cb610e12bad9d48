//! A [`ModelSet`]'s second version changed between batches (what hot reload does on the
//! inference thread): the canary share it publishes for the operator follows every change,
//! a batch queued before a share change is split by the share serving when it is scored (a
//! key always sees the version its bucket says now), and rows with buckets that reach a set
//! whose canary has stopped (or became a shadow) in the meantime are scored by the primary,
//! under the primary's tag.

mod common;

use std::sync::Arc;

use common::{fixture, job_features, opts};
use weir_operators::metrics::JobMetrics;
use weir_score::canary::{canary_bucket, key_bucket};
use weir_score::counters::ScoreCounters;
use weir_score::inference_batch::InferenceBatch;
use weir_score::model_set::ModelSet;
use weir_score::secondary::SecondaryRole;
use weir_score::ModelSession;

/// `n` rows of keys `k0`.., as the operator pushes them: with their keys' canary buckets
/// while a canary runs (`canary_runs`), without otherwise.
fn batch_of(n: usize, canary_runs: bool) -> InferenceBatch {
    let mut batch = InferenceBatch::default();
    for i in 0..n {
        let bucket = canary_runs.then(|| key_bucket(&format!("k{i}")));
        batch.push_row(&[i as f64, 25.0, f64::NAN], bucket);
    }
    batch
}

/// Ten rows of keys `k0`..`k9`.
fn batch(canary_runs: bool) -> InferenceBatch {
    batch_of(10, canary_runs)
}

fn session(case: &str) -> anyhow::Result<ModelSession> {
    Ok(ModelSession::load(
        &fixture(case),
        &job_features(),
        &opts(),
    )?)
}

#[test]
fn the_canary_share_follows_the_second_version_and_stale_flags_go_to_the_primary(
) -> anyhow::Result<()> {
    let counters = Arc::new(ScoreCounters::default());
    let metrics = Arc::new(JobMetrics::default());
    let mut models = ModelSet::new(session("logreg")?, None, metrics, counters.clone());
    let share = models.canary_share().clone();
    assert_eq!(share.get(), None);

    let canary = SecondaryRole::Canary { share: 0.5 };
    assert!(models
        .replace_secondary(Some((canary, session("linear_1d")?)))
        .is_none());
    assert_eq!(share.get(), Some(0.5));
    let mut flagged = batch(share.get().is_some());
    let expected: Vec<bool> = (0..10)
        .map(|i| canary_bucket(&format!("k{i}"), 0.5))
        .collect();
    let canary_rows = expected.iter().filter(|c| **c).count();
    assert!(canary_rows > 0 && canary_rows < 10, "{expected:?}");
    models.score(&mut flagged);
    assert_eq!(flagged.canary, expected);
    let verdict = flagged
        .scores
        .canary
        .as_ref()
        .map(|v| v.model.name.as_str());
    assert_eq!(verdict, Some("linear_1d"));
    assert_eq!(
        ScoreCounters::get(&counters.canary_rows),
        canary_rows as u64
    );

    // Ramped without a reload.
    assert_eq!(
        models.set_secondary_role(SecondaryRole::Canary { share: 1.0 }),
        Some(canary)
    );
    assert_eq!(share.get(), Some(1.0));

    // A shadow now: rows with buckets are scored by the primary, and the shadow
    // scores every row.
    models.set_secondary_role(SecondaryRole::Shadow);
    assert_eq!(share.get(), None);
    let mut stale = batch(true);
    models.score(&mut stale);
    assert!(stale.scores.canary.is_none() && stale.canary.is_empty());
    let primary = stale.scores.primary.as_ref().map(|v| v.model.name.as_str());
    assert_eq!(primary, Some("purchase_propensity"));
    assert_eq!(stale.scores.values.len(), 10);
    assert_eq!(stale.scores.shadow_values.len(), 10);

    // Stopped: rows with buckets are the primary's, and nothing counts as canary rows.
    let (role, old) = models
        .replace_secondary(None)
        .ok_or(anyhow::anyhow!("no second version to stop"))?;
    assert_eq!((role, old.name()), (SecondaryRole::Shadow, "linear_1d"));
    assert!(models.secondary().is_none());
    assert_eq!(share.get(), None);
    let mut stale = batch(true);
    models.score(&mut stale);
    assert!(stale.scores.canary.is_none() && stale.scores.shadow.is_none());
    assert!(stale.canary.is_empty());
    assert_eq!(stale.scores.values.len(), 10);
    assert_eq!(
        ScoreCounters::get(&counters.canary_rows),
        canary_rows as u64
    );
    // No second version left to give a role to.
    assert_eq!(models.set_secondary_role(canary), None);
    assert_eq!(share.get(), None);
    Ok(())
}

#[test]
fn a_batch_queued_before_the_share_drops_is_split_by_the_share_serving_when_scored(
) -> anyhow::Result<()> {
    let counters = Arc::new(ScoreCounters::default());
    let metrics = Arc::new(JobMetrics::default());
    let canary = SecondaryRole::Canary { share: 0.5 };
    let mut models = ModelSet::new(
        session("logreg")?,
        Some((canary, session("linear_1d")?)),
        metrics,
        counters.clone(),
    );
    // Filled while the canary serves 50 %, then the share drops to 5 % (`canary v5 5%`)
    // while the batch waits in the queue.
    let rows = 400;
    let keys: Vec<String> = (0..rows).map(|i| format!("k{i}")).collect();
    let mut queued = batch_of(rows, models.canary_share().get().is_some());
    assert_eq!(
        models.set_secondary_role(SecondaryRole::Canary { share: 0.05 }),
        Some(canary)
    );
    let at_5: Vec<bool> = keys.iter().map(|k| canary_bucket(k, 0.05)).collect();
    let in_5 = at_5.iter().filter(|c| **c).count();
    let in_50 = keys.iter().filter(|k| canary_bucket(k, 0.5)).count();
    // Keys that the old share put in the canary and the new one does not: the case at hand.
    assert!(
        in_5 > 0 && in_50 > in_5,
        "{in_5} of {rows} at 5 %, {in_50} at 50 %"
    );

    models.score(&mut queued);
    // Exactly the keys of the 5 % canary went to the canary, the rest to the primary.
    assert_eq!(queued.canary, at_5);
    let canary_verdict = queued.scores.canary.as_ref().map(|v| v.model.name.as_str());
    assert_eq!(canary_verdict, Some("linear_1d"));
    let primary = queued
        .scores
        .primary
        .as_ref()
        .map(|v| v.model.name.as_str());
    assert_eq!(primary, Some("purchase_propensity"));
    assert_eq!(ScoreCounters::get(&counters.canary_rows), in_5 as u64);
    assert_eq!(queued.scores.values.len(), rows);

    // Rows pushed before a canary started carry no bucket: the primary scores them all.
    let mut before = batch_of(rows, false);
    models.score(&mut before);
    assert!(before.canary.is_empty() && before.scores.canary.is_none());
    assert_eq!(ScoreCounters::get(&counters.canary_rows), in_5 as u64);
    Ok(())
}
