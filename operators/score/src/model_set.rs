//! The model versions one score instance serves, and how a batch is split between them.
//!
//! Inside the scoring stage, between the inference thread (`crate::inference_thread`) and the
//! sessions: a [`ModelSet`] holds the primary [`ModelSession`] and optionally a second version
//! as a **shadow** (scores every row too; its scores travel in
//! [`ScoredBatch::shadow`](weir_features::scored::ScoredBatch::shadow)) or a **canary** (scores
//! the rows whose key falls in its share, by [`canary_bucket`](crate::canary::canary_bucket), a
//! stable xxh3 hash of the key, so a key always sees the same version). Hot reload
//! (`crate::reload`) swaps either version, or the second version's role and share, between two
//! batches; the set publishes whether a canary runs ([`CanaryShare`]) for the operator, which
//! then gives each row its key's bucket ([`key_bucket`](crate::canary::key_bucket)) as it
//! gathers the batch. The split itself is decided here, when the batch is scored, against the
//! share serving at that moment ([`canary_cut`]), so rows queued before a share change follow
//! the new share; a row without a bucket (pushed before the canary started) is scored by the
//! primary, and so is every row once the canary stopped.
//!
//! Runs on the inference thread, on a [`InferenceBatch`]'s contiguous values: every version that
//! scores part of the batch leaves a [`Verdict`] naming itself (and its error when it could not
//! run at all), and the rows it failed on alone in `row_errors` / `shadow_row_errors`: a failed
//! run is split and retried (`crate::bisect`), and a row whose output is not a finite number is
//! an error of that row, for every version. From these the operator builds the scored batches
//! and dead letters (`crate::records`).

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_features::row::ModelTag;
use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;

use crate::bisect::{score_rows, RowsScored};
use crate::canary::{canary_cut, CanaryShare};
use crate::counters::ScoreCounters;
use crate::error::{Result, ScoreError};
use crate::inference_batch::{BatchScores, InferenceBatch, RowErrors, Verdict};
use crate::secondary::SecondaryRole;
use crate::session::ModelSession;

/// The part of a canary batch a session run scores: the rows outside the canary (scored by
/// the primary) or the rows in it (scored by the canary version).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Primary,
    Canary,
}

/// A loaded model version with its tag.
struct Loaded {
    session: ModelSession,
    tag: ModelTag,
}

impl Loaded {
    fn new(session: ModelSession) -> Self {
        let tag = tag_of(&session);
        Loaded { session, tag }
    }
}

/// The model identity of a session.
pub fn tag_of(session: &ModelSession) -> ModelTag {
    ModelTag {
        name: session.name().into(),
        version: session.version().into(),
    }
}

/// Everything one score instance scores with.
pub struct ModelSet {
    primary: Loaded,
    secondary: Option<(SecondaryRole, Loaded)>,
    /// The canary share of `secondary`, published for the operator.
    canary_share: Arc<CanaryShare>,
    metrics: Arc<JobMetrics>,
    counters: Arc<ScoreCounters>,
    /// Scratch: the values of one part of a canary batch, its scores and its row errors.
    values: Vec<f64>,
    out: Vec<f32>,
    part_errors: RowErrors,
    /// Scratch: the scores of the smaller runs of a split (`crate::bisect`).
    split_out: Vec<f32>,
}

impl ModelSet {
    /// A set serving `primary`, with an optional second version.
    pub fn new(
        primary: ModelSession,
        secondary: Option<(SecondaryRole, ModelSession)>,
        metrics: Arc<JobMetrics>,
        counters: Arc<ScoreCounters>,
    ) -> Self {
        let set = ModelSet {
            primary: Loaded::new(primary),
            secondary: secondary.map(|(role, s)| (role, Loaded::new(s))),
            canary_share: Arc::default(),
            metrics,
            counters,
            values: Vec::new(),
            out: Vec::new(),
            part_errors: RowErrors::default(),
            split_out: Vec::new(),
        };
        set.publish_share();
        set
    }

    /// The primary version's tag.
    pub fn primary_tag(&self) -> &ModelTag {
        &self.primary.tag
    }

    /// Replaces the primary session (already loaded, validated and warmed); returns the old.
    pub fn swap_primary(&mut self, session: ModelSession) -> ModelSession {
        let old = std::mem::replace(&mut self.primary, Loaded::new(session));
        old.session
    }

    /// The canary share this set serves, kept current as its second version changes; the
    /// operator reads it to know whether rows need their key's bucket.
    pub fn canary_share(&self) -> &Arc<CanaryShare> {
        &self.canary_share
    }

    /// What this set serves, keyed for checkpoint manifests (`weir_operators::serving`): the
    /// primary under its model name, a second version under `name:canary` / `name:shadow`.
    pub fn serving(&self) -> BTreeMap<String, String> {
        let primary = &self.primary.tag;
        let mut versions =
            BTreeMap::from([(primary.name.to_string(), primary.version.to_string())]);
        if let Some((role, tag)) = self.secondary() {
            let role = match role {
                SecondaryRole::Shadow => "shadow",
                SecondaryRole::Canary { .. } => "canary",
            };
            versions.insert(format!("{}:{role}", tag.name), tag.version.to_string());
        }
        versions
    }

    /// The second version's role and tag, when one serves.
    pub fn secondary(&self) -> Option<(SecondaryRole, &ModelTag)> {
        self.secondary
            .as_ref()
            .map(|(role, loaded)| (*role, &loaded.tag))
    }

    /// Replaces the second version (already loaded, validated and warmed), or removes it with
    /// `None`; returns the old one with its role.
    pub fn replace_secondary(
        &mut self,
        secondary: Option<(SecondaryRole, ModelSession)>,
    ) -> Option<(SecondaryRole, ModelSession)> {
        let new = secondary.map(|(role, session)| (role, Loaded::new(session)));
        let old = std::mem::replace(&mut self.secondary, new);
        self.publish_share();
        old.map(|(role, loaded)| (role, loaded.session))
    }

    /// Gives the serving second version another role or share, without reloading it; returns
    /// the old role (`None` when no second version serves, and nothing changes).
    pub fn set_secondary_role(&mut self, role: SecondaryRole) -> Option<SecondaryRole> {
        let (serving, _) = self.secondary.as_mut()?;
        let old = std::mem::replace(serving, role);
        self.publish_share();
        Some(old)
    }

    fn publish_share(&self) {
        self.canary_share.set(match &self.secondary {
            Some((SecondaryRole::Canary { share }, _)) => Some(*share),
            _ => None,
        });
    }

    /// Marks every row of `batch` failed with `error` under the primary version (counted as
    /// inference errors): what a batch gets when its inference panicked.
    pub fn fail_batch(&self, batch: &mut InferenceBatch, error: ScoreError) {
        batch.canary.clear();
        batch.scores.clear();
        batch.scores.primary = Some(count(
            &self.metrics,
            &self.counters,
            &self.primary.tag,
            batch.rows,
            Err(error),
        ));
    }

    /// Scores one batch: writes a score per row and a verdict per version into
    /// `batch.scores` (cleared first); a version that cannot run at all marks its rows with the
    /// error in its verdict, and the rows it fails on alone go to `row_errors` (primary and
    /// canary) or `shadow_row_errors`.
    /// With a canary serving, the rows whose bucket is below the cut of its share now are
    /// the canary's: `batch.canary` gets one flag per row (left empty when no row is).
    pub fn score(&mut self, batch: &mut InferenceBatch) {
        ScoreCounters::add(&self.counters.batches, 1);
        let InferenceBatch {
            values,
            rows,
            canary_buckets,
            canary,
            scores,
        } = batch;
        let rows = *rows;
        scores.clear();
        let role = self.secondary.as_ref().map(|(role, _)| *role);
        canary.clear();
        let mut canary_rows = 0;
        if let Some(SecondaryRole::Canary { share }) = role {
            let cut = canary_cut(share);
            canary_rows = canary_buckets.iter().filter(|b| **b < cut).count();
            if canary_rows > 0 {
                // Buckets are one per row once any row has one (`InferenceBatch::push_row`).
                canary.extend(canary_buckets.iter().map(|b| *b < cut));
            }
        }
        if canary_rows == 0 {
            let primary = &mut self.primary;
            let result = score_rows(
                |v, n, out| primary.session.score_batch(v, n, out),
                values,
                rows,
                &mut scores.values,
                &mut scores.row_errors,
                &mut self.split_out,
            );
            scores.primary = Some(count(
                &self.metrics,
                &self.counters,
                &self.primary.tag,
                rows,
                result,
            ));
        } else {
            ScoreCounters::add(&self.counters.canary_rows, canary_rows as u64);
            scores.values.clear();
            scores.values.resize(rows, 0.0);
            let split = [
                (Part::Primary, rows - canary_rows),
                (Part::Canary, canary_rows),
            ];
            for (part, n) in split.into_iter().filter(|(_, n)| *n > 0) {
                let verdict = self.run_part(
                    part,
                    values,
                    canary,
                    n,
                    &mut scores.values,
                    &mut scores.row_errors,
                );
                match part {
                    Part::Canary => scores.canary = Some(verdict),
                    Part::Primary => scores.primary = Some(verdict),
                }
            }
            if scores.primary.is_none() {
                // Every row went to the canary; the primary still names itself.
                scores.primary = Some(Verdict {
                    model: self.primary.tag.clone(),
                    error: None,
                    inference_ts_ms: unix_ms() as i64,
                });
            }
        }
        self.observe_drift(scores, canary);
        if let (Some(SecondaryRole::Shadow), Some((_, shadow))) = (role, self.secondary.as_mut()) {
            let result = score_rows(
                |v, n, out| shadow.session.score_batch(v, n, out),
                values,
                rows,
                &mut scores.shadow_values,
                &mut scores.shadow_row_errors,
                &mut self.split_out,
            );
            // A shadow's rows are not the job's scores: only its errors and runs are counted.
            let (failed, error) = match result {
                Ok(done) => {
                    let extra = done.runs.saturating_sub(1) as u64;
                    ScoreCounters::add(&self.counters.split_runs, extra);
                    (done.failed, None)
                }
                Err(error) => (rows, Some(error.to_string())),
            };
            ScoreCounters::add(&self.counters.shadow_errors, failed as u64);
            scores.shadow = Some(Verdict {
                model: shadow.tag.clone(),
                error,
                inference_ts_ms: unix_ms() as i64,
            });
        }
    }

    /// Feeds the scores of the primary (and canary) version's rows to the drift monitor: a
    /// row is failed when its version's verdict has an error or it failed alone.
    fn observe_drift(&self, scores: &BatchScores, canary: &[bool]) {
        let now_ms = unix_ms();
        let is_canary = |row: usize| canary.get(row).copied().unwrap_or(false);
        let parts = [
            (Some(&self.primary), scores.primary.as_ref(), false),
            (
                self.secondary.as_ref().map(|(_, loaded)| loaded),
                scores.canary.as_ref(),
                true,
            ),
        ];
        for (loaded, verdict, canary_part) in parts {
            let (Some(loaded), Some(verdict)) = (loaded, verdict) else {
                continue;
            };
            let all_failed = verdict.error.is_some();
            let in_part = |row: usize| is_canary(row) == canary_part;
            if !(0..scores.values.len()).any(in_part) {
                continue;
            }
            self.counters.drift.observe(
                &loaded.tag,
                &loaded.session.manifest().baseline,
                &scores.values,
                |row| all_failed || scores.row_errors.get(row).is_some(),
                in_part,
                now_ms,
            );
        }
    }

    /// Scores the rows of `part` (`n` of them, by their canary flags as decided by
    /// [`Self::score`]) with the canary (or the primary) version, writing their scores into
    /// their slots of `out` and the rows it failed on alone into `errors`, by batch row.
    fn run_part(
        &mut self,
        part: Part,
        values: &[f64],
        canary: &[bool],
        n: usize,
        out: &mut [f32],
        errors: &mut RowErrors,
    ) -> Verdict {
        let model = match (&mut self.secondary, part) {
            (Some((_, loaded)), Part::Canary) => loaded,
            _ => &mut self.primary,
        };
        let in_part = part == Part::Canary;
        let width = model.session.features().len();
        self.part_errors.clear();
        let mut run =
            |v: &[f64], rows: usize, out: &mut Vec<f32>| model.session.score_batch(v, rows, out);
        let result = if values.len() == canary.len() * width {
            self.values.clear();
            for (row, _) in values
                .chunks_exact(width.max(1))
                .zip(canary)
                .filter(|(_, c)| **c == in_part)
            {
                self.values.extend_from_slice(row);
            }
            score_rows(
                &mut run,
                &self.values,
                n,
                &mut self.out,
                &mut self.part_errors,
                &mut self.split_out,
            )
        } else {
            // Not whole rows: the session reports the mismatch for the whole batch.
            run(values, canary.len(), &mut self.out).map(|_| RowsScored::default())
        };
        let verdict = count(&self.metrics, &self.counters, &model.tag, n, result);
        if verdict.error.is_none() {
            let slots = out.iter_mut().zip(canary).filter(|(_, c)| **c == in_part);
            for ((slot, _), score) in slots.zip(&self.out) {
                *slot = *score;
            }
            if !self.part_errors.is_empty() {
                let rows_of_part: Vec<usize> = (0..canary.len())
                    .filter(|i| canary[*i] == in_part)
                    .collect();
                for (j, error) in self.part_errors.iter() {
                    if let Some(row) = rows_of_part.get(j) {
                        errors.insert(*row, error.to_owned());
                    }
                }
            }
        }
        verdict
    }
}

/// The verdict of a version over its `rows` rows, counted in the job's metrics: rows scored
/// and rows failed alone, or every row failed when the version could not run them.
fn count(
    metrics: &JobMetrics,
    counters: &ScoreCounters,
    tag: &ModelTag,
    rows: usize,
    result: Result<RowsScored>,
) -> Verdict {
    let inference_ts_ms = unix_ms() as i64;
    let error = match result {
        Ok(done) => {
            metrics.scored(tag, done.scored as u64);
            JobMetrics::add(&metrics.defaults_used, done.defaults_used as u64);
            metrics.inference_failed(tag, done.failed as u64);
            let extra = done.runs.saturating_sub(1) as u64;
            ScoreCounters::add(&counters.split_runs, extra);
            if done.failed > 0 {
                tracing::warn!(failed = done.failed, rows, runs = done.runs, version = %tag.version, "inference failed on rows alone; the rest of the batch is scored, the failed rows get error records");
            }
            None
        }
        Err(error) => {
            let error = error.to_string();
            tracing::warn!(%error, rows, version = %tag.version, "inference failed; emitting error records");
            metrics.inference_failed(tag, rows as u64);
            Some(error)
        }
    };
    Verdict {
        model: tag.clone(),
        error,
        inference_ts_ms,
    }
}
