//! A batch whose inference panicked (DESIGN.md §6, "the job never stops for it"): the inference
//! thread contains the panic and fails the batch like an inference error — every row becomes
//! a score record with the error and a null score, a dead letter, and an inference error in
//! the metrics — under the primary version's tag.

mod common;
mod support;

use std::sync::Arc;

use common::{fixture, job_features, opts};
use support::row;
use weir_features::dead_letter::DeadLetterReason;
use weir_operators::metrics::JobMetrics;
use weir_score::counters::ScoreCounters;
use weir_score::inference_batch::InferenceBatch;
use weir_score::model_set::ModelSet;
use weir_score::records::{scored_batches, RecordContext};
use weir_score::{ModelSession, ScoreError};

#[test]
fn a_panicked_batch_becomes_error_records_and_dead_letters() -> anyhow::Result<()> {
    let session = ModelSession::load(&fixture("logreg"), &job_features(), &opts())?;
    let metrics = Arc::new(JobMetrics::default());
    let models = ModelSet::new(
        session,
        None,
        metrics.clone(),
        Arc::new(ScoreCounters::default()),
    );
    let rows: Vec<_> = (0..3).map(|i| row(&format!("k{i}"), 1, i)).collect();
    let mut batch = InferenceBatch::default();
    for r in &rows {
        batch.push_row(&r.values, None);
    }
    models.fail_batch(
        &mut batch,
        ScoreError::Panicked("index out of bounds".into()),
    );

    let context = RecordContext {
        job_features: job_features(),
        source_name: "clicks".into(),
        metrics: metrics.clone(),
    };
    let outcome = scored_batches(vec![rows], &batch, &context);
    let dead = &outcome.dead;

    assert_eq!(outcome.rows(), 3);
    assert_eq!(dead.len(), 3);
    assert!(dead
        .iter()
        .all(|d| d.reason == DeadLetterReason::InferenceFailed));
    for record in outcome.scored.iter().flat_map(|b| b.views()) {
        assert_eq!(record.score, None);
        assert_eq!(record.model.version.as_str(), "2026-11-30.1");
        let error = record.error.unwrap_or_default();
        assert!(
            error.contains("inference panicked: index out of bounds"),
            "{error}"
        );
    }
    assert_eq!(JobMetrics::get(&metrics.inference_errors), 3);
    Ok(())
}
