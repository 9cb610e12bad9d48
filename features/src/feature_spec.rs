//! One feature as the job file writes it (`[[features]]`), before it is compiled against the
//! record schema ([`crate::feature`]) or its ratio inputs are resolved ([`crate::ratio`]). A
//! leaf: both of those read it.

use serde::Deserialize;

use crate::aggregate::AggKind;

/// One feature as written in the job file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSpec {
    /// Name; must match the model manifest's feature at the same index.
    pub name: String,
    /// Aggregate to compute.
    pub agg: AggKind,
    /// Field the aggregate reads (required for every kind but count, count_if and ratio).
    #[serde(default)]
    pub field: Option<String>,
    /// Only records matching this predicate count (required for count_if), e.g. `type == 'click'`.
    #[serde(default, rename = "where")]
    pub filter: Option<String>,
    /// Name of the window the feature is computed over; `None` = the job's default window.
    #[serde(default)]
    pub window: Option<String>,
    /// For `ratio`: name of the feature divided.
    #[serde(default)]
    pub numerator: Option<String>,
    /// For `ratio`: name of the feature divided by.
    #[serde(default)]
    pub denominator: Option<String>,
}
