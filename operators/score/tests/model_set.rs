//! A [`ModelSet`]'s second version changed between batches (what hot reload does on the
//! inference thread): the canary share it publishes for the operator follows every change,
//! and rows flagged for a canary that has stopped (or became a shadow) in the meantime are
//! scored by the primary, under the primary's tag.

mod common;

use std::sync::Arc;

use common::{fixture, job_features, opts};
use weir_operators::metrics::JobMetrics;
use weir_score::batch::ScoreBatch;
use weir_score::models::{canary_bucket, ModelSet, ScoreCounters, SecondaryRole};
use weir_score::ModelSession;

/// Ten rows of keys `k0`..`k9`, flagged for a canary of `share` (`None`: not flagged).
fn batch(share: Option<f64>) -> ScoreBatch {
    let mut batch = ScoreBatch::default();
    for i in 0..10 {
        let flag = share.map(|s| canary_bucket(&format!("k{i}"), s));
        batch.push_row(&[i as f64, 25.0, f64::NAN], flag);
    }
    batch
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
    let mut flagged = batch(share.get());
    let canary_rows = flagged.canary.iter().filter(|c| **c).count();
    assert!(canary_rows > 0 && canary_rows < 10, "{:?}", flagged.canary);
    models.score(&mut flagged);
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

    // A shadow now: rows flagged for the canary are scored by the primary, and the shadow
    // scores every row.
    models.set_secondary_role(SecondaryRole::Shadow);
    assert_eq!(share.get(), None);
    let mut stale = batch(Some(1.0));
    models.score(&mut stale);
    assert!(stale.scores.canary.is_none());
    let primary = stale.scores.primary.as_ref().map(|v| v.model.name.as_str());
    assert_eq!(primary, Some("purchase_propensity"));
    assert_eq!(stale.scores.values.len(), 10);
    assert_eq!(stale.scores.shadow_values.len(), 10);

    // Stopped: flagged rows are the primary's, and nothing counts as canary rows.
    let (role, old) = models
        .replace_secondary(None)
        .ok_or(anyhow::anyhow!("no second version to stop"))?;
    assert_eq!((role, old.name()), (SecondaryRole::Shadow, "linear_1d"));
    assert!(models.secondary().is_none());
    assert_eq!(share.get(), None);
    let mut stale = batch(Some(0.5));
    models.score(&mut stale);
    assert!(stale.scores.canary.is_none() && stale.scores.shadow.is_none());
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
