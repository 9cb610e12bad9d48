//! The model versions one score instance serves, and how a batch is split between them.
//!
//! Inside the scoring stage, between the inference thread (`crate::pool`) and the sessions:
//! a [`ModelSet`] holds the primary [`ModelSession`] (swapped atomically on hot reload) and
//! optionally a second version as a **shadow** (scores every row too; its score travels in
//! [`ScoredRow::shadow`]) or a **canary** (scores the rows whose key falls in its share, by
//! [`canary_bucket`], a stable xxh3 hash of the key, so a key always sees the same version).
//! Every score names the version that produced it. A failed batch turns each of its rows
//! into a score record with an error and no score, plus a dead letter.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use weir_features::dead_letter::{DeadLetter, DeadLetterReason};
use weir_features::encode::unscored_row_json;
use weir_features::row::{FeatureRow, ModelTag, ScoredRow, ShadowScore};
use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;

use crate::session::ModelSession;

/// Fixed seed of the canary split. Changing it moves keys between versions: never do.
pub const CANARY_SEED: u64 = 0x5745_4952_4341_4e31; // "WEIRCAN1"
/// Resolution of the canary share: buckets of 1/10 000.
pub const CANARY_BUCKETS: u64 = 10_000;

/// Whether `key` is in a canary of `share` (0..=1): `xxh3_64(key, CANARY_SEED) % 10 000 <
/// round(share × 10 000)`. Stable across runs, processes and restarts.
pub fn canary_bucket(key: &str, share: f64) -> bool {
    let cut = (share.clamp(0.0, 1.0) * CANARY_BUCKETS as f64).round() as u64;
    xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), CANARY_SEED) % CANARY_BUCKETS < cut
}

/// What the second model version does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SecondaryRole {
    /// Scores every row beside the primary; its score goes in `ScoredRow::shadow`.
    Shadow,
    /// Scores the keys in `share` (0 < share <= 1) instead of the primary.
    Canary {
        /// Share of keys, by [`canary_bucket`].
        share: f64,
    },
}

/// A second model version and its role.
#[derive(Clone, Debug, PartialEq)]
pub struct SecondaryModel {
    /// Shadow or canary.
    pub role: SecondaryRole,
    /// Its model directory.
    pub dir: PathBuf,
}

/// Counters of the scoring stage beyond [`JobMetrics`]: reloads and the second version.
#[derive(Debug, Default)]
pub struct ScoreCounters {
    /// Successful hot reloads (the primary version was swapped).
    pub reloads: AtomicU64,
    /// Failed reload attempts (the old version kept serving); one per distinct failure.
    pub reload_failures: AtomicU64,
    /// Rows scored by a canary version.
    pub canary_rows: AtomicU64,
    /// Rows whose shadow score failed (the primary score is unaffected).
    pub shadow_errors: AtomicU64,
    /// Batches scored.
    pub batches: AtomicU64,
    /// Most batches ever queued or running at once on one instance (high-water mark; never
    /// above `max_in_flight`).
    pub in_flight_high_water: AtomicU64,
}

impl ScoreCounters {
    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The scored rows of one batch, in input order, and the dead letters of failed rows.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// One record per input row, same order.
    pub scored: Vec<ScoredRow>,
    /// One dead letter per failed row.
    pub dead: Vec<DeadLetter>,
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
    job_features: Vec<String>,
    source_name: String,
    metrics: Arc<JobMetrics>,
    counters: Arc<ScoreCounters>,
    values: Vec<f64>,
    out: Vec<f32>,
}

impl ModelSet {
    /// A set serving `primary`, with an optional second version.
    pub fn new(
        primary: ModelSession,
        secondary: Option<(SecondaryRole, ModelSession)>,
        job_features: Vec<String>,
        source_name: String,
        metrics: Arc<JobMetrics>,
        counters: Arc<ScoreCounters>,
    ) -> Self {
        ModelSet {
            primary: Loaded::new(primary),
            secondary: secondary.map(|(role, s)| (role, Loaded::new(s))),
            job_features,
            source_name,
            metrics,
            counters,
            values: Vec::new(),
            out: Vec::new(),
        }
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

    /// Scores one batch, consuming its rows.
    pub fn score(&mut self, rows: Vec<FeatureRow>) -> BatchOutcome {
        ScoreCounters::add(&self.counters.batches, 1);
        let mut outcome = BatchOutcome {
            scored: Vec::with_capacity(rows.len()),
            dead: Vec::new(),
        };
        match self.secondary.as_ref().map(|(role, _)| *role) {
            None => self.score_with(false, rows, &mut outcome),
            Some(SecondaryRole::Shadow) => {
                let shadows = self.shadow_scores(&rows);
                self.score_with(false, rows, &mut outcome);
                for (scored, shadow) in outcome.scored.iter_mut().zip(shadows) {
                    scored.shadow = Some(Box::new(shadow));
                }
            }
            Some(SecondaryRole::Canary { share }) => {
                let (canary, primary): (Vec<_>, Vec<_>) = rows
                    .into_iter()
                    .enumerate()
                    .partition(|(_, row)| canary_bucket(&row.key, share));
                ScoreCounters::add(&self.counters.canary_rows, canary.len() as u64);
                let order: Vec<usize> = primary.iter().chain(&canary).map(|(i, _)| *i).collect();
                self.score_with(
                    false,
                    primary.into_iter().map(|(_, r)| r).collect(),
                    &mut outcome,
                );
                self.score_with(
                    true,
                    canary.into_iter().map(|(_, r)| r).collect(),
                    &mut outcome,
                );
                // Back to input order.
                let mut slots: Vec<Option<ScoredRow>> = (0..order.len()).map(|_| None).collect();
                for (scored, at) in outcome.scored.drain(..).zip(order) {
                    slots[at] = Some(scored);
                }
                outcome.scored = slots.into_iter().flatten().collect();
            }
        }
        outcome
    }

    /// Scores `rows` with the primary (or the secondary) model into `outcome`.
    fn score_with(&mut self, secondary: bool, rows: Vec<FeatureRow>, outcome: &mut BatchOutcome) {
        if rows.is_empty() {
            return;
        }
        let model = match (&mut self.secondary, secondary) {
            (Some((_, loaded)), true) => loaded,
            _ => &mut self.primary,
        };
        self.values.clear();
        for row in &rows {
            self.values.extend_from_slice(&row.values);
        }
        let result = model
            .session
            .score_batch(&self.values, rows.len(), &mut self.out);
        let inference_ts_ms = unix_ms() as i64;
        match result {
            Ok(stats) => {
                JobMetrics::add(&self.metrics.scores, rows.len() as u64);
                JobMetrics::add(&self.metrics.defaults_used, stats.defaults_used as u64);
                for (row, score) in rows.into_iter().zip(self.out.iter()) {
                    outcome.scored.push(ScoredRow {
                        row,
                        model: model.tag.clone(),
                        score: Some(f64::from(*score)),
                        error: None,
                        inference_ts_ms,
                        shadow: None,
                    });
                }
            }
            Err(error) => {
                let error = error.to_string();
                tracing::warn!(%error, rows = rows.len(), version = %model.tag.version, "inference failed; emitting error records");
                JobMetrics::add(&self.metrics.inference_errors, rows.len() as u64);
                for row in rows {
                    self.metrics.dead_letter(DeadLetterReason::InferenceFailed);
                    outcome.dead.push(DeadLetter {
                        reason: DeadLetterReason::InferenceFailed,
                        error: format!("model {} {}: {error}", model.tag.name, model.tag.version),
                        topic: self.source_name.clone(),
                        position: row.last,
                        timestamp: Some(row.window_end),
                        key: Some(row.key.as_bytes().to_vec()),
                        raw: unscored_row_json(&row, &self.job_features),
                    });
                    outcome.scored.push(ScoredRow {
                        row,
                        model: model.tag.clone(),
                        score: None,
                        error: Some(error.clone()),
                        inference_ts_ms,
                        shadow: None,
                    });
                }
            }
        }
    }

    /// Shadow scores for `rows` (one per row; errors are counted, never dead-lettered).
    fn shadow_scores(&mut self, rows: &[FeatureRow]) -> Vec<ShadowScore> {
        let Some((_, shadow)) = self.secondary.as_mut() else {
            return Vec::new();
        };
        self.values.clear();
        for row in rows {
            self.values.extend_from_slice(&row.values);
        }
        match shadow
            .session
            .score_batch(&self.values, rows.len(), &mut self.out)
        {
            Ok(_) => self
                .out
                .iter()
                .map(|s| ShadowScore {
                    model: shadow.tag.clone(),
                    score: Some(f64::from(*s)),
                    error: None,
                })
                .collect(),
            Err(error) => {
                ScoreCounters::add(&self.counters.shadow_errors, rows.len() as u64);
                let error = error.to_string();
                rows.iter()
                    .map(|_| ShadowScore {
                        model: shadow.tag.clone(),
                        score: None,
                        error: Some(error.clone()),
                    })
                    .collect()
            }
        }
    }
}

/// Error records and dead letters for rows that could not reach a model at all (the
/// instance's inference thread is gone).
pub fn unscorable(
    rows: Vec<FeatureRow>,
    tag: &ModelTag,
    error: &str,
    job_features: &[String],
    source_name: &str,
    metrics: &JobMetrics,
) -> BatchOutcome {
    let mut outcome = BatchOutcome::default();
    let inference_ts_ms = unix_ms() as i64;
    JobMetrics::add(&metrics.inference_errors, rows.len() as u64);
    for row in rows {
        metrics.dead_letter(DeadLetterReason::InferenceFailed);
        outcome.dead.push(DeadLetter {
            reason: DeadLetterReason::InferenceFailed,
            error: format!("model {} {}: {error}", tag.name, tag.version),
            topic: source_name.to_owned(),
            position: row.last,
            timestamp: Some(row.window_end),
            key: Some(row.key.as_bytes().to_vec()),
            raw: unscored_row_json(&row, job_features),
        });
        outcome.scored.push(ScoredRow {
            row,
            model: tag.clone(),
            score: None,
            error: Some(error.to_owned()),
            inference_ts_ms,
            shadow: None,
        });
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_split_is_stable_and_near_its_share() {
        let keys: Vec<String> = (0..20_000).map(|i| format!("u{i:06}")).collect();
        let first: Vec<bool> = keys.iter().map(|k| canary_bucket(k, 0.1)).collect();
        let again: Vec<bool> = keys.iter().map(|k| canary_bucket(k, 0.1)).collect();
        assert_eq!(first, again);
        let share = first.iter().filter(|b| **b).count() as f64 / keys.len() as f64;
        assert!((share - 0.1).abs() < 0.01, "canary share {share}");
        // Growing the share only adds keys: a key in the 10 % canary stays in the 20 % one.
        for (key, in_ten) in keys.iter().zip(&first) {
            if *in_ten {
                assert!(
                    canary_bucket(key, 0.2),
                    "{key} left the canary when it grew"
                );
            }
        }
        assert!(keys.iter().all(|k| !canary_bucket(k, 0.0)));
        assert!(keys.iter().all(|k| canary_bucket(k, 1.0)));
    }
}
