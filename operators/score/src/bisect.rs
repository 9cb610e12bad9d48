//! Split and retry: a failed session run is run again in halves, so that only the rows that
//! fail on their own get errors (DESIGN.md §6, "a failed inference").
//!
//! Inside the scoring stage, on the inference thread, between the model set
//! (`crate::model_set`) and a session (`crate::session`): [`score_rows`] scores one version's
//! rows of a batch. When the run fails, each half is run, and each half that fails is halved
//! again, down to single rows: rows that succeed in a smaller run get their scores, a row
//! that fails alone gets the error of its own run. Rows whose output is not a finite number
//! get errors too (named by the session in `BatchStats::non_finite`) without any retry.
//!
//! The work is bounded. A failed run of `m > 1` rows costs the two runs of its halves, and a
//! row lies in at most `⌈log2 n⌉` runs above its own; so a batch of `n` rows of which `f` fail
//! alone takes at most `1 + 2·f·⌈log2 n⌉` runs when a run fails only if it holds such a row
//! (ONNX Runtime's errors on a bad value are of this kind), and never more than `2n − 1` (every
//! row alone, as when the model fails on every input). `⌈log2 n⌉` runs per failing row cannot
//! be had: of a failed run of two rows, one run must score the good row and another show that
//! the bad one fails alone. A run that fails because the values are not whole rows
//! (`ScoreError::Batch`) is not retried: no half of it would be whole either.
//!
//! Pure: the run is injected (a session's `score_batch`, or a test's stand-in).

use weir_features::scored::RowErrors;

use crate::error::{Result, ScoreError};
use crate::session::BatchStats;

/// What [`score_rows`] did with the rows of one version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowsScored {
    /// Rows that got a score.
    pub scored: usize,
    /// Rows that got an error instead (a run of their own failed, or their output was not a
    /// finite number).
    pub failed: usize,
    /// Missing values replaced by defaults, over the runs whose scores were kept.
    pub defaults_used: usize,
    /// Session runs made: 1 when the first run succeeded.
    pub runs: usize,
}

/// Scores `rows` rows of `values` (row-major) with `run`, splitting failed runs in halves.
///
/// `out` gets one score per row (NaN for a row that failed in its run); `errors` gets the
/// rows (indexed from 0, like `values`) that failed alone or whose output is not a finite
/// number, with why. `scratch` is reused across calls for the scores of the smaller runs.
/// An error comes back only when the rows could not be run at all (values not whole rows);
/// `out` is then empty.
pub fn score_rows<R>(
    mut run: R,
    values: &[f64],
    rows: usize,
    out: &mut Vec<f32>,
    errors: &mut RowErrors,
    scratch: &mut Vec<f32>,
) -> Result<RowsScored>
where
    R: FnMut(&[f64], usize, &mut Vec<f32>) -> Result<BatchStats>,
{
    let before = errors.len();
    let mut done = RowsScored {
        runs: 1,
        ..RowsScored::default()
    };
    match run(values, rows, out) {
        Ok(stats) => done.keep(stats, 0, errors),
        Err(error @ ScoreError::Batch(_)) => return Err(error),
        Err(error) if rows == 0 => return Err(error),
        Err(error) if rows == 1 => {
            out.clear();
            out.push(f32::NAN);
            errors.insert(0, error.to_string());
        }
        Err(_) => {
            out.clear();
            out.resize(rows, f32::NAN);
            let mut halves = Halves {
                run,
                values,
                width: values.len() / rows,
                out,
                errors,
                scratch,
                done: &mut done,
            };
            halves.split(0, rows);
        }
    }
    done.failed = errors.len() - before;
    done.scored = rows - done.failed;
    Ok(done)
}

impl RowsScored {
    /// Takes the stats of a successful run of the rows from `first` on: their defaults, and the
    /// rows whose output is not a finite number.
    fn keep(&mut self, stats: BatchStats, first: usize, errors: &mut RowErrors) {
        self.defaults_used += stats.defaults_used;
        for (row, error) in stats.non_finite.iter() {
            errors.insert(first + row, error.to_owned());
        }
    }
}

/// The state of one split-and-retry: the rows' values, where their scores and errors go.
struct Halves<'a, R> {
    run: R,
    values: &'a [f64],
    width: usize,
    out: &'a mut [f32],
    errors: &'a mut RowErrors,
    scratch: &'a mut Vec<f32>,
    done: &'a mut RowsScored,
}

impl<R> Halves<'_, R>
where
    R: FnMut(&[f64], usize, &mut Vec<f32>) -> Result<BatchStats>,
{
    /// The rows `lo..hi` failed together: runs each half, and splits a half that fails.
    fn split(&mut self, lo: usize, hi: usize) {
        let mid = lo + (hi - lo) / 2;
        for (lo, hi) in [(lo, mid), (mid, hi)] {
            self.done.runs += 1;
            let values = &self.values[lo * self.width..hi * self.width];
            match (self.run)(values, hi - lo, self.scratch) {
                Ok(stats) => {
                    for (slot, score) in self.out[lo..hi].iter_mut().zip(self.scratch.iter()) {
                        *slot = *score;
                    }
                    self.done.keep(stats, lo, self.errors);
                }
                Err(error) if hi - lo == 1 => self.errors.insert(lo, error.to_string()),
                Err(_) => self.split(lo, hi),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in model over one-value rows: a run fails when it holds a negative value (a
    /// row that fails alone) or more rows than `max_rows`; a value of 0 scores as -inf.
    fn model(max_rows: usize) -> impl FnMut(&[f64], usize, &mut Vec<f32>) -> Result<BatchStats> {
        move |values, rows, out| {
            out.clear();
            if values.len() != rows {
                return Err(ScoreError::Batch(format!("{} values", values.len())));
            }
            if let Some(bad) = values.iter().find(|v| **v < 0.0) {
                return Err(ScoreError::Output(format!("negative value {bad}")));
            }
            if rows > max_rows {
                return Err(ScoreError::Output(format!("{rows} rows is too many")));
            }
            let mut non_finite = RowErrors::default();
            for (row, v) in values.iter().enumerate() {
                let score = (*v as f32).ln();
                if !score.is_finite() {
                    non_finite.insert(row, format!("score {score}"));
                }
                out.push(score);
            }
            Ok(BatchStats {
                rows,
                defaults_used: rows,
                non_finite,
            })
        }
    }

    fn score(values: &[f64], max_rows: usize) -> (Vec<f32>, RowErrors, RowsScored) {
        let (mut out, mut errors, mut scratch) = (Vec::new(), RowErrors::default(), Vec::new());
        let done = score_rows(
            model(max_rows),
            values,
            values.len(),
            &mut out,
            &mut errors,
            &mut scratch,
        )
        .expect("whole rows");
        (out, errors, done)
    }

    #[test]
    fn every_set_of_failing_rows_gets_errors_alone_within_the_bound() {
        const N: usize = 8; // ⌈log2 N⌉ = 3
        for mask in 0u32..(1 << N) {
            let values: Vec<f64> = (0..N)
                .map(|i| {
                    if mask & (1 << i) != 0 {
                        -1.0
                    } else {
                        i as f64 + 1.0
                    }
                })
                .collect();
            let (out, errors, done) = score(&values, N);
            let failing = mask.count_ones() as usize;
            let failed: Vec<usize> = errors.iter().map(|(row, _)| row).collect();
            let expected: Vec<usize> = (0..N).filter(|i| mask & (1 << i) != 0).collect();
            assert_eq!(failed, expected, "mask {mask:08b}");
            for (row, error) in errors.iter() {
                assert_eq!(
                    error, "unexpected model output: negative value -1",
                    "row {row}"
                );
            }
            for row in (0..N).filter(|i| mask & (1 << i) == 0) {
                assert_eq!(
                    out[row],
                    (row as f32 + 1.0).ln(),
                    "mask {mask:08b} row {row}"
                );
            }
            assert!(
                done.runs <= 1 + 2 * failing * 3,
                "mask {mask:08b}: {done:?}"
            );
            assert!(done.runs < 2 * N, "mask {mask:08b}: {done:?}");
            assert_eq!((done.scored, done.failed), (N - failing, failing));
            assert_eq!(
                done.defaults_used,
                N - failing,
                "defaults of kept runs only"
            );
        }
    }

    #[test]
    fn one_failing_row_costs_two_runs_per_halving() {
        let mut values: Vec<f64> = (1..=256).map(f64::from).collect();
        values[77] = -5.0;
        let (_, errors, done) = score(&values, 256);
        assert_eq!(errors.iter().map(|(r, _)| r).collect::<Vec<_>>(), [77]);
        assert_eq!(done.runs, 1 + 2 * 8, "{done:?}");
        let (_, errors, done) = score(&values[..1], 256);
        assert!(errors.is_empty());
        assert_eq!(done.runs, 1);
    }

    #[test]
    fn rows_that_fail_only_together_are_all_scored_in_smaller_runs() {
        let values: Vec<f64> = (1..=16).map(f64::from).collect();
        let (out, errors, done) = score(&values, 4);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(out.iter().all(|s| s.is_finite()));
        // 16 fails, both 8s fail, the four 4s succeed.
        assert_eq!(done.runs, 1 + 2 + 4);
        assert_eq!(done.scored, 16);
    }

    #[test]
    fn non_finite_outputs_are_row_errors_without_a_retry() {
        let (out, errors, done) = score(&[2.0, 0.0, 3.0], 8);
        assert_eq!(done.runs, 1);
        assert_eq!(errors.iter().collect::<Vec<_>>(), [(1, "score -inf")]);
        assert_eq!((done.scored, done.failed), (2, 1));
        assert_eq!(out.len(), 3);
        // Inside a split too, at the row's place in the whole batch.
        let (_, errors, done) = score(&[2.0, 0.0, -1.0, 3.0], 8);
        let rows: Vec<(usize, &str)> = errors.iter().collect();
        assert_eq!(rows[0], (1, "score -inf"));
        assert_eq!(rows[1].0, 2);
        assert_eq!((done.scored, done.failed), (2, 2));
    }

    #[test]
    fn values_that_are_not_whole_rows_are_one_error_without_a_retry() {
        let (mut out, mut errors, mut scratch) = (Vec::new(), RowErrors::default(), Vec::new());
        let mut runs = 0;
        let mut inner = model(8);
        let counted = |v: &[f64], n: usize, o: &mut Vec<f32>| {
            runs += 1;
            inner(v, n, o)
        };
        let result = score_rows(counted, &[1.0; 5], 4, &mut out, &mut errors, &mut scratch);
        assert!(matches!(result, Err(ScoreError::Batch(_))), "{result:?}");
        assert_eq!(runs, 1);
        assert!(errors.is_empty() && out.is_empty());
    }
}
