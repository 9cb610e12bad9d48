//! Finding and loading the ONNX Runtime library.

use std::path::Path;

use weir_score::runtime::{find_library, ORT_LIB_NAME};
use weir_score::{init_onnx_runtime, ScoreError};

/// Walking up from the crate directory finds `<repo>/.cache/onnxruntime/`; a second
/// call returns the first path even when asked for another one.
#[test]
fn init_finds_cached_library_and_is_idempotent() -> anyhow::Result<()> {
    let first = init_onnx_runtime(None)?;
    assert!(first.is_file(), "{}", first.display());
    assert!(
        first.ends_with(Path::new(".cache/onnxruntime").join(ORT_LIB_NAME))
            || std::env::var_os("WEIR_ORT_LIB").is_some()
    );
    let again = init_onnx_runtime(Some(Path::new("/nonexistent/libonnxruntime.so")))?;
    assert_eq!(first, again);
    // The environment is usable for raw sessions.
    weir_score::onnx_environment()?;
    Ok(())
}

#[test]
fn explicit_path_that_does_not_exist_is_an_error() {
    let err = find_library(Some(Path::new("/nonexistent/dir/libonnxruntime.so"))).err();
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("/nonexistent/dir/libonnxruntime.so"), "{msg}");
    assert!(msg.contains("does not exist"), "{msg}");
}

#[test]
fn explicit_directory_means_the_library_inside_it() -> anyhow::Result<()> {
    let found = find_library(None)?;
    let dir = found.parent().ok_or(anyhow::anyhow!("no parent"))?;
    assert_eq!(find_library(Some(dir))?, found);
    Ok(())
}

#[test]
fn not_found_message_lists_places_and_remedies() {
    let err = ScoreError::RuntimeNotFound {
        lib: ORT_LIB_NAME,
        searched: vec![
            "/a/.cache/onnxruntime/libonnxruntime.so".into(),
            "/.cache/onnxruntime/libonnxruntime.so".into(),
        ],
    };
    let msg = err.to_string();
    assert!(
        msg.contains("  - /a/.cache/onnxruntime/libonnxruntime.so\n  - /.cache"),
        "{msg}"
    );
    assert!(msg.contains("scripts/setup.sh"), "{msg}");
    assert!(msg.contains("WEIR_ORT_LIB"), "{msg}");
}
