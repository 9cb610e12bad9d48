//! Feature definitions (`[[features]]` in the job file) and their compiled form: for each
//! feature, which field it reads, which aggregate it computes and which records it counts.
//! The order of the features is the order of the model's input vector.

use serde::Deserialize;
use smallvec::SmallVec;

use crate::aggregate::{AggKind, Moments};
use crate::error::{FeatureError, Result};
use crate::predicate::Predicate;
use crate::record::Value;
use crate::schema::{FieldType, RecordSchema};

/// One feature as written in the job file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSpec {
    /// Name; must match the model manifest's feature at the same index.
    pub name: String,
    /// Aggregate to compute.
    pub agg: AggKind,
    /// Field the aggregate reads (required for sum/mean/min/max).
    #[serde(default)]
    pub field: Option<String>,
    /// Only records matching this predicate count (required for count_if), e.g. `type == 'click'`.
    #[serde(default, rename = "where")]
    pub filter: Option<String>,
}

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
}

/// Accumulators of all features of one (key, window); inline for up to 8 features.
pub type Accumulators = SmallVec<[Moments; 8]>;

/// All features of a job, in model input order.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureSet {
    features: Vec<CompiledFeature>,
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
        let mut features = Vec::with_capacity(specs.len());
        for spec in specs {
            let fail = |message: String| FeatureError::Feature {
                feature: spec.name.clone(),
                message,
            };
            if features
                .iter()
                .any(|f: &CompiledFeature| f.name == spec.name)
            {
                return Err(fail("the name is used by two features".to_owned()));
            }
            let slot = match (&spec.field, spec.agg.needs_field()) {
                (None, true) => {
                    return Err(fail(format!("{:?} needs `field = \"...\"`", spec.agg)))
                }
                (Some(field), true) => {
                    let slot = schema.index_of(field).ok_or_else(|| {
                        fail(format!(
                            "field `{field}` is not declared in [source.fields]"
                        ))
                    })?;
                    if !matches!(
                        schema.fields()[slot].ty,
                        FieldType::F64 | FieldType::I64 | FieldType::TimestampMs
                    ) {
                        return Err(fail(format!(
                            "{:?} needs a numeric field, `{field}` is not",
                            spec.agg
                        )));
                    }
                    Some(slot)
                }
                (Some(field), false) => {
                    return Err(fail(format!(
                        "{:?} takes no field (got `{field}`); use `where` to filter",
                        spec.agg
                    )))
                }
                (None, false) => None,
            };
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
            features.push(CompiledFeature {
                name: spec.name.clone(),
                agg: spec.agg,
                slot,
                filter,
            });
        }
        Ok(FeatureSet { features })
    }

    /// The compiled features in output order.
    pub fn features(&self) -> &[CompiledFeature] {
        &self.features
    }

    /// Feature names in output order.
    pub fn names(&self) -> Vec<String> {
        self.features.iter().map(|f| f.name.clone()).collect()
    }

    /// Fresh, empty accumulators for one (key, window).
    pub fn empty(&self) -> Accumulators {
        self.features.iter().map(|_| Moments::default()).collect()
    }

    /// Folds one record's values into the accumulators.
    #[inline]
    pub fn update(&self, accs: &mut Accumulators, values: &[Value]) {
        for (feature, acc) in self.features.iter().zip(accs.iter_mut()) {
            if let Some(filter) = &feature.filter {
                if !filter.matches(values) {
                    continue;
                }
            }
            match feature.slot {
                None => acc.add(0.0),
                Some(slot) => {
                    if let Some(Value::Num(x)) = values.get(slot) {
                        acc.add(*x);
                    }
                }
            }
        }
    }

    /// Writes the feature values (NaN = missing) into `out`, replacing its contents.
    pub fn values(&self, accs: &Accumulators, out: &mut Vec<f64>) {
        out.clear();
        out.extend(
            self.features
                .iter()
                .zip(accs.iter())
                .map(|(f, acc)| acc.value(f.agg)),
        );
    }
}
