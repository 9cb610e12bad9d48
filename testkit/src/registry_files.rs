//! A model registry version's objects for the object-store registry tests: a fixture model
//! directory's files as `<name>/<version>/…` keys, its manifest renamed to that model and
//! version, in the order an uploader writes them (`model.onnx`, then `manifest.json`, which
//! makes the version complete).

use std::io;
use std::path::Path;

/// `fixture`'s `model.onnx` and `manifest.json` (its `name` and `version` replaced) as the
/// objects `<name>/<version>/model.onnx` and `<name>/<version>/manifest.json`, in that order.
pub fn version_objects(
    fixture: &Path,
    name: &str,
    version: &str,
) -> io::Result<[(String, Vec<u8>); 2]> {
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture.join("manifest.json"))?)?;
    manifest["name"] = name.into();
    manifest["version"] = version.into();
    Ok([
        (
            format!("{name}/{version}/model.onnx"),
            std::fs::read(fixture.join("model.onnx"))?,
        ),
        (
            format!("{name}/{version}/manifest.json"),
            serde_json::to_vec_pretty(&manifest)?,
        ),
    ])
}
