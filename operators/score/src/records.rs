//! Scored batches: a batch's rows, handed on with the scores that came back for them.
//!
//! Last step of the scoring stage, on the worker thread, before the sink. The rows of a batch
//! arrive in runs (each a container of the operator's input, moved whole into the batch and
//! never row by row); when the batch's scores return, [`scored_batches`] turns every run into
//! a [`ScoredBatch`]: the run's rows, its slice of the scores and the verdict of each version
//! (primary, canary with its per-row flags, shadow with its scores) and the rows a version
//! failed on alone. A row whose version failed, on the whole batch or on the row alone (its
//! own run failed, or its output was not a finite number), reads as an error and no score
//! ([`ScoredBatch::view`]) and also becomes an `inference_failed` dead letter with the error;
//! a shadow's failures only show in the record's `shadow` part.

use std::ops::Range;
use std::sync::Arc;

use weir_features::dead_letter::{DeadLetter, DeadLetterReason};
use weir_features::encode::unscored_row_json;
use weir_features::row::{FeatureRow, ModelTag};
use weir_features::scored::{RowErrors, ScoredBatch, Verdict};
use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;

use crate::inference_batch::InferenceBatch;

/// The scored batches of one micro-batch, in input order, and the dead letters of failed rows.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// One scored batch per run of input rows, same order.
    pub scored: Vec<ScoredBatch>,
    /// One dead letter per failed row.
    pub dead: Vec<DeadLetter>,
}

impl BatchOutcome {
    /// Number of scored rows.
    pub fn rows(&self) -> usize {
        self.scored.iter().map(ScoredBatch::len).sum()
    }
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

    /// Appends a dead letter for each row of `batch` without a score: its version failed.
    fn dead_letters(&self, batch: &ScoredBatch, dead: &mut Vec<DeadLetter>) {
        for view in batch.views() {
            if let Some(error) = view.error {
                dead.push(self.dead_letter(view.row, view.model, error));
            }
        }
    }
}

/// `column[range]` when the column has one value per row of the batch, else empty.
fn slice_of<T: Copy>(column: &[T], rows: usize, range: &Range<usize>) -> Vec<T> {
    if column.len() == rows {
        column[range.clone()].to_vec()
    } else {
        Vec::new()
    }
}

/// The scored batches of `runs` (the batch's rows, in the order their values went into
/// `batch`), with `batch`'s scores; the dead letters of rows whose version failed.
pub fn scored_batches(
    runs: Vec<Vec<FeatureRow>>,
    batch: &InferenceBatch,
    context: &RecordContext,
) -> BatchOutcome {
    let scores = &batch.scores;
    let Some(primary) = &scores.primary else {
        // Only a batch that never reached a model has no primary verdict.
        let tag = ModelTag {
            name: Default::default(),
            version: Default::default(),
        };
        return unscorable(runs, &tag, "no model version scored this batch", context);
    };
    let mut outcome = BatchOutcome {
        scored: Vec::with_capacity(runs.len()),
        dead: Vec::new(),
    };
    // A failed shadow version dead-letters nothing: it never gives a row its score.
    let failed = primary.error.is_some()
        || scores.canary.as_ref().is_some_and(|v| v.error.is_some())
        || !scores.row_errors.is_empty();
    let mut at = 0;
    for rows in runs {
        let range = at..at + rows.len();
        at = range.end;
        let scored = ScoredBatch {
            scores: slice_of(&scores.values, batch.rows, &range),
            primary: primary.clone(),
            canary: scores
                .canary
                .clone()
                .map(|v| (v, slice_of(&batch.canary, batch.rows, &range))),
            shadow: scores
                .shadow
                .clone()
                .map(|v| (v, slice_of(&scores.shadow_values, batch.rows, &range))),
            row_errors: scores.row_errors.slice(range.clone()),
            shadow_row_errors: scores.shadow_row_errors.slice(range),
            rows,
        };
        if failed {
            context.dead_letters(&scored, &mut outcome.dead);
        }
        outcome.scored.push(scored);
    }
    outcome
}

/// Error records and dead letters for rows that could not reach a model at all (the
/// instance's inference thread is gone, or no version scored the batch).
pub fn unscorable(
    runs: Vec<Vec<FeatureRow>>,
    tag: &ModelTag,
    error: &str,
    context: &RecordContext,
) -> BatchOutcome {
    let verdict = Verdict {
        model: tag.clone(),
        error: Some(error.to_owned()),
        inference_ts_ms: unix_ms() as i64,
    };
    let mut outcome = BatchOutcome::default();
    for rows in runs {
        let scored = ScoredBatch {
            rows,
            scores: Vec::new(),
            primary: verdict.clone(),
            canary: None,
            shadow: None,
            row_errors: RowErrors::default(),
            shadow_row_errors: RowErrors::default(),
        };
        context.metrics.inference_failed(tag, scored.len() as u64);
        context.dead_letters(&scored, &mut outcome.dead);
        outcome.scored.push(scored);
    }
    outcome
}
