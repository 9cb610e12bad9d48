//! The canary split: which keys a canary version scores (DESIGN.md §6).
//!
//! Inside the scoring stage, shared by the operator's batcher (`crate::batcher`) and the
//! inference thread's model set (`crate::model_set`): a key's bucket ([`key_bucket`]) is a
//! stable xxh3 hash of the key with a fixed seed, so a key always sees the same version, on
//! every process and across restarts; a canary of share `s` takes the buckets below
//! [`canary_cut`]`(s)`. The inference thread publishes the share it serves ([`CanaryShare`])
//! so the batcher computes buckets only while a canary runs.

use std::sync::atomic::{AtomicU64, Ordering};

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

/// The canary share an inference thread serves now, published by its
/// [`ModelSet`](crate::model_set::ModelSet) for the operator (`crate::batcher`), which gives
/// rows their key's bucket only while a canary runs: written on every change of the second
/// version, read once per push of rows. The split is not decided with it:
/// [`ModelSet::score`](crate::model_set::ModelSet::score) applies the share serving when it
/// scores the batch. `f64` bits in an atomic; 0 = no canary.
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

    /// Publishes the share now served (`None`, or a share of 0: no canary).
    pub(crate) fn set(&self, share: Option<f64>) {
        let bits = share.filter(|s| *s > 0.0).map_or(0, f64::to_bits);
        self.0.store(bits, Ordering::Relaxed);
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
}
