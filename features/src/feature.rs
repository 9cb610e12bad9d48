//! Compiled feature definitions (the job file's `[[features]]`, [`FeatureSpec`]): for each
//! feature, which field it reads, which aggregate it computes over which window, which
//! records it counts, and where its state lives in a (key, window)'s [`Accumulators`].
//! The order of the features is the order of the model's input vector.

use crate::aggregate::{self, AggKind, Words};
pub use crate::aggregate::{AccsMut, AccsRef, Accumulators};
use crate::error::{FeatureError, Result};
pub use crate::feature_spec::FeatureSpec;
use crate::hll::Distinct;
use crate::predicate::Predicate;
use crate::ratio;
use crate::record::Value;
use crate::row::RowValues;
use crate::schema::RecordSchema;
use crate::update_plan::UpdatePlan;
use crate::vocab::EventTime;
use thin_vec::ThinVec;

/// A feature compiled against the record schema.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledFeature {
    /// Feature name.
    pub name: String,
    /// Aggregate.
    pub agg: AggKind,
    /// Slot of the field read, if any.
    pub slot: Option<usize>,
    /// Record filter, if any.
    pub filter: Option<Predicate>,
    /// Window name (`None` = the job's default window).
    pub window: Option<String>,
    /// For `ratio`: indices (in this set) of the numerator and denominator features.
    pub inputs: Option<(usize, usize)>,
    /// Offset of the state: into `Accumulators::words`, or into `Accumulators::distinct`
    /// for `distinct` (none for a `count` without `where`, see
    /// [`CompiledFeature::reads_record_count`]).
    state: usize,
}

impl CompiledFeature {
    /// A `count` without `where` keeps no state: its value is the record count that every
    /// slot keeps anyway (run M: 8 bytes less per open (key, window)), exact up to 2^43 − 1
    /// records in one (key, window), where it stays.
    pub fn reads_record_count(&self) -> bool {
        self.agg == AggKind::Count && self.filter.is_none()
    }
}

/// All features of a job, in model input order.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureSet {
    features: Vec<CompiledFeature>,
    /// Empty numeric state of one (key, window); cloned by [`FeatureSet::empty`].
    template: Vec<u64>,
    /// Number of `distinct` features.
    distinct: usize,
    /// Ratio features, each after the ratios it reads.
    ratio_order: Vec<usize>,
    /// The per-record update of these features.
    plan: UpdatePlan,
}

impl FeatureSet {
    /// Compiles and validates feature definitions against `schema`.
    pub fn compile(specs: &[FeatureSpec], schema: &RecordSchema) -> Result<FeatureSet> {
        if specs.is_empty() {
            return Err(FeatureError::Feature {
                feature: String::new(),
                message: "the job defines no [[features]]".to_owned(),
            });
        }
        let (inputs, ratio_order) = ratio::resolve(specs)?;
        let mut set = FeatureSet {
            features: Vec::with_capacity(specs.len()),
            template: Vec::new(),
            distinct: 0,
            ratio_order,
            plan: UpdatePlan::default(),
        };
        for (spec, inputs) in specs.iter().zip(inputs) {
            let fail = |message: String| FeatureError::Feature {
                feature: spec.name.clone(),
                message,
            };
            if set.features.iter().any(|f| f.name == spec.name) {
                return Err(fail("the name is used by two features".to_owned()));
            }
            let slot = field_slot(spec, schema).map_err(fail)?;
            if spec.agg == AggKind::CountIf && spec.filter.is_none() {
                return Err(fail(
                    "count_if needs `where = \"field == 'value'\"`".to_owned(),
                ));
            }
            let filter = spec
                .filter
                .as_deref()
                .map(|text| Predicate::parse(text, schema))
                .transpose()
                .map_err(fail)?;
            let mut feature = CompiledFeature {
                name: spec.name.clone(),
                agg: spec.agg,
                slot,
                filter,
                window: spec.window.clone(),
                inputs,
                state: 0,
            };
            if feature.reads_record_count() {
                set.features.push(feature);
                continue;
            }
            feature.state = if spec.agg == AggKind::Distinct {
                set.distinct += 1;
                set.distinct - 1
            } else {
                let offset = set.template.len();
                spec.agg.push_empty(&mut set.template);
                offset
            };
            set.plan
                .push(spec.agg, feature.state, slot, feature.filter.as_ref())
                .map_err(fail)?;
            set.features.push(feature);
        }
        Ok(set)
    }

    /// The compiled features in output order.
    pub fn features(&self) -> &[CompiledFeature] {
        &self.features
    }

    /// Feature names in output order.
    pub fn names(&self) -> Vec<String> {
        self.features.iter().map(|f| f.name.clone()).collect()
    }

    /// Fresh, empty accumulators for one (key, window): one allocation of the numeric
    /// state's words, and one more when the job has `distinct` features.
    pub fn empty(&self) -> Accumulators {
        Accumulators {
            words: Words::from(self.empty_words()),
            distinct: self.empty_distinct(),
            records: 0,
        }
    }

    /// Folds one record (its field values and event time) into `accs` and counts it.
    pub fn add(&self, accs: &mut Accumulators, values: &[Value], ts: EventTime) {
        self.update(accs.view_mut(), values, ts);
        accs.records += 1;
    }

    /// Merges `other` into `into`, records counted (see [`FeatureSet::merge`]).
    pub fn absorb(&self, into: &mut Accumulators, other: &Accumulators) {
        self.merge(into.view_mut(), other.view());
        into.records += other.records;
    }

    /// The numeric state of a (key, window) with no records yet: what a new slot's words
    /// start as, in a slot of its own or in a pane table's column.
    pub fn empty_words(&self) -> &[u64] {
        &self.template
    }

    /// The distinct states of a (key, window) with no records yet (nothing allocated for a
    /// job without `distinct` features).
    pub fn empty_distinct(&self) -> ThinVec<Distinct> {
        (0..self.distinct).map(|_| Distinct::default()).collect()
    }

    /// Folds one record (its field values and event time) into the accumulators. Never
    /// allocates, except when a `distinct` feature's exact set grows. The caller counts the
    /// record ([`AccsRef::records`]).
    #[inline]
    pub(crate) fn update(&self, accs: AccsMut<'_>, values: &[Value], ts: EventTime) {
        self.plan.update(accs, values, ts);
    }

    /// Merges `other` into `into` (both from [`FeatureSet::empty`] of this set): afterwards
    /// `into` describes the records of `into` followed by those of `other`. "Followed by"
    /// matters only for ties of `first`/`last` and the rounding of sums: pass the
    /// earlier-arriving state as `into`. The caller adds the record counts.
    pub(crate) fn merge(&self, into: AccsMut<'_>, other: AccsRef<'_>) {
        for feature in &self.features {
            if feature.reads_record_count() {
                continue;
            }
            if feature.agg == AggKind::Distinct {
                if let (Some(d), Some(o)) = (
                    into.distinct.get_mut(feature.state),
                    other.distinct.get(feature.state),
                ) {
                    d.merge(o);
                }
            } else if let (Some(w), Some(o)) = (
                into.words.get_mut(feature.state..),
                other.words.get(feature.state..),
            ) {
                aggregate::merge(feature.agg, w, o);
            }
        }
    }

    /// How many words a (key, window) of these features held in window-state snapshots
    /// before version 5, where each `count` without `where` kept a word of its own.
    pub(crate) fn words_before_format_5(&self) -> usize {
        self.features.iter().map(|f| f.agg.words()).sum()
    }

    /// A (key, window)'s words as window-state snapshots before version 5 held them, in
    /// today's layout: the words of each `count` without `where` dropped (the slot's record
    /// count holds the same number). `None` when `old` is not
    /// [`FeatureSet::words_before_format_5`] long.
    pub(crate) fn words_without_record_counts(&self, old: &[u64]) -> Option<Words> {
        if old.len() != self.words_before_format_5() {
            return None;
        }
        let mut words = Vec::with_capacity(self.template.len());
        let mut rest = old;
        for feature in &self.features {
            let (state, after) = rest.split_at(feature.agg.words());
            rest = after;
            if !feature.reads_record_count() {
                words.extend_from_slice(state);
            }
        }
        Some(Words::from(words))
    }

    /// Writes the feature values (NaN = missing) into `out`, replacing its contents.
    pub fn values(&self, accs: AccsRef<'_>, out: &mut RowValues) {
        out.clear();
        out.extend(self.features.iter().map(|f| {
            match f.agg {
                AggKind::Count if f.reads_record_count() => accs.records as f64,
                // A count's value, read here by the function `aggregate::value` reads it with:
                // a call less for each of a row's counts (run F's CPU ×0.98-0.99;
                // BENCHMARKS.md, F, fix 71).
                AggKind::Count | AggKind::CountIf => accs
                    .words
                    .get(f.state..)
                    .map_or(f64::NAN, |w| aggregate::count(w) as f64),
                AggKind::Distinct => accs.distinct.get(f.state).map_or(0.0, Distinct::count),
                kind => accs
                    .words
                    .get(f.state..)
                    .map_or(f64::NAN, |w| aggregate::value(kind, w)),
            }
        }));
        for &i in &self.ratio_order {
            let value = self.features[i]
                .inputs
                .map_or(f64::NAN, |(n, d)| ratio::divide(out[n], out[d]));
            out[i] = value;
        }
    }
}

/// The schema slot `spec` reads, checking that the field fits the aggregate.
fn field_slot(
    spec: &FeatureSpec,
    schema: &RecordSchema,
) -> std::result::Result<Option<usize>, String> {
    match (&spec.field, spec.agg.needs_field()) {
        (None, true) => Err(format!("{:?} needs `field = \"...\"`", spec.agg)),
        (Some(field), true) => {
            let slot = schema
                .index_of(field)
                .ok_or_else(|| format!("field `{field}` is not declared in [source.fields]"))?;
            let numeric = schema.fields()[slot].ty.is_numeric();
            if spec.agg.needs_numeric_field() && !numeric {
                return Err(format!(
                    "{:?} needs a numeric field, `{field}` is not",
                    spec.agg
                ));
            }
            Ok(Some(slot))
        }
        (Some(field), false) => Err(format!(
            "{:?} takes no field (got `{field}`); use `where` to filter",
            spec.agg
        )),
        (None, false) => Ok(None),
    }
}
