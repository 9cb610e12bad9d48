//! The model versions one score instance serves, and how a batch is split between them.
//!
//! Inside the scoring stage, between the inference thread (`crate::inference_thread`) and the sessions:
//! a [`ModelSet`] holds the primary [`ModelSession`] and optionally a second version as a
//! **shadow** (scores every row too; its scores travel in
//! [`ScoredBatch::shadow`](weir_features::scored::ScoredBatch::shadow)) or a **canary**
//! (scores the rows whose key falls in its share, by [`canary_bucket`], a stable xxh3 hash of
//! the key, so a key always sees the same version). Hot reload (`crate::reload`) swaps either
//! version, or the second version's role and share, between two batches; the set publishes
//! whether a canary runs ([`CanaryShare`]) for the operator, which then gives each row its
//! key's bucket ([`key_bucket`]) as it gathers the batch. The split itself is decided here,
//! when the batch is scored, against the share serving at that moment ([`canary_cut`]), so
//! rows queued before a share change follow the new share; a row without a bucket (pushed
//! before the canary started) is scored by the primary, and so is every row once the canary
//! stopped.
//! Runs on the inference thread, on a [`InferenceBatch`]'s contiguous values: every version that
//! scores part of the batch leaves a [`Verdict`] naming itself (and its error when it failed),
//! from which the operator builds the scored batches and dead letters (`crate::records`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use weir_features::row::ModelTag;
use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;

use crate::error::{Result, ScoreError};
use crate::inference_batch::{InferenceBatch, Verdict};
use crate::session::{BatchStats, ModelSession};

/// Fixed seed of the canary split. Changing it moves keys between versions: never do.
pub const CANARY_SEED: u64 = 0x5745_4952_4341_4e31; // "WEIRCAN1"
/// Resolution of the canary share: buckets of 1/10 000.
pub const CANARY_BUCKETS: u64 = 10_000;

/// The canary bucket of `key`: `xxh3_64(key, CANARY_SEED) % 10 000`. Stable across runs,
/// processes and restarts, and independent of any share.
#[inline]
pub fn key_bucket(key: &str) -> u16 {
    // Below CANARY_BUCKETS (10 000), so it fits.
    (xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), CANARY_SEED) % CANARY_BUCKETS) as u16
}

/// The first bucket outside a canary of `share` (0..=1, clamped): `round(share × 10 000)`.
/// Buckets below it are in the canary; a bucket of `u16::MAX` never is.
#[inline]
pub fn canary_cut(share: f64) -> u16 {
    // At most CANARY_BUCKETS (10 000); NaN clamps to NaN and casts to 0 (no canary).
    (share.clamp(0.0, 1.0) * CANARY_BUCKETS as f64).round() as u16
}

/// Whether `key` is in a canary of `share` (0..=1): `key_bucket(key) < canary_cut(share)`.
pub fn canary_bucket(key: &str, share: f64) -> bool {
    key_bucket(key) < canary_cut(share)
}

/// What the second model version does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SecondaryRole {
    /// Scores every row beside the primary; its score goes in `ScoredBatch::shadow`.
    Shadow,
    /// Scores the keys in `share` (0 < share <= 1) instead of the primary.
    Canary {
        /// Share of keys, by [`canary_bucket`].
        share: f64,
    },
}

impl std::fmt::Display for SecondaryRole {
    /// `shadow`, or `canary at 5%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecondaryRole::Shadow => f.write_str("shadow"),
            SecondaryRole::Canary { share } => {
                write!(f, "canary at {}%", (share * 10_000.0).round() / 100.0)
            }
        }
    }
}

/// The canary share an inference thread serves now, published by its [`ModelSet`] for the
/// operator (`crate::batcher`), which gives rows their key's bucket only while a canary runs:
/// written on every change of the second version, read once per push of rows. The split is
/// not decided with it: [`ModelSet::score`] applies the share serving when it scores the
/// batch. `f64` bits in an atomic; 0 = no canary.
#[derive(Debug, Default)]
pub struct CanaryShare(AtomicU64);

impl CanaryShare {
    /// The share of keys the canary scores now; `None` when no canary runs.
    #[inline]
    pub fn get(&self) -> Option<f64> {
        // Relaxed: the value is all that is shared; a stale read only decides whether rows
        // get a bucket (a row without one is scored by the primary, see `ModelSet::score`).
        let bits = self.0.load(Ordering::Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    fn set(&self, share: Option<f64>) {
        let bits = share.filter(|s| *s > 0.0).map_or(0, f64::to_bits);
        self.0.store(bits, Ordering::Relaxed);
    }
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
/// Shared by the score instances of a process; each instance's thread watches the registry
/// and swaps on its own, so a reload, a failure or a second-version change counts once per
/// instance.
#[derive(Debug, Default)]
pub struct ScoreCounters {
    /// Successful hot reloads (the primary version was swapped).
    pub reloads: AtomicU64,
    /// Failed reload attempts of either version, and unreadable or invalid `CONTROL` files
    /// (what served kept serving); one per distinct failure and instance.
    pub reload_failures: AtomicU64,
    /// Changes of the second version that took effect: started, stopped, another version, or
    /// another role or share (`CONTROL`'s `canary` / `shadow` line).
    pub secondary_changes: AtomicU64,
    /// Rows scored by a canary version.
    pub canary_rows: AtomicU64,
    /// Rows whose shadow score failed (the primary score is unaffected).
    pub shadow_errors: AtomicU64,
    /// Batches scored.
    pub batches: AtomicU64,
    /// Most batches ever queued or running at once on one instance (high-water mark; never
    /// above `max_in_flight`).
    pub in_flight_high_water: AtomicU64,
    /// Time the inference threads spent on batches, from taking one to sending it back
    /// (nanoseconds, summed over instances): divided by wall time and parallelism, how busy
    /// the scoring stage is.
    pub inference_busy_ns: AtomicU64,
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
    /// Scratch: the values of one part of a canary batch.
    values: Vec<f64>,
    out: Vec<f32>,
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
            &self.primary.tag,
            batch.rows,
            Err(error),
        ));
    }

    /// Scores one batch: writes a score per row and a verdict per version into
    /// `batch.scores` (cleared first); a version that fails marks its rows with the error.
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
            scores.primary = Some(self.run_primary(values, rows, &mut scores.values));
        } else {
            ScoreCounters::add(&self.counters.canary_rows, canary_rows as u64);
            scores.values.clear();
            scores.values.resize(rows, 0.0);
            let split = [(false, rows - canary_rows), (true, canary_rows)];
            for (secondary, n) in split.into_iter().filter(|(_, n)| *n > 0) {
                let verdict = self.run_part(secondary, values, canary, n, &mut scores.values);
                if secondary {
                    scores.canary = Some(verdict);
                } else {
                    scores.primary = Some(verdict);
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
        if let (Some(SecondaryRole::Shadow), Some((_, shadow))) = (role, self.secondary.as_mut()) {
            let result = shadow
                .session
                .score_batch(values, rows, &mut scores.shadow_values);
            let error = result.err().map(|e| {
                ScoreCounters::add(&self.counters.shadow_errors, rows as u64);
                e.to_string()
            });
            scores.shadow = Some(Verdict {
                model: shadow.tag.clone(),
                error,
                inference_ts_ms: unix_ms() as i64,
            });
        }
    }

    /// Scores all `rows` of `values` with the primary version into `out`.
    fn run_primary(&mut self, values: &[f64], rows: usize, out: &mut Vec<f32>) -> Verdict {
        let result = self.primary.session.score_batch(values, rows, out);
        count(&self.metrics, &self.primary.tag, rows, result)
    }

    /// Scores the rows whose canary flag (as decided by [`Self::score`]) is `secondary` (`n`
    /// of them) with the canary (or the primary) version, writing their scores into their
    /// slots of `out`.
    fn run_part(
        &mut self,
        secondary: bool,
        values: &[f64],
        canary: &[bool],
        n: usize,
        out: &mut [f32],
    ) -> Verdict {
        let model = match (&mut self.secondary, secondary) {
            (Some((_, loaded)), true) => loaded,
            _ => &mut self.primary,
        };
        let width = model.session.features().len();
        let result = if values.len() == canary.len() * width {
            self.values.clear();
            for (row, _) in values
                .chunks_exact(width.max(1))
                .zip(canary)
                .filter(|(_, c)| **c == secondary)
            {
                self.values.extend_from_slice(row);
            }
            model.session.score_batch(&self.values, n, &mut self.out)
        } else {
            // Not whole rows: the session reports the mismatch for the whole batch.
            model
                .session
                .score_batch(values, canary.len(), &mut self.out)
        };
        let verdict = count(&self.metrics, &model.tag, n, result);
        if verdict.error.is_none() {
            let slots = out.iter_mut().zip(canary).filter(|(_, c)| **c == secondary);
            for ((slot, _), score) in slots.zip(&self.out) {
                *slot = *score;
            }
        }
        verdict
    }
}

/// The verdict of one session run over `rows` rows, counted in the job's metrics.
fn count(metrics: &JobMetrics, tag: &ModelTag, rows: usize, result: Result<BatchStats>) -> Verdict {
    let inference_ts_ms = unix_ms() as i64;
    let error = match result {
        Ok(stats) => {
            JobMetrics::add(&metrics.scores, rows as u64);
            JobMetrics::add(&metrics.defaults_used, stats.defaults_used as u64);
            None
        }
        Err(error) => {
            let error = error.to_string();
            tracing::warn!(%error, rows, version = %tag.version, "inference failed; emitting error records");
            JobMetrics::add(&metrics.inference_errors, rows as u64);
            Some(error)
        }
    };
    Verdict {
        model: tag.clone(),
        error,
        inference_ts_ms,
    }
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
        assert!(keys.iter().all(|k| key_bucket(k) < CANARY_BUCKETS as u16));
    }

    /// Buckets decide which keys a canary scores, so they must not change between builds or
    /// hosts: these were computed outside Weir (Python `xxhash` 4.1, `xxh3_64_intdigest(key,
    /// seed=CANARY_SEED) % 10000`).
    #[test]
    fn key_buckets_are_the_published_xxh3_values() {
        let golden = [
            ("u000001", 39),
            ("alice", 6681),
            ("", 3659),
            ("k-42", 3606),
            ("carol-with-a-longer-id-that-goes-past-sixteen-bytes", 339),
        ];
        for (key, bucket) in golden {
            assert_eq!(key_bucket(key), bucket, "{key:?}");
        }
    }

    #[test]
    fn canary_cut_rounds_and_clamps_the_share() {
        assert_eq!(canary_cut(0.05), 500);
        assert_eq!(canary_cut(0.000_05), 1); // rounds half up
        assert_eq!(canary_cut(0.125), 1_250);
        assert_eq!(canary_cut(1.0), 10_000);
        assert_eq!(canary_cut(2.0), 10_000);
        assert_eq!(canary_cut(-1.0), 0);
        assert_eq!(canary_cut(f64::NAN), 0);
    }

    #[test]
    fn canary_share_round_trips_and_zero_means_none() {
        let share = CanaryShare::default();
        assert_eq!(share.get(), None);
        share.set(Some(0.05));
        assert_eq!(share.get(), Some(0.05));
        share.set(Some(0.0));
        assert_eq!(share.get(), None);
        share.set(Some(1.0));
        share.set(None);
        assert_eq!(share.get(), None);
    }

    #[test]
    fn roles_read_as_in_the_control_file() {
        assert_eq!(SecondaryRole::Shadow.to_string(), "shadow");
        assert_eq!(
            SecondaryRole::Canary { share: 0.05 }.to_string(),
            "canary at 5%"
        );
        assert_eq!(
            SecondaryRole::Canary { share: 0.125 }.to_string(),
            "canary at 12.5%"
        );
    }
}
