//! The clickstream job as `jobs/clickstream.toml` declares it: its input schema and its
//! `[[features]]`, read from the file, so tests and benchmarks that feed the job's shape use
//! the job's own definition instead of a copy of it; and the job's text, ready to be written
//! to another directory or pointed at other topics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// The workspace's root directory (the kit's parent), absolute and without `..`.
pub fn workspace_dir() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.parent().unwrap_or(kit).to_path_buf()
}

/// `jobs/clickstream.toml`, absolute (so paths the job resolves against its directory are
/// `<workspace>/jobs/...`, as a test in `jobs/` spells them).
pub fn job_path() -> PathBuf {
    workspace_dir().join("jobs/clickstream.toml")
}

/// The job file's `[model] path`, as written there.
const MODEL_PATH: &str = "path = \"../tests/fixtures/model\"";

/// The text of `jobs/clickstream.toml` with its model path made absolute, so the job runs the
/// same from a file written anywhere (a test's scratch directory).
pub fn job_text() -> String {
    let path = job_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let model = workspace_dir().join("tests/fixtures/model");
    replace_present(
        &text,
        MODEL_PATH,
        &format!("path = \"{}\"", model.display()),
    )
}

/// The Kafka topics a test runs the job on.
#[derive(Clone, Debug)]
pub struct Topics<'a> {
    /// The input topic (the job's `clicks`).
    pub input: &'a str,
    /// The score topic (the job's `scores`).
    pub scores: &'a str,
    /// The dead-letter topic (the job's `clicks-dlq`).
    pub dead_letters: &'a str,
}

/// [`job_text`] reading and writing `topics` on the broker(s) `brokers` instead of the job's
/// `127.0.0.1:9092`, `clicks`, `scores` and `clicks-dlq`.
pub fn kafka_job_text(brokers: &str, topics: &Topics) -> String {
    let replacements = [
        ("\"127.0.0.1:9092\"", format!("\"{brokers}\"")),
        (
            "topic = \"clicks\"",
            format!("topic = \"{}\"", topics.input),
        ),
        (
            "topic = \"scores\"",
            format!("topic = \"{}\"", topics.scores),
        ),
        (
            "dead_letter_topic = \"clicks-dlq\"",
            format!("dead_letter_topic = \"{}\"", topics.dead_letters),
        ),
    ];
    replacements.iter().fold(job_text(), |text, (from, to)| {
        replace_present(&text, from, to)
    })
}

/// `text` with every `from` replaced by `to`; panics (failing the test) if `from` is not in it,
/// which means the job file changed under the kit.
fn replace_present(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "{} no longer contains `{from}`",
        job_path().display()
    );
    text.replace(from, to)
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
    ty.name()
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
    fn kafka_job_text_names_the_topics_and_an_absolute_model() {
        let topics = Topics {
            input: "in-1",
            scores: "out-1",
            dead_letters: "dlq-1",
        };
        let text = kafka_job_text("b:1", &topics);
        let model = workspace_dir().join("tests/fixtures/model");
        let lines: Vec<&str> = text.lines().collect();
        let model_line = format!("path = \"{}\"", model.display());
        let wanted = [
            "\"bootstrap.servers\" = \"b:1\"",
            "topic = \"in-1\"",
            "topic = \"out-1\"",
            "dead_letter_topic = \"dlq-1\"",
            &model_line,
        ];
        let missing: Vec<&&str> = wanted.iter().filter(|l| !lines.contains(l)).collect();
        assert!(missing.is_empty(), "{missing:?} not in:\n{text}");
        let replaced = [
            "topic = \"clicks\"",
            "clicks-dlq",
            "127.0.0.1:9092",
            "../tests",
        ];
        let left: Vec<&str> = replaced.into_iter().filter(|r| text.contains(r)).collect();
        assert!(left.is_empty(), "{left:?} still in:\n{text}");
    }

    #[test]
    fn schema_and_features_compile_together() {
        let specs = features();
        let compiled = weir_features::feature::FeatureSet::compile(&specs, &schema());
        let names = compiled.unwrap_or_else(|e| panic!("{e}")).names().to_vec();
        assert_eq!(names, feature_names());
    }
}
