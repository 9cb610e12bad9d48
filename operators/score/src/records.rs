//! Score records: a batch's rows, completed with the scores that came back for them.
//!
//! Last step of the scoring stage, on the worker thread, before the sink. Each feature row is
//! moved once, as it arrives, into a not-yet-scored [`ScoredRow`] ([`unscored`]) of its batch;
//! when the batch's scores return, [`fill_scores`] completes every record in place with the
//! version that scored it (primary or canary) and its score, or with the error and no score
//! when that version failed, in which case the row also becomes an `inference_failed` dead
//! letter; a shadow version's score travels in [`ScoredRow::shadow`].

use std::sync::Arc;

use weir_features::dead_letter::{DeadLetter, DeadLetterReason};
use weir_features::encode::unscored_row_json;
use weir_features::row::{FeatureRow, ModelTag, ScoredRow, ShadowScore};
use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;

use crate::batch::{ScoreBatch, Verdict};

/// The score records of one batch, in input order, and the dead letters of failed rows.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// One record per input row, same order.
    pub scored: Vec<ScoredRow>,
    /// One dead letter per failed row.
    pub dead: Vec<DeadLetter>,
}

/// What a dead letter needs besides the row: the job's feature names and its source.
#[derive(Clone, Debug)]
pub struct RecordContext {
    /// The job's feature names, in row order (the dead letter names each value).
    pub job_features: Vec<String>,
    /// Source name, for dead letters.
    pub source_name: String,
    /// Counters (dead letters by reason).
    pub metrics: Arc<JobMetrics>,
}

impl RecordContext {
    /// The `inference_failed` dead letter of `row`.
    fn dead_letter(&self, row: &FeatureRow, model: &ModelTag, error: &str) -> DeadLetter {
        self.metrics.dead_letter(DeadLetterReason::InferenceFailed);
        DeadLetter {
            reason: DeadLetterReason::InferenceFailed,
            error: format!("model {} {}: {error}", model.name, model.version),
            topic: self.source_name.clone(),
            position: row.last,
            timestamp: Some(row.window_end),
            key: Some(row.key.as_bytes().to_vec()),
            raw: unscored_row_json(row, &self.job_features),
        }
    }
}

/// The record of a row whose batch has not been scored yet (no model, no score, no error).
pub fn unscored(row: FeatureRow) -> ScoredRow {
    ScoredRow {
        row,
        model: ModelTag {
            name: Default::default(),
            version: Default::default(),
        },
        score: None,
        error: None,
        inference_ts_ms: 0,
        shadow: None,
    }
}

/// Completes `scored` (the batch's [`unscored`] records, in the order their values went into
/// `batch`) with `batch`'s scores; appends a dead letter per failed row to `dead`.
pub fn fill_scores(
    scored: &mut [ScoredRow],
    batch: &ScoreBatch,
    context: &RecordContext,
    dead: &mut Vec<DeadLetter>,
) {
    let scores = &batch.scores;
    let Some(primary) = &scores.primary else {
        // Only a batch that never reached a model has no primary verdict.
        let tag = ModelTag {
            name: Default::default(),
            version: Default::default(),
        };
        return fail(
            scored,
            &tag,
            "no model version scored this batch",
            context,
            dead,
        );
    };
    if scores.canary.is_none() && scores.shadow.is_none() && primary.error.is_none() {
        // The common case: one version, no error.
        for (record, score) in scored.iter_mut().zip(&scores.values) {
            record.model.clone_from(&primary.model);
            record.score = Some(f64::from(*score));
            record.inference_ts_ms = primary.inference_ts_ms;
        }
        return;
    }
    for (i, record) in scored.iter_mut().enumerate() {
        let in_canary = batch.canary.get(i).copied().unwrap_or(false);
        let verdict: &Verdict = scores
            .canary
            .as_ref()
            .filter(|_| in_canary)
            .unwrap_or(primary);
        if let Some(error) = &verdict.error {
            dead.push(context.dead_letter(&record.row, &verdict.model, error));
        }
        record.model.clone_from(&verdict.model);
        record.score = (verdict.error.is_none())
            .then(|| scores.values.get(i).map(|s| f64::from(*s)))
            .flatten();
        record.error.clone_from(&verdict.error);
        record.inference_ts_ms = verdict.inference_ts_ms;
        record.shadow = scores.shadow.as_ref().map(|v| {
            Box::new(ShadowScore {
                model: v.model.clone(),
                score: (v.error.is_none())
                    .then(|| scores.shadow_values.get(i).map(|s| f64::from(*s)))
                    .flatten(),
                error: v.error.clone(),
            })
        });
    }
}

/// Error records and dead letters for rows that could not reach a model at all (the
/// instance's inference thread is gone).
pub fn unscorable(
    mut scored: Vec<ScoredRow>,
    tag: &ModelTag,
    error: &str,
    context: &RecordContext,
) -> BatchOutcome {
    let mut dead = Vec::new();
    fail(&mut scored, tag, error, context, &mut dead);
    BatchOutcome { scored, dead }
}

/// Marks every record of `scored` as failed with `error` and dead-letters its row.
fn fail(
    scored: &mut [ScoredRow],
    tag: &ModelTag,
    error: &str,
    context: &RecordContext,
    dead: &mut Vec<DeadLetter>,
) {
    let inference_ts_ms = unix_ms() as i64;
    JobMetrics::add(&context.metrics.inference_errors, scored.len() as u64);
    for record in scored {
        dead.push(context.dead_letter(&record.row, tag, error));
        record.model.clone_from(tag);
        record.score = None;
        record.error = Some(error.to_owned());
        record.inference_ts_ms = inference_ts_ms;
        record.shadow = None;
    }
}
