//! The micro-batch as it crosses to the inference thread and back (DESIGN.md §6).
//!
//! Inside the scoring stage, between the operator (`crate::batcher`, on the worker thread)
//! and the inference thread (`crate::inference_thread`): the feature rows stay with the
//! operator; only their values travel, gathered as the rows arrive into one contiguous
//! row-major `Vec<f64>` (plus
//! each row's canary bucket, its key's stable hash, when a canary version runs, or started or
//! stopped while the batch filled). The inference thread decides which rows the canary
//! scores, against the share serving when it takes the batch, and writes one `f32` score per
//! row, those per-row canary flags, one [`Verdict`] per model version and the rows a version
//! failed on alone ([`RowErrors`]) into the same
//! [`InferenceBatch`] and sends it back; the operator hands the rows on with
//! their scores as scored batches (`crate::records`) and keeps the spent batch for a later
//! one, so a steady stream allocates no batch buffers.

pub use weir_features::scored::{RowErrors, Verdict};

/// The canary bucket of a row pushed without one: above every cut, so in no canary.
pub const NO_BUCKET: u16 = u16::MAX;

/// One micro-batch as the inference thread sees it: the rows' values in and, once scored,
/// their scores out (the rows themselves stay with the operator, and leave it as
/// `weir_features::scored::ScoredBatch`es).
#[derive(Debug, Default)]
pub struct InferenceBatch {
    /// Feature values, row-major (`rows` × features), in the job's feature order; NaN = missing.
    pub values: Vec<f64>,
    /// Rows in the batch.
    pub rows: usize,
    /// Input: per row, its key's canary bucket (`crate::canary::key_bucket`), or
    /// [`NO_BUCKET`]; one per row, or empty when no row was pushed with one (no canary ran
    /// while the batch filled).
    pub canary_buckets: Vec<u16>,
    /// Output, written by the inference thread (`crate::model_set::ModelSet::score`): per row,
    /// whether the canary version scored it, decided from `canary_buckets` against the share
    /// serving when the batch was scored; empty when the canary scored no row.
    pub canary: Vec<bool>,
    /// What the inference thread wrote.
    pub scores: BatchScores,
}

impl InferenceBatch {
    /// Appends one row's values and its key's canary bucket (`None`: no canary runs, so no
    /// bucket was computed). The buckets stay one per row once any row has one, so they line
    /// up with the rows when a canary starts or stops (hot reload) while the batch fills:
    /// rows before the first bucket, and rows after the last, get [`NO_BUCKET`] and are in
    /// no canary.
    #[inline]
    pub fn push_row(&mut self, values: &[f64], bucket: Option<u16>) {
        self.values.extend_from_slice(values);
        match bucket {
            Some(bucket) => {
                self.canary_buckets.resize(self.rows, NO_BUCKET);
                self.canary_buckets.push(bucket);
            }
            None if !self.canary_buckets.is_empty() => self.canary_buckets.push(NO_BUCKET),
            None => {}
        }
        self.rows += 1;
    }

    /// Empties the batch for reuse; buffers keep their capacity.
    pub fn clear(&mut self) {
        self.values.clear();
        self.rows = 0;
        self.canary_buckets.clear();
        self.canary.clear();
        self.scores.clear();
    }
}

/// The scores of one batch.
#[derive(Debug, Default)]
pub struct BatchScores {
    /// One score per row in input order (meaningless for a row whose version failed).
    pub values: Vec<f32>,
    /// How the primary version did on its rows (all rows, or the rows outside the canary).
    pub primary: Option<Verdict>,
    /// How the canary version did on the rows it scored (`InferenceBatch::canary`).
    pub canary: Option<Verdict>,
    /// How the shadow version did; it scores every row into `shadow_values`.
    pub shadow: Option<Verdict>,
    /// The shadow version's score per row (empty without a shadow).
    pub shadow_values: Vec<f32>,
    /// Rows the version that scored them (primary or canary) failed on alone, by batch row:
    /// a run of their own failed, or their output was not a finite number (`crate::bisect`).
    pub row_errors: RowErrors,
    /// Rows the shadow version failed on alone, by batch row.
    pub shadow_row_errors: RowErrors,
}

impl BatchScores {
    /// Empties the scores for reuse; buffers keep their capacity.
    pub fn clear(&mut self) {
        self.values.clear();
        self.primary = None;
        self.canary = None;
        self.shadow = None;
        self.shadow_values.clear();
        self.row_errors.clear();
        self.shadow_row_errors.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::{InferenceBatch, NO_BUCKET};

    #[test]
    fn canary_buckets_line_up_with_rows_when_a_canary_starts_or_stops() {
        let mut batch = InferenceBatch::default();
        batch.push_row(&[1.0], None);
        assert!(batch.canary_buckets.is_empty(), "no canary, no buckets");
        batch.push_row(&[2.0], None);
        batch.push_row(&[3.0], Some(7)); // a canary started
        batch.push_row(&[4.0], Some(9_999));
        batch.push_row(&[5.0], None); // and stopped
        assert_eq!(batch.rows, 5);
        assert_eq!(
            batch.canary_buckets,
            [NO_BUCKET, NO_BUCKET, 7, 9_999, NO_BUCKET]
        );
        assert!(batch.canary.is_empty(), "flags are the inference thread's");
        batch.canary.extend([false, false, true, false, false]);
        batch.clear();
        assert!(batch.canary.is_empty());
        batch.push_row(&[1.0], Some(0));
        assert_eq!(batch.canary_buckets, [0]);
    }
}
