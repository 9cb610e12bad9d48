//! Parsing and self-validation of `manifest.json` (no ONNX Runtime needed).

mod common;

use std::path::Path;

use weir_score::manifest::ModelManifest;

const GOOD: &str = r#"{
  "format_version": 1, "name": "m", "version": "1",
  "input": {"name": "input", "type": "float32"},
  "output": {"name": "probabilities", "type": "float32", "column": 1},
  "features": [
    {"name": "a", "type": "float32", "default": 0.0, "scale": null},
    {"name": "b", "type": "float32", "default": 1.5, "scale": {"mean": 2.0, "std": 0.5}}
  ],
  "baseline": {"bin_edges": [0.0, 0.5, 1.0], "counts": [3, 4]}
}"#;

fn parse(json: &str) -> Result<ModelManifest, String> {
    ModelManifest::parse(json, Path::new("m/manifest.json")).map_err(|e| e.to_string())
}

fn err_of(json: &str) -> String {
    match parse(json) {
        Ok(m) => panic!("should fail: {m:?}"),
        Err(e) => e,
    }
}

#[test]
fn good_manifest_parses() -> Result<(), String> {
    let m = parse(GOOD)?;
    assert_eq!(m.feature_names().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(m.output.column, 1);
    assert!(m.trained.is_none());
    Ok(())
}

#[test]
fn committed_fixture_parses() -> anyhow::Result<()> {
    let m = ModelManifest::load(&common::fixture("logreg"))?;
    assert_eq!(m.name, "purchase_propensity");
    assert_eq!(m.trained.map(|t| t.seed), Some(42));
    Ok(())
}

#[test]
fn unknown_field_is_rejected_with_its_name() {
    let msg = err_of(&GOOD.replace("\"version\": \"1\"", "\"version\": \"1\", \"verison\": 2"));
    assert!(msg.contains("unknown field `verison`"), "{msg}");
    assert!(msg.contains("m/manifest.json"), "{msg}");
}

#[test]
fn newer_format_version_says_so() {
    let msg = err_of(&GOOD.replace("\"format_version\": 1", "\"format_version\": 2, \"new\": 1"));
    assert!(msg.contains("format_version 2 is not supported"), "{msg}");
}

#[test]
fn duplicate_feature_names_are_rejected() {
    let msg = err_of(&GOOD.replace("\"name\": \"b\"", "\"name\": \"a\""));
    assert!(
        msg.contains("feature `a` is listed twice (features[0] and features[1])"),
        "{msg}"
    );
}

#[test]
fn baseline_edges_must_be_sorted() {
    let msg = err_of(&GOOD.replace("[0.0, 0.5, 1.0]", "[0.0, 1.0, 0.5]"));
    assert!(msg.contains("strictly increasing"), "{msg}");
}

#[test]
fn baseline_counts_must_match_bins() {
    let msg = err_of(&GOOD.replace("[3, 4]", "[3, 4, 5]"));
    assert!(
        msg.contains("baseline.counts has 3 entries but baseline.bin_edges has 3"),
        "{msg}"
    );
}

#[test]
fn scale_std_must_be_positive() {
    let msg = err_of(&GOOD.replace("\"std\": 0.5", "\"std\": 0.0"));
    assert!(msg.contains("feature `b` has scale"), "{msg}");
}

#[test]
fn unknown_element_type_is_rejected() {
    let msg = err_of(&GOOD.replace(
        "{\"name\": \"input\", \"type\": \"float32\"}",
        "{\"name\": \"input\", \"type\": \"float64\"}",
    ));
    assert!(msg.contains("unknown variant `float64`"), "{msg}");
}

#[test]
fn job_feature_check_reports_every_problem() -> Result<(), String> {
    let m = parse(GOOD)?;
    let path = Path::new("m/manifest.json");
    assert!(m
        .check_job_features(path, &["a".into(), "b".into()])
        .is_ok());
    let msg = m
        .check_job_features(path, &["b".into(), "a".into()])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains(
            "feature `a` is at input index 0 in manifest.json but the job computes it at index 1"
        ),
        "{msg}"
    );
    assert!(
        msg.contains(
            "feature `b` is at input index 1 in manifest.json but the job computes it at index 0"
        ),
        "{msg}"
    );
    Ok(())
}
