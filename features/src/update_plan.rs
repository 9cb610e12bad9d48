//! The per-record half of a [`crate::feature::FeatureSet`]: its features' updates compiled
//! into a flat plan that the window stage runs for every record it folds into a (key, window).
//!
//! A record's `where` predicates depend only on the record, so [`UpdatePlan::update`] first
//! evaluates each distinct predicate once into a bit mask, then runs the steps: counts
//! (`count`, `count_if`) add their mask bit without a branch; every other aggregate reads its
//! field and skips the record when its predicate failed. With many keys the window stage waits
//! on one cache-cold state entry per record; branches inside the update likely keep the CPU
//! from overlapping that wait with the next record's (BENCHMARKS.md, "Window updates per
//! window kind": the plan measured ×1.05–1.20 on updates to open slots).

use crate::aggregate::{self, AccsMut, AggKind};
use crate::hll::hash_value;
use crate::predicate::Predicate;
use crate::record::Value;
use crate::vocab::EventTime;

/// Most distinct `where` predicates one feature set can use (one bit each in the mask).
pub const MAX_PREDICATES: usize = 64;

/// One feature's update: which state it changes, from which field, under which predicate.
#[derive(Clone, Debug, PartialEq)]
struct Step {
    agg: AggKind,
    /// Offset into `Accumulators::words`, or into `Accumulators::distinct` for `distinct`.
    state: usize,
    /// Schema slot of the field read.
    slot: Option<usize>,
    /// Mask bits the record must have (0 = no predicate).
    needs: u64,
}

/// The compiled per-record update of a feature set.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct UpdatePlan {
    /// Distinct predicates; predicate `i` is bit `i` of the mask.
    predicates: Vec<Predicate>,
    /// `count` and `count_if` steps (no field read).
    counts: Vec<Step>,
    /// Every other aggregate with state (ratios keep none).
    fields: Vec<Step>,
}

impl UpdatePlan {
    /// Adds a feature's update. Errors when the set would need more than
    /// [`MAX_PREDICATES`] distinct predicates.
    pub fn push(
        &mut self,
        agg: AggKind,
        state: usize,
        slot: Option<usize>,
        filter: Option<&Predicate>,
    ) -> Result<(), String> {
        let needs = match filter {
            None => 0,
            Some(p) => 1 << self.predicate_bit(p)?,
        };
        let step = Step {
            agg,
            state,
            slot,
            needs,
        };
        match agg {
            AggKind::Count | AggKind::CountIf => self.counts.push(step),
            AggKind::Ratio => {}
            _ => self.fields.push(step),
        }
        Ok(())
    }

    fn predicate_bit(&mut self, p: &Predicate) -> Result<usize, String> {
        if let Some(i) = self.predicates.iter().position(|q| q == p) {
            return Ok(i);
        }
        if self.predicates.len() == MAX_PREDICATES {
            return Err(format!(
                "a job can use at most {MAX_PREDICATES} distinct `where` predicates; \
                 this one is number {}",
                MAX_PREDICATES + 1
            ));
        }
        self.predicates.push(p.clone());
        Ok(self.predicates.len() - 1)
    }

    /// Bit `i` set = the record passes predicate `i`.
    #[inline]
    fn mask(&self, values: &[Value]) -> u64 {
        let mut mask = 0;
        for (i, p) in self.predicates.iter().enumerate() {
            mask |= u64::from(p.matches(values)) << i;
        }
        mask
    }

    /// Folds one record (its field values and event time) into `accs`. Never allocates,
    /// except when a `distinct` feature's exact set grows.
    #[inline]
    pub fn update(&self, accs: AccsMut<'_>, values: &[Value], ts: EventTime) {
        let mask = self.mask(values);
        let AccsMut { words, distinct } = accs;
        for step in &self.counts {
            if let Some(n) = words.get_mut(step.state) {
                *n += u64::from(mask & step.needs == step.needs);
            }
        }
        for step in &self.fields {
            if mask & step.needs != step.needs {
                continue;
            }
            let Some(value) = step.slot.and_then(|slot| values.get(slot)) else {
                continue;
            };
            match (step.agg, value) {
                (AggKind::Distinct, value) => {
                    if let (Some(d), Some(h)) = (distinct.get_mut(step.state), hash_value(value)) {
                        d.insert(h);
                    }
                }
                // Non-finite numbers never pass the decoder; ignored like missing values.
                (kind, Value::Num(x)) if x.is_finite() => {
                    if let Some(w) = words.get_mut(step.state..) {
                        aggregate::update(kind, w, *x, ts);
                    }
                }
                _ => {}
            }
        }
    }
}
