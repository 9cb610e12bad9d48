//! Mergeable aggregates of the window stage: the kinds a job file can name and the compact
//! per-(key, window) state they keep. Every kind merges: merging the states of two inputs
//! describes their concatenation, which hopping panes and session merges (issue #3) rely on.
//!
//! State layout: all numeric states of one (key, window) live in one flat run of 64-bit
//! words (an [`Accumulators::words`], or a pane's place in its key table's column, borrowed
//! as [`AccsRef`] / [`AccsMut`]), each feature at a fixed offset, sized by its kind:
//! `count` with `where` 1 word, `min`/`max` 1, `sum`/`mean` 2, `first`/`last` 2, variances 3.
//! A `count` without `where` keeps no word: it is the number of records its owner keeps
//! anyway ([`AccsRef::records`]: a slot's record count, [`Accumulators::records`]). Distinct
//! counts keep a [`Distinct`] each in [`Accumulators::distinct`]; ratios keep no state.
//! Updating an existing state never allocates, except `distinct`, whose exact set grows.
//!
//! Numeric rules: inputs are finite (the decoder sends NaN/±inf to the dead-letter topic;
//! a non-finite value reaching an aggregate anyway is ignored like a missing one). `i64` and
//! `timestamp_ms` fields are aggregated as f64. A sum, mean or variance whose arithmetic
//! overflows to ±inf (or NaN) yields a missing value rather than an infinite feature.

use serde::{Deserialize, Serialize};
use thin_vec::ThinVec;

use crate::hll::Distinct;
use crate::vocab::EventTime;

/// Which aggregate a feature computes (`agg = "..."` in the job file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AggKind {
    /// Number of records (that pass the feature's `where`). Never missing: 0 for none.
    /// (The `Default`, so specs built in code can use `..Default::default()`.)
    #[default]
    Count,
    /// `count` with a required `where` predicate.
    CountIf,
    /// Sum of a field; missing when no record had the field (SQL SUM semantics).
    /// With `where` this is "sum_if".
    Sum,
    /// Arithmetic mean of a field (sum / count, both in arrival order).
    Mean,
    /// Minimum of a field.
    Min,
    /// Maximum of a field.
    Max,
    /// Population variance (divides by n); 0 for one value.
    VarPop,
    /// Sample variance (divides by n − 1); missing for fewer than two values.
    VarSamp,
    /// Square root of `var_pop`.
    StddevPop,
    /// Square root of `var_samp`.
    StddevSamp,
    /// The field's value at the smallest event time; ties keep the earliest-arriving record.
    First,
    /// The field's value at the largest event time; ties take the latest-arriving record.
    Last,
    /// Approximate number of distinct values of a field (string, number or bool); exact up to
    /// 256 values, then HyperLogLog (≈1.6 % relative standard error). Never missing.
    Distinct,
    /// `numerator / denominator`, two other features of the same window; missing when either
    /// is missing or the denominator is 0.
    Ratio,
}

impl AggKind {
    /// Whether the aggregate reads a field's value.
    pub fn needs_field(&self) -> bool {
        !matches!(self, AggKind::Count | AggKind::CountIf | AggKind::Ratio)
    }

    /// Whether the field must be numeric (`distinct` also takes strings and booleans).
    pub fn needs_numeric_field(&self) -> bool {
        self.needs_field() && *self != AggKind::Distinct
    }

    /// Words of [`Accumulators::words`] this kind's state takes.
    pub fn words(&self) -> usize {
        match self {
            AggKind::Count | AggKind::CountIf | AggKind::Min | AggKind::Max => 1,
            AggKind::Sum | AggKind::Mean | AggKind::First | AggKind::Last => 2,
            AggKind::VarPop | AggKind::VarSamp | AggKind::StddevPop | AggKind::StddevSamp => 3,
            AggKind::Distinct | AggKind::Ratio => 0,
        }
    }

    /// Appends the empty state of this kind to `words`.
    pub fn push_empty(&self, words: &mut Vec<u64>) {
        let f = f64::to_bits;
        match self {
            AggKind::Min => words.push(f(f64::INFINITY)),
            AggKind::Max => words.push(f(f64::NEG_INFINITY)),
            // Event time 0 and no value (NaN: inputs are finite) = empty.
            AggKind::First | AggKind::Last => words.extend([0, f(f64::NAN)]),
            _ => words.extend(std::iter::repeat_n(0, self.words())),
        }
    }
}

/// Flat numeric state of all features of one (key, window), exactly as long as the job's
/// features need (count/sum/max: 3 words), where it has words of its own (an
/// [`Accumulators`], a session's or a merged window's slot): one allocation per such slot,
/// none per update, and the owner holds only its pointer and length (16 bytes) whatever the
/// job's features. A pane's words are its key table's column instead, with no allocation of
/// their own.
pub type Words = Box<[u64]>;

/// The state of all features of one (key, window). Built by `FeatureSet::empty`, changed
/// only through `FeatureSet::{add, absorb}`. Serialized as its words and distinct states: a
/// snapshot's slot writes its record count beside them.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Accumulators {
    /// Numeric states, each feature at its offset (see the module docs).
    pub words: Words,
    /// Distinct-count states, one per `distinct` feature (empty, unallocated, for jobs
    /// without one; a thin pointer: 8 bytes of the slot).
    pub distinct: ThinVec<Distinct>,
    /// Records folded in: the value of every `count` without `where`.
    #[serde(skip)]
    pub records: u64,
}

/// A (key, window)'s accumulators, borrowed from wherever they are kept (an
/// [`Accumulators`], or a slot whose words are a column of its pane's key table). Serialized
/// as an [`Accumulators`] is (its words and its distinct states, each a sequence).
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename = "Accumulators")]
pub struct AccsRef<'a> {
    /// Numeric states, each feature at its offset.
    pub words: &'a [u64],
    /// Distinct-count states, one per `distinct` feature.
    pub distinct: &'a [Distinct],
    /// Records folded in, as their owner counts them: the value of every `count` without
    /// `where`.
    #[serde(skip)]
    pub records: u64,
}

/// [`AccsRef`], mutable: what an update or a merge changes. The record count is not in it:
/// its owner adds to it beside the update or merge ([`crate::feature::FeatureSet::add`]).
#[derive(Debug)]
pub struct AccsMut<'a> {
    /// Numeric states, each feature at its offset.
    pub words: &'a mut [u64],
    /// Distinct-count states, one per `distinct` feature.
    pub distinct: &'a mut [Distinct],
}

impl Accumulators {
    /// Borrows the words and distinct states.
    pub fn view(&self) -> AccsRef<'_> {
        AccsRef {
            words: &self.words,
            distinct: &self.distinct,
            records: self.records,
        }
    }

    /// Borrows the words and distinct states mutably.
    pub(crate) fn view_mut(&mut self) -> AccsMut<'_> {
        AccsMut {
            words: &mut self.words,
            distinct: &mut self.distinct,
        }
    }
}

/// `clone_from` copies into the existing allocations when the lengths agree (always, for
/// states of one job), so a reused copy allocates nothing (beyond a `distinct` set's growth).
impl Clone for Accumulators {
    fn clone(&self) -> Self {
        Accumulators {
            words: self.words.clone(),
            distinct: self.distinct.clone(),
            records: self.records,
        }
    }

    fn clone_from(&mut self, source: &Self) {
        self.words.clone_from(&source.words);
        clone_distinct_from(&mut self.distinct, &source.distinct);
        self.records = source.records;
    }
}

/// Makes `into` a copy of `source`'s distinct states, into their existing allocations when
/// the counts agree (always, for states of one job).
pub(crate) fn clone_distinct_from(into: &mut ThinVec<Distinct>, source: &ThinVec<Distinct>) {
    if into.len() == source.len() {
        let pairs = into.iter_mut().zip(source);
        pairs.for_each(|(into, from)| into.clone_from(from));
    } else {
        into.clone_from(source);
    }
}

#[inline]
fn get(w: &[u64], i: usize) -> f64 {
    f64::from_bits(w.get(i).copied().unwrap_or(f64::NAN.to_bits()))
}

#[inline]
fn set(w: &mut [u64], i: usize, x: f64) {
    if let Some(slot) = w.get_mut(i) {
        *slot = x.to_bits();
    }
}

/// Folds one value (`x`, finite; ignored by counts) at event time `ts` into the state `w`
/// of kind `kind` (the feature's words, starting at its offset).
#[inline]
pub fn update(kind: AggKind, w: &mut [u64], x: f64, ts: EventTime) {
    match kind {
        AggKind::Count | AggKind::CountIf => w[0] += 1,
        AggKind::Sum | AggKind::Mean => {
            w[0] += 1;
            set(w, 1, get(w, 1) + x);
        }
        AggKind::Min => set(w, 0, get(w, 0).min(x)),
        AggKind::Max => set(w, 0, get(w, 0).max(x)),
        AggKind::VarPop | AggKind::VarSamp | AggKind::StddevPop | AggKind::StddevSamp => {
            // Welford: mean += d / n; m2 += d * (x - new mean).
            w[0] += 1;
            let (n, mean) = (w[0] as f64, get(w, 1));
            let delta = x - mean;
            let mean = mean + delta / n;
            set(w, 1, mean);
            set(w, 2, get(w, 2) + delta * (x - mean));
        }
        AggKind::First | AggKind::Last => {
            let empty = get(w, 1).is_nan();
            let held = w[0] as i64;
            let replace = match kind {
                AggKind::First => empty || ts < held,
                _ => empty || ts >= held,
            };
            if replace {
                w[0] = ts as u64;
                set(w, 1, x);
            }
        }
        AggKind::Distinct | AggKind::Ratio => {}
    }
}

/// Merges state `other` into `into` (both of kind `kind`): afterwards `into` describes the
/// records of `into` followed by those of `other` (order matters only for ties of
/// `first`/`last`, and for the rounding of sums).
pub fn merge(kind: AggKind, into: &mut [u64], other: &[u64]) {
    match kind {
        AggKind::Count | AggKind::CountIf => into[0] += other[0],
        AggKind::Sum | AggKind::Mean => {
            into[0] += other[0];
            set(into, 1, get(into, 1) + get(other, 1));
        }
        AggKind::Min => set(into, 0, get(into, 0).min(get(other, 0))),
        AggKind::Max => set(into, 0, get(into, 0).max(get(other, 0))),
        AggKind::VarPop | AggKind::VarSamp | AggKind::StddevPop | AggKind::StddevSamp => {
            // Chan, Golub & LeVeque: combine (n, mean, m2) of two parts.
            let (na, nb) = (into[0], other[0]);
            if nb == 0 {
                return;
            }
            if na == 0 {
                into[..3].copy_from_slice(&other[..3]);
                return;
            }
            let n = na + nb;
            let (fa, fb, fnn) = (na as f64, nb as f64, n as f64);
            let delta = get(other, 1) - get(into, 1);
            let mean = get(into, 1) + delta * (fb / fnn);
            let m2 = get(into, 2) + get(other, 2) + delta * delta * (fa * fb / fnn);
            into[0] = n;
            set(into, 1, mean);
            set(into, 2, m2);
        }
        AggKind::First | AggKind::Last => {
            if !get(other, 1).is_nan() {
                update(kind, into, get(other, 1), other[0] as i64);
            }
        }
        AggKind::Distinct | AggKind::Ratio => {}
    }
}

/// The number of records state `w` holds (its first word; 0 for a state without words): the
/// value of a `count` or `count_if`.
#[inline]
pub(crate) fn count(w: &[u64]) -> u64 {
    w.first().copied().unwrap_or(0)
}

/// The value of state `w` of kind `kind`; `NaN` encodes "missing". Counts are never missing.
pub fn value(kind: AggKind, w: &[u64]) -> f64 {
    let finite = |x: f64| if x.is_finite() { x } else { f64::NAN };
    let n = count(w);
    match kind {
        AggKind::Count | AggKind::CountIf => n as f64,
        AggKind::Sum if n > 0 => finite(get(w, 1)),
        AggKind::Mean if n > 0 => finite(get(w, 1) / n as f64),
        // Empty min/max hold ±inf, which `finite` maps to missing.
        AggKind::Min | AggKind::Max => finite(get(w, 0)),
        AggKind::VarPop | AggKind::StddevPop if n > 0 => {
            let var = finite(get(w, 2) / n as f64);
            if kind == AggKind::VarPop {
                var
            } else {
                var.sqrt()
            }
        }
        AggKind::VarSamp | AggKind::StddevSamp if n > 1 => {
            let var = finite(get(w, 2) / (n - 1) as f64);
            if kind == AggKind::VarSamp {
                var
            } else {
                var.sqrt()
            }
        }
        AggKind::First | AggKind::Last => get(w, 1),
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(kind: AggKind, xs: &[(f64, EventTime)]) -> Vec<u64> {
        let mut w = Vec::new();
        kind.push_empty(&mut w);
        xs.iter().for_each(|(x, ts)| update(kind, &mut w, *x, *ts));
        w
    }

    #[test]
    fn empty_states() {
        assert_eq!(value(AggKind::Count, &state(AggKind::Count, &[])), 0.0);
        for kind in [
            AggKind::Sum,
            AggKind::Mean,
            AggKind::Min,
            AggKind::Max,
            AggKind::VarPop,
            AggKind::VarSamp,
            AggKind::First,
            AggKind::Last,
        ] {
            assert!(value(kind, &state(kind, &[])).is_nan(), "{kind:?}");
            assert_eq!(state(kind, &[]).len(), kind.words());
        }
    }

    #[test]
    fn overflow_is_missing() {
        let big = [(f64::MAX, 0), (f64::MAX, 1)];
        assert!(value(AggKind::Sum, &state(AggKind::Sum, &big)).is_nan());
        assert!(value(AggKind::Mean, &state(AggKind::Mean, &big)).is_nan());
        let spread = [(f64::MAX, 0), (-f64::MAX, 1)];
        assert!(value(AggKind::VarPop, &state(AggKind::VarPop, &spread)).is_nan());
        assert_eq!(value(AggKind::Max, &state(AggKind::Max, &big)), f64::MAX);
    }

    #[test]
    fn one_value_variances() {
        let one = [(3.0, 0)];
        assert_eq!(value(AggKind::VarPop, &state(AggKind::VarPop, &one)), 0.0);
        assert!(value(AggKind::VarSamp, &state(AggKind::VarSamp, &one)).is_nan());
    }
}
