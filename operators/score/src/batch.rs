//! The micro-batch as it crosses to the inference thread and back (DESIGN.md §6).
//!
//! Inside the scoring stage, between the operator (`crate::batcher`, on the worker thread) and
//! the inference thread (`crate::pool`): the feature rows stay with the operator; only their
//! values travel, gathered as the rows arrive into one contiguous row-major `Vec<f64>` (plus a
//! canary flag per row when a canary version runs, or started or stopped while the batch
//! filled). The inference thread writes one `f32` score per row and one [`Verdict`] per model
//! version into the same [`ScoreBatch`] and sends it back; the operator hands the rows on with
//! their scores as scored batches (`crate::records`) and keeps the spent batch for a later
//! one, so a steady stream allocates no batch buffers.

pub use weir_features::scored::Verdict;

/// One micro-batch's inputs and, once scored, its scores.
#[derive(Debug, Default)]
pub struct ScoreBatch {
    /// Feature values, row-major (`rows` × features), in the job's feature order; NaN = missing.
    pub values: Vec<f64>,
    /// Rows in the batch.
    pub rows: usize,
    /// Per row, whether the canary version scores it: one flag per row, or empty when no row
    /// was pushed with a flag (no canary ran while the batch filled).
    pub canary: Vec<bool>,
    /// What the inference thread wrote.
    pub scores: BatchScores,
}

impl ScoreBatch {
    /// Appends one row's values and its canary flag (`None`: no canary runs). The flags stay
    /// one per row once any row has one, so they line up with the rows when a canary starts
    /// or stops (hot reload) while the batch fills: rows before the first flag, and rows
    /// after the last, are not in the canary.
    #[inline]
    pub fn push_row(&mut self, values: &[f64], canary: Option<bool>) {
        self.values.extend_from_slice(values);
        match canary {
            Some(flag) => {
                self.canary.resize(self.rows, false);
                self.canary.push(flag);
            }
            None if !self.canary.is_empty() => self.canary.push(false),
            None => {}
        }
        self.rows += 1;
    }

    /// Empties the batch for reuse; buffers keep their capacity.
    pub fn clear(&mut self) {
        self.values.clear();
        self.rows = 0;
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
    /// How the canary version did on the rows flagged for it.
    pub canary: Option<Verdict>,
    /// How the shadow version did; it scores every row into `shadow_values`.
    pub shadow: Option<Verdict>,
    /// The shadow version's score per row (empty without a shadow).
    pub shadow_values: Vec<f32>,
}

impl BatchScores {
    /// Empties the scores for reuse; buffers keep their capacity.
    pub fn clear(&mut self) {
        self.values.clear();
        self.primary = None;
        self.canary = None;
        self.shadow = None;
        self.shadow_values.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::ScoreBatch;

    #[test]
    fn canary_flags_line_up_with_rows_when_a_canary_starts_or_stops() {
        let mut batch = ScoreBatch::default();
        batch.push_row(&[1.0], None);
        assert!(batch.canary.is_empty(), "no canary, no flags");
        batch.push_row(&[2.0], None);
        batch.push_row(&[3.0], Some(true)); // a canary started
        batch.push_row(&[4.0], Some(false));
        batch.push_row(&[5.0], None); // and stopped
        assert_eq!(batch.rows, 5);
        assert_eq!(batch.canary, [false, false, true, false, false]);
        batch.clear();
        batch.push_row(&[1.0], Some(true));
        assert_eq!(batch.canary, [true]);
    }
}
