//! The clickstream job as `jobs/clickstream.toml` declares it: its input schema and its
//! `[[features]]`, read from the file, so tests and benchmarks that feed the job's shape use
//! the job's own definition instead of a copy of it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use weir_features::feature::FeatureSpec;
use weir_features::schema::{FieldDecl, FieldType, RecordSchema};

/// The parts of the job file the kit reads (everything else is ignored).
#[derive(Deserialize)]
struct Job {
    source: Source,
    features: Vec<FeatureSpec>,
}

#[derive(Deserialize)]
struct Source {
    key: String,
    event_time: String,
    fields: BTreeMap<String, FieldDecl>,
}

/// `jobs/clickstream.toml`, absolute.
pub fn job_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../jobs/clickstream.toml")
}

fn job() -> Job {
    let path = job_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The job's `[source.fields]`.
pub fn fields() -> BTreeMap<String, FieldDecl> {
    job().source.fields
}

/// The job's input schema (`user`, `ts`, `type`, `dwell_ms`, `amount`).
pub fn schema() -> RecordSchema {
    let source = job().source;
    RecordSchema::new(&source.fields, &source.key, &source.event_time)
        .unwrap_or_else(|e| panic!("clickstream schema: {e}"))
}

/// The job's `[[features]]`, in order.
pub fn features() -> Vec<FeatureSpec> {
    job().features
}

/// The names of the job's features, in order.
pub fn feature_names() -> Vec<String> {
    features().into_iter().map(|f| f.name).collect()
}

/// The body of the job's `[source.fields]` table as TOML lines, e.g. `user = "string"` and
/// `amount = { type = "f64", required = false }`, for job files written by tests.
pub fn fields_toml() -> String {
    fields()
        .iter()
        .map(|(name, decl)| match decl {
            FieldDecl::Type(ty) => format!("{name} = \"{}\"\n", type_name(*ty)),
            FieldDecl::Full { ty, required } => format!(
                "{name} = {{ type = \"{}\", required = {required} }}\n",
                type_name(*ty)
            ),
        })
        .collect()
}

fn type_name(ty: FieldType) -> &'static str {
    match ty {
        FieldType::String => "string",
        FieldType::F64 => "f64",
        FieldType::I64 => "i64",
        FieldType::Bool => "bool",
        FieldType::TimestampMs => "timestamp_ms",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_toml_declares_the_job_fields() {
        let text = format!("[fields]\n{}", fields_toml());
        let parsed: BTreeMap<String, BTreeMap<String, FieldDecl>> =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(parsed.get("fields"), Some(&fields()));
    }

    #[test]
    fn schema_and_features_compile_together() {
        let specs = features();
        let compiled = weir_features::feature::FeatureSet::compile(&specs, &schema());
        let names = compiled.unwrap_or_else(|e| panic!("{e}")).names().to_vec();
        assert_eq!(names, feature_names());
    }
}
