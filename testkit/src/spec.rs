//! [`FeatureSpec`] shorthands: `spec("x_sum", Sum, Some("x"), None)` is `sum(x)`, with a
//! `where` predicate in the last argument; [`over`] puts a spec on a named window, [`ratio`]
//! divides two features, and [`specs_toml`] reads `[[features]]` tables as a job file
//! writes them.

use std::collections::BTreeMap;

use weir_features::aggregate::AggKind;
use weir_features::feature::FeatureSpec;

/// Feature `name`: `agg` of `field`, over the records matching `filter`.
pub fn spec(name: &str, agg: AggKind, field: Option<&str>, filter: Option<&str>) -> FeatureSpec {
    FeatureSpec {
        name: name.to_owned(),
        agg,
        field: field.map(str::to_owned),
        filter: filter.map(str::to_owned),
        ..FeatureSpec::default()
    }
}

/// `spec` computed over the named window `window` instead of the job's primary one.
pub fn over(spec: FeatureSpec, window: &str) -> FeatureSpec {
    FeatureSpec {
        window: Some(window.to_owned()),
        ..spec
    }
}

/// Feature `name`: `numerator / denominator`.
pub fn ratio(name: &str, numerator: &str, denominator: &str) -> FeatureSpec {
    FeatureSpec {
        numerator: Some(numerator.to_owned()),
        denominator: Some(denominator.to_owned()),
        ..spec(name, AggKind::Ratio, None, None)
    }
}

/// The `[[features]]` tables of `text`, in order; panics (failing the test) on invalid TOML.
pub fn specs_toml(text: &str) -> Vec<FeatureSpec> {
    toml::from_str::<BTreeMap<String, Vec<FeatureSpec>>>(text)
        .unwrap_or_else(|e| panic!("test features: {e}"))
        .remove("features")
        .unwrap_or_default()
}
