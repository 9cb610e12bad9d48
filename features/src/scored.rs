//! Scored batches: what the scoring stage emits and the score sinks encode (DESIGN.md §6).
//!
//! Between the score operator and the sinks. One [`ScoredBatch`] carries a run of feature
//! rows as columns: the rows themselves (moved in whole from the operator's input, never one
//! by one), one score per row, which rows the canary version scored, and one [`Verdict`] per
//! model version, instead of one record per row, plus the few rows a version failed on alone
//! ([`RowErrors`]: the rest of their batch was scored). A sink reads each row's score record as a
//! [`ScoreView`] ([`ScoredBatch::views`]) and encodes it straight from the batch; the owned
//! record [`ScoredRow`] is for tests and tools ([`ScoreView::to_record`]).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::row::{FeatureRow, ModelTag, ScoredRow, ShadowScore};

/// What one model version did with its share of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The version that scored (or failed to score) the rows.
    pub model: ModelTag,
    /// Why inference failed, when it did (then none of its rows has a score).
    pub error: Option<String>,
    /// Wall-clock time of the inference, Unix milliseconds.
    pub inference_ts_ms: i64,
}

/// The rows of a batch that their version failed to score on their own (an inference error on
/// that row alone, or an output that is not a finite number), each with its error; the other
/// rows of the batch have scores. Sparse and sorted by row index: empty, and allocation-free,
/// when every row scored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RowErrors(Vec<(u32, String)>);

impl RowErrors {
    /// Records that row `row` failed with `error` (a row already recorded keeps its first error).
    pub fn insert(&mut self, row: usize, error: String) {
        let row = row as u32;
        let at = self.0.partition_point(|(r, _)| *r < row);
        if self.0.get(at).map(|(r, _)| *r) != Some(row) {
            self.0.insert(at, (row, error));
        }
    }

    /// Row `row`'s error, when it failed.
    pub fn get(&self, row: usize) -> Option<&str> {
        let row = u32::try_from(row).ok()?;
        let at = self.0.binary_search_by_key(&row, |(r, _)| *r).ok()?;
        Some(self.0[at].1.as_str())
    }

    /// Number of failed rows.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no row failed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The failed rows and their errors, by increasing row index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &str)> {
        self.0.iter().map(|(r, e)| (*r as usize, e.as_str()))
    }

    /// The errors of rows `rows`, re-indexed so that `rows.start` is row 0.
    pub fn slice(&self, rows: Range<usize>) -> RowErrors {
        let inside = self
            .iter()
            .filter(|(r, _)| rows.contains(r))
            .map(|(r, e)| ((r - rows.start) as u32, e.to_owned()));
        RowErrors(inside.collect())
    }

    /// Forgets every error; keeps the buffer.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// Rows of one tick, scored: columns of one micro-batch (or of a run of its rows).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoredBatch {
    /// The scored windows, in input order.
    pub rows: Vec<FeatureRow>,
    /// One score per row (meaningless for a row whose version failed; empty when all failed).
    pub scores: Vec<f32>,
    /// The primary version: it scored every row outside the canary.
    pub primary: Verdict,
    /// The canary version, when one ran, and per row whether it scored that row.
    pub canary: Option<(Verdict, Vec<bool>)>,
    /// The shadow version, when one ran, and its score of every row.
    pub shadow: Option<(Verdict, Vec<f32>)>,
    /// Rows the version that scored them (primary or canary, [`Self::verdict`]) failed on alone.
    pub row_errors: RowErrors,
    /// Rows the shadow version failed on alone (their primary scores are unaffected).
    pub shadow_row_errors: RowErrors,
}

/// What a view reports for a score that is not a finite number but came without an error (the
/// scoring stage turns such outputs into row errors; this keeps a record from ever carrying one).
const NOT_A_NUMBER: &str = "the model's score is not a finite number";

/// One row's score record, read from its batch.
#[derive(Clone, Copy, Debug)]
pub struct ScoreView<'a> {
    /// The scored window.
    pub row: &'a FeatureRow,
    /// The model that scored it.
    pub model: &'a ModelTag,
    /// The score; `None` when inference failed.
    pub score: Option<f64>,
    /// Why inference failed, when it did.
    pub error: Option<&'a str>,
    /// Wall-clock time of inference, Unix milliseconds.
    pub inference_ts_ms: i64,
    /// The shadow version's score of the same row, when a shadow version runs.
    pub shadow: Option<ShadowView<'a>>,
}

/// A shadow version's score of one row, read from its batch.
#[derive(Clone, Copy, Debug)]
pub struct ShadowView<'a> {
    /// The shadow model.
    pub model: &'a ModelTag,
    /// Its score; `None` when its inference failed.
    pub score: Option<f64>,
    /// Why its inference failed, when it did.
    pub error: Option<&'a str>,
}

/// Row `i`'s score and error under a version's verdict and its row errors: a score only when
/// the version did not fail on the row and its output is a finite number.
fn score_of<'a>(
    verdict: &'a Verdict,
    row_errors: &'a RowErrors,
    scores: &[f32],
    i: usize,
) -> (Option<f64>, Option<&'a str>) {
    if let Some(error) = verdict.error.as_deref().or_else(|| row_errors.get(i)) {
        return (None, Some(error));
    }
    match scores.get(i) {
        Some(score) if score.is_finite() => (Some(f64::from(*score)), None),
        Some(_) => (None, Some(NOT_A_NUMBER)),
        None => (None, None),
    }
}

impl ScoredBatch {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The version that scored row `i`: the canary for the rows flagged for it, else the primary.
    pub fn verdict(&self, i: usize) -> &Verdict {
        match &self.canary {
            Some((canary, flags)) if flags.get(i).copied().unwrap_or(false) => canary,
            _ => &self.primary,
        }
    }

    /// Row `i`'s score record.
    pub fn view(&self, i: usize) -> Option<ScoreView<'_>> {
        let row = self.rows.get(i)?;
        let verdict = self.verdict(i);
        let (score, error) = score_of(verdict, &self.row_errors, &self.scores, i);
        Some(ScoreView {
            row,
            model: &verdict.model,
            score,
            error,
            inference_ts_ms: verdict.inference_ts_ms,
            shadow: self.shadow.as_ref().map(|(shadow, scores)| {
                let (score, error) = score_of(shadow, &self.shadow_row_errors, scores, i);
                ShadowView {
                    model: &shadow.model,
                    score,
                    error,
                }
            }),
        })
    }

    /// Every row's score record, in order.
    pub fn views(&self) -> impl Iterator<Item = ScoreView<'_>> {
        (0..self.rows.len()).filter_map(|i| self.view(i))
    }

    /// Splits the batch by `part(row)`, keeping the order of rows within each part. A batch
    /// whose rows all fall in one part comes back whole, without moving a row.
    pub fn split_by(self, part: impl Fn(&FeatureRow) -> usize) -> Vec<(usize, ScoredBatch)> {
        let Some(first) = self.rows.first().map(&part) else {
            return Vec::new();
        };
        if self.rows.iter().all(|row| part(row) == first) {
            return vec![(first, self)];
        }
        let mut parts: Vec<(usize, ScoredBatch)> = Vec::new();
        let ScoredBatch {
            rows,
            scores,
            primary,
            canary,
            shadow,
            row_errors,
            shadow_row_errors,
        } = self;
        for (i, row) in rows.into_iter().enumerate() {
            let p = part(&row);
            let at = match parts.iter().position(|(q, _)| *q == p) {
                Some(at) => at,
                None => {
                    parts.push((
                        p,
                        ScoredBatch {
                            rows: Vec::new(),
                            scores: Vec::new(),
                            primary: primary.clone(),
                            canary: canary.as_ref().map(|(v, _)| (v.clone(), Vec::new())),
                            shadow: shadow.as_ref().map(|(v, _)| (v.clone(), Vec::new())),
                            row_errors: RowErrors::default(),
                            shadow_row_errors: RowErrors::default(),
                        },
                    ));
                    parts.len() - 1
                }
            };
            let batch = &mut parts[at].1;
            let at_row = batch.rows.len();
            if let Some(error) = row_errors.get(i) {
                batch.row_errors.insert(at_row, error.to_owned());
            }
            if let Some(error) = shadow_row_errors.get(i) {
                batch.shadow_row_errors.insert(at_row, error.to_owned());
            }
            batch.rows.push(row);
            batch.scores.extend(scores.get(i));
            if let (Some((_, to)), Some((_, from))) = (&mut batch.canary, &canary) {
                to.extend(from.get(i));
            }
            if let (Some((_, to)), Some((_, from))) = (&mut batch.shadow, &shadow) {
                to.extend(from.get(i));
            }
        }
        parts
    }
}

impl ScoreView<'_> {
    /// The owned score record (clones the row).
    pub fn to_record(&self) -> ScoredRow {
        ScoredRow {
            row: self.row.clone(),
            model: self.model.clone(),
            score: self.score,
            error: self.error.map(str::to_owned),
            inference_ts_ms: self.inference_ts_ms,
            shadow: self.shadow.map(|s| {
                Box::new(ShadowScore {
                    model: s.model.clone(),
                    score: s.score,
                    error: s.error.map(str::to_owned),
                })
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{Key, KeyGroup, SourcePosition};

    fn row(key_group: u32, window_end: i64) -> FeatureRow {
        FeatureRow {
            key: Key::from("k"),
            key_group: KeyGroup(key_group),
            window_start: 0,
            window_end,
            revision: 0,
            values: smallvec::smallvec![1.0],
            records: 1,
            first: SourcePosition {
                partition: 0,
                offset: 0,
            },
            last: SourcePosition {
                partition: 0,
                offset: 0,
            },
            fired_at_ns: 0,
            closed_by_timeout: false,
            ingested_at_ms: 0,
        }
    }

    fn verdict(version: &str, error: Option<&str>) -> Verdict {
        Verdict {
            model: ModelTag {
                name: "m".into(),
                version: version.into(),
            },
            error: error.map(str::to_owned),
            inference_ts_ms: 7,
        }
    }

    /// Rows 0..4 in key groups 0, 1, 0, 1; the canary takes rows 1 and 2 and failed on row 2
    /// alone; a failed shadow.
    fn batch() -> ScoredBatch {
        let mut row_errors = RowErrors::default();
        row_errors.insert(2, "row 2 alone".to_owned());
        ScoredBatch {
            rows: (0..4).map(|i| row(i % 2, i64::from(i))).collect(),
            scores: vec![0.5, 1.5, 2.5, 3.5],
            primary: verdict("v1", None),
            canary: Some((verdict("v2", None), vec![false, true, true, false])),
            shadow: Some((verdict("v3", Some("boom")), vec![9.0; 4])),
            row_errors,
            shadow_row_errors: RowErrors::default(),
        }
    }

    #[test]
    fn views_read_each_rows_version_score_and_shadow() {
        let batch = batch();
        let views: Vec<_> = batch.views().collect();
        assert_eq!(views.len(), 4);
        let versions: Vec<&str> = views.iter().map(|v| v.model.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v2", "v2", "v1"]);
        let scores: Vec<_> = views.iter().map(|v| v.score).collect();
        assert_eq!(scores, [Some(0.5), Some(1.5), None, Some(3.5)]);
        let errors: Vec<_> = views.iter().map(|v| v.error).collect();
        assert_eq!(errors, [None, None, Some("row 2 alone"), None]);
        for view in &views {
            let shadow = view.shadow.expect("a shadow ran");
            assert_eq!((shadow.score, shadow.error), (None, Some("boom")));
        }
        let failed = ScoredBatch {
            scores: Vec::new(),
            primary: verdict("v1", Some("bad input")),
            canary: None,
            shadow: None,
            row_errors: RowErrors::default(),
            ..batch.clone()
        };
        let record = failed.view(3).expect("row 3").to_record();
        assert_eq!(record.score, None);
        assert_eq!(record.error.as_deref(), Some("bad input"));
        assert_eq!(record.row, batch.rows[3]);
        assert!(failed.view(4).is_none());
    }

    #[test]
    fn split_keeps_each_rows_columns_and_order() {
        let whole = batch();
        let expected: Vec<ScoredRow> = whole.views().map(|v| v.to_record()).collect();
        let parts = whole.clone().split_by(|r| r.key_group.0 as usize);
        assert_eq!(parts.len(), 2);
        let mut records: Vec<ScoredRow> = parts
            .iter()
            .flat_map(|(part, b)| {
                assert!(b.rows.iter().all(|r| r.key_group.0 as usize == *part));
                b.views().map(|v| v.to_record())
            })
            .collect();
        records.sort_by_key(|r| r.row.window_end);
        assert_eq!(records, expected);
        // One part: the batch comes back whole.
        assert_eq!(whole.clone().split_by(|_| 3), vec![(3, whole)]);
    }

    #[test]
    fn shadow_row_errors_and_unflagged_non_finite_scores_read_as_errors() {
        let mut shadow_row_errors = RowErrors::default();
        shadow_row_errors.insert(1, "shadow row 1".to_owned());
        let batch = ScoredBatch {
            scores: vec![0.5, f32::INFINITY, 2.5, 3.5],
            canary: None,
            shadow: Some((verdict("v3", None), vec![9.0, f32::NAN, 9.5, f32::NAN])),
            row_errors: RowErrors::default(),
            shadow_row_errors,
            ..batch()
        };
        let view = batch.view(1).expect("row 1");
        assert_eq!((view.score, view.error), (None, Some(NOT_A_NUMBER)));
        let shadow = view.shadow.expect("a shadow ran");
        assert_eq!((shadow.score, shadow.error), (None, Some("shadow row 1")));
        let shadow = batch
            .view(3)
            .and_then(|v| v.shadow)
            .expect("row 3's shadow");
        assert_eq!((shadow.score, shadow.error), (None, Some(NOT_A_NUMBER)));
        let view = batch.view(2).expect("row 2");
        assert_eq!((view.score, view.error), (Some(2.5), None));
        assert_eq!(view.shadow.map(|s| s.score), Some(Some(9.5)));
    }

    #[test]
    fn row_errors_stay_sorted_keep_the_first_error_and_slice_re_indexed() {
        let mut errors = RowErrors::default();
        errors.insert(7, "seven".to_owned());
        errors.insert(2, "two".to_owned());
        errors.insert(5, "five".to_owned());
        errors.insert(2, "two again".to_owned());
        let rows: Vec<(usize, &str)> = errors.iter().collect();
        assert_eq!(rows, [(2, "two"), (5, "five"), (7, "seven")]);
        assert_eq!((errors.get(5), errors.get(6)), (Some("five"), None));
        let slice = errors.slice(4..8);
        let rows: Vec<(usize, &str)> = slice.iter().collect();
        assert_eq!(rows, [(1, "five"), (3, "seven")]);
        assert!(errors.slice(0..2).is_empty());
        errors.clear();
        assert!(errors.is_empty());
    }
}
