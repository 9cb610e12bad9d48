//! Approximate distinct counts with bounded memory, for the `distinct` aggregate of the window
//! stage. A (key, window) starts with an exact set of value hashes and switches to a
//! HyperLogLog sketch (precision 12: 4096 one-byte registers, 4 KiB) once the set would hold
//! more than [`EXACT_LIMIT`] hashes, so memory per state is at most 4 KiB whatever the input.
//!
//! Values are hashed with xxh3-64 and a fixed seed, so counts are reproducible across runs,
//! restores and machines. Below the limit the count is exact (up to 64-bit hash collisions,
//! probability < 2^-40 at the limit). Above it the estimate uses Ertl's improved raw
//! estimator ("New cardinality estimation algorithms for HyperLogLog sketches", 2017; also
//! used by Redis), which needs no empirical bias tables: relative standard error
//! ≈ 1.04 / √4096 ≈ 1.6 %; `tests/aggregates.rs` checks |error| < 5 % at 1 k and 100 k values.
//!
//! Merging is a set union (register-wise maximum for sketches), so merging the states of two
//! inputs gives exactly the state of their concatenation, in any order.

use serde::{Deserialize, Serialize};

use crate::record::Value;

/// Register-index bits of the sketch (2^12 = 4096 registers).
pub const PRECISION: u32 = 12;
const REGISTERS: usize = 1 << PRECISION;
/// Largest register value: leading zeros of the 52 remaining hash bits, plus one.
const MAX_RANK: u8 = (64 - PRECISION + 1) as u8;
/// Most hashes kept exactly (2 KiB) before switching to the sketch.
pub const EXACT_LIMIT: usize = 256;
/// Fixed seed of value hashes. Changing it changes every restored sketch's meaning: never do.
const SEED: u64 = 0x5745_4952_4449_5354; // "WEIRDIST"

/// Distinct-count state of one feature in one (key, window).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Distinct {
    /// Sorted, deduplicated value hashes; at most [`EXACT_LIMIT`]. Starts empty without
    /// allocating and grows (allocating) as values arrive.
    Exact(Vec<u64>),
    /// HyperLogLog registers (allocated once, when the exact set overflows).
    Sketch(Box<[u8]>),
}

impl Default for Distinct {
    fn default() -> Self {
        Distinct::Exact(Vec::new())
    }
}

/// The hash a value is counted by: strings by their bytes, numbers by their bits (`-0.0`
/// counted as `0.0`), booleans as 0/1; `None` for a missing value, which is not counted.
pub fn hash_value(value: &Value) -> Option<u64> {
    use xxhash_rust::xxh3::xxh3_64_with_seed;
    match value {
        Value::Missing => None,
        Value::Str(s) => Some(xxh3_64_with_seed(s.as_bytes(), SEED)),
        Value::Num(x) if x.is_finite() => {
            let x = if *x == 0.0 { 0.0f64 } else { *x };
            Some(xxh3_64_with_seed(&x.to_bits().to_le_bytes(), SEED ^ 1))
        }
        Value::Num(_) => None,
        Value::Bool(b) => Some(xxh3_64_with_seed(&[u8::from(*b)], SEED ^ 2)),
    }
}

impl Distinct {
    /// Counts one value hash (see [`hash_value`]).
    #[inline]
    pub fn insert(&mut self, hash: u64) {
        match self {
            Distinct::Exact(set) => {
                if let Err(at) = set.binary_search(&hash) {
                    if set.len() < EXACT_LIMIT {
                        set.insert(at, hash);
                    } else {
                        let mut registers = sketch_of(set);
                        add(&mut registers, hash);
                        *self = Distinct::Sketch(registers);
                    }
                }
            }
            Distinct::Sketch(registers) => add(registers, hash),
        }
    }

    /// Adds `other`'s values: afterwards `self` describes the union of both inputs.
    pub fn merge(&mut self, other: &Distinct) {
        match (&mut *self, other) {
            (_, Distinct::Exact(hashes)) => hashes.iter().for_each(|h| self.insert(*h)),
            (Distinct::Sketch(registers), Distinct::Sketch(theirs)) => registers
                .iter_mut()
                .zip(theirs.iter())
                .for_each(|(r, t)| *r = (*r).max(*t)),
            (Distinct::Exact(hashes), Distinct::Sketch(theirs)) => {
                let mut registers = theirs.clone();
                hashes.iter().for_each(|h| add(&mut registers, *h));
                *self = Distinct::Sketch(registers);
            }
        }
    }

    /// The (estimated) number of distinct values; 0 when empty.
    pub fn count(&self) -> f64 {
        match self {
            Distinct::Exact(set) => set.len() as f64,
            Distinct::Sketch(registers) => estimate(registers),
        }
    }

    /// Whether the count is still exact (no sketch yet).
    pub fn is_exact(&self) -> bool {
        matches!(self, Distinct::Exact(_))
    }
}

fn sketch_of(hashes: &[u64]) -> Box<[u8]> {
    let mut registers = vec![0u8; REGISTERS].into_boxed_slice();
    hashes.iter().for_each(|h| add(&mut registers, *h));
    registers
}

/// The top [`PRECISION`] bits pick the register; it keeps the largest rank (leading zeros
/// of the remaining bits + 1) seen.
#[inline]
fn add(registers: &mut [u8], hash: u64) {
    let index = (hash >> (64 - PRECISION)) as usize;
    let rest = hash << PRECISION;
    let rank = (rest.leading_zeros() + 1).min(u32::from(MAX_RANK)) as u8;
    if let Some(r) = registers.get_mut(index) {
        *r = (*r).max(rank);
    }
}

/// Ertl's improved raw estimator (Algorithm 6 of the paper) over the register histogram.
fn estimate(registers: &[u8]) -> f64 {
    let q = usize::from(MAX_RANK) - 1;
    let mut histogram = [0u32; 66];
    for r in registers {
        if let Some(c) = histogram.get_mut(usize::from(*r)) {
            *c += 1;
        }
    }
    let m = registers.len() as f64;
    let mut z = m * tau(1.0 - f64::from(histogram[q + 1]) / m);
    for k in (1..=q).rev() {
        z = 0.5 * (z + f64::from(histogram[k]));
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    let alpha_inf = 1.0 / (2.0 * std::f64::consts::LN_2);
    alpha_inf * m * m / z
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if z == previous {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == previous {
            return z / 3.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_until_the_limit_then_sketch() {
        let mut d = Distinct::default();
        for i in 0..EXACT_LIMIT as u64 {
            d.insert(hash_value(&Value::Num(i as f64)).unwrap_or_default());
            d.insert(hash_value(&Value::Num(i as f64)).unwrap_or_default());
        }
        assert!(d.is_exact());
        assert_eq!(d.count(), EXACT_LIMIT as f64);
        d.insert(hash_value(&Value::Num(-1.0)).unwrap_or_default());
        assert!(!d.is_exact());
        assert!((d.count() - (EXACT_LIMIT + 1) as f64).abs() < 3.0);
    }

    #[test]
    fn empty_sketch_counts_zero() {
        assert_eq!(estimate(&[0u8; REGISTERS]), 0.0);
        assert_eq!(Distinct::default().count(), 0.0);
    }

    #[test]
    fn values_hash_by_kind() {
        assert_eq!(hash_value(&Value::Num(0.0)), hash_value(&Value::Num(-0.0)));
        assert_eq!(hash_value(&Value::Missing), None);
        assert_ne!(hash_value(&Value::Num(1.0)), hash_value(&Value::Bool(true)));
    }
}
