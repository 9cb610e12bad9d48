//! Deterministic randomness for the generator.
//!
//! The only source of randomness is a ChaCha8 stream (`rand_chacha`, whose output is
//! value-stable across releases) seeded by expanding the user's `u64` seed with SplitMix64.
//! Every distribution is sampled by hand from that stream (no `rand_distr` algorithms, which
//! may change between versions), so a seed and a config pin the output bytes. The samplers use
//! `f64::ln`/`exp`/`cos`, so bit-identical output is guaranteed on one platform's libm; across
//! platforms a last-ulp difference could in rare cases flip a rounded digit.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One step of SplitMix64: a fixed, well-mixed `u64 -> u64` function.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Maps a `u64` to `[0, 1)` using its top 53 bits.
fn to_unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A hash of `(seed, index)` in `[0, 1)`, independent of the event stream.
pub(crate) fn unit_hash(seed: u64, index: u64) -> f64 {
    let mut state = seed ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    to_unit(splitmix64(&mut state))
}

/// The generator's random stream and the samplers drawn from it.
#[derive(Debug, Clone)]
pub(crate) struct Sampler {
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A stream fixed by `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        let mut state = seed;
        let mut key = [0u8; 32];
        for chunk in key.chunks_exact_mut(8) {
            chunk.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
        }
        Self {
            rng: ChaCha8Rng::from_seed(key),
        }
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        to_unit(self.rng.next_u64())
    }

    /// Uniform integer in `[0, n)`; `n` must be positive.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.unit() * n as f64) as u64).min(n.saturating_sub(1))
    }

    /// `true` with probability `p`.
    pub(crate) fn bernoulli(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponential with the given mean.
    pub(crate) fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Standard normal (Box–Muller, one draw of the pair).
    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Lognormal with arithmetic mean `mean` and log-space standard deviation `sigma`.
    pub(crate) fn lognormal(&mut self, mean: f64, sigma: f64) -> f64 {
        let mu = mean.ln() - sigma * sigma / 2.0;
        (mu + sigma * self.normal()).exp()
    }
}

/// Inverse-CDF table for a Zipf distribution over ranks `0..n`: `P(k) ∝ (k + 1)^-s`.
#[derive(Debug, Clone)]
pub(crate) struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    /// A table over `n >= 1` ranks with exponent `s`.
    pub(crate) fn new(n: u32, s: f64) -> Self {
        let mut total = 0.0;
        let cdf = (1..=n.max(1))
            .map(|k| {
                total += f64::from(k).powf(-s);
                total
            })
            .collect();
        Self { cdf }
    }

    /// Draws a rank in `0..n`.
    pub(crate) fn sample(&self, sampler: &mut Sampler) -> u32 {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let u = sampler.unit() * total;
        let rank = self.cdf.partition_point(|&c| c <= u);
        rank.min(self.cdf.len() - 1) as u32
    }
}
