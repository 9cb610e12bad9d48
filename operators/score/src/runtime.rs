//! Loading the ONNX Runtime shared library, once per process.
//!
//! First step of the scoring stage: before any model is loaded, [`init_onnx_runtime`]
//! finds `libonnxruntime.so` (Weir links it dynamically, so the binary and the runtime
//! can be upgraded apart), loads it and creates the one ONNX Runtime environment the
//! process may have. [`crate::ModelSession::load`] calls it with no explicit path, so a
//! job only calls it itself to pass a path from the command line.

use std::env;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;

use crate::error::{Result, ScoreError};

/// Environment variable that names the ONNX Runtime library to load.
pub const ORT_LIB_ENV: &str = "WEIR_ORT_LIB";

/// File name of the ONNX Runtime shared library on this platform.
#[cfg(target_os = "macos")]
pub const ORT_LIB_NAME: &str = "libonnxruntime.dylib";
/// File name of the ONNX Runtime shared library on this platform.
#[cfg(target_os = "windows")]
pub const ORT_LIB_NAME: &str = "onnxruntime.dll";
/// File name of the ONNX Runtime shared library on this platform.
#[cfg(not(any(target_os = "macos", target_os = "windows")))]
pub const ORT_LIB_NAME: &str = "libonnxruntime.so";

/// Where `scripts/setup.sh` puts the library, relative to the repository root.
const CACHE_DIR: [&str; 2] = [".cache", "onnxruntime"];

/// The loaded runtime: where it came from and the process-wide environment.
struct Runtime {
    path: PathBuf,
    env: Environment,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
/// Serialises first-time initialisation (`OnceLock::get_or_try_init` is unstable).
static INIT: Mutex<()> = Mutex::new(());

/// Loads ONNX Runtime and creates the process-wide environment; returns the library path.
///
/// The library is looked for in this order, and the first hit wins:
/// 1. `explicit` (a file, or a directory holding [`ORT_LIB_NAME`]);
/// 2. the [`ORT_LIB_ENV`] (`WEIR_ORT_LIB`) environment variable, same forms;
/// 3. `.cache/onnxruntime/<lib>` in the directory of the running executable and each of
///    its ancestors, then in the current directory and each of its ancestors.
///
/// A path given by 1 or 2 that does not exist is an error (it is never silently skipped).
///
/// Idempotent: after the first success every call returns the first path, whatever
/// `explicit` says (ONNX Runtime cannot be unloaded or loaded twice in one process).
/// A failed call leaves nothing behind, so it can be retried with another path.
pub fn init_onnx_runtime(explicit: Option<&Path>) -> Result<PathBuf> {
    runtime(explicit).map(|rt| rt.path.clone())
}

/// The process-wide ONNX Runtime environment, initialising it with the default search
/// of [`init_onnx_runtime`] if nothing has initialised it yet.
///
/// Use it to build raw `ort` sessions (e.g. a benchmark baseline): `ort` allows only one
/// environment per process, so code must not call `ort::init()` itself.
pub fn onnx_environment() -> Result<Environment> {
    runtime(None).map(|rt| rt.env.clone())
}

fn runtime(explicit: Option<&Path>) -> Result<&'static Runtime> {
    if let Some(rt) = RUNTIME.get() {
        warn_if_different(rt, explicit);
        return Ok(rt);
    }
    let _guard = INIT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(rt) = RUNTIME.get() {
        warn_if_different(rt, explicit);
        return Ok(rt);
    }
    let path = find_library(explicit)?;
    let builder = ort::init_from(&path).map_err(|source| ScoreError::RuntimeLoad {
        path: path.clone(),
        source,
    })?;
    let env = builder
        .with_name("weir")
        .with_telemetry(false)
        .build()
        .map_err(|source| ScoreError::Inference {
            context: format!("creating the environment from {}", path.display()),
            source,
        })?;
    tracing::info!(path = %path.display(), "loaded ONNX Runtime");
    Ok(RUNTIME.get_or_init(|| Runtime { path, env }))
}

fn warn_if_different(rt: &Runtime, explicit: Option<&Path>) {
    if let Some(asked) = explicit {
        if resolve(asked) != rt.path {
            tracing::warn!(
                asked = %asked.display(),
                loaded = %rt.path.display(),
                "ONNX Runtime is already loaded from another path; keeping it"
            );
        }
    }
}

/// A directory means "the library inside it".
fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(ORT_LIB_NAME)
    } else {
        path.to_path_buf()
    }
}

/// Applies the search order of [`init_onnx_runtime`] without loading anything.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return existing(resolve(path), "the explicit --ort-lib path");
    }
    if let Some(value) = env::var_os(ORT_LIB_ENV).filter(|v| !v.is_empty()) {
        return existing(
            resolve(Path::new(&value)),
            "the WEIR_ORT_LIB environment variable",
        );
    }
    let mut searched = Vec::new();
    let exe_dir = env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let cwd = env::current_dir().ok();
    for start in exe_dir.iter().chain(cwd.iter()) {
        for dir in start.ancestors() {
            let candidate = CACHE_DIR
                .iter()
                .fold(dir.to_path_buf(), |p, part| p.join(part))
                .join(ORT_LIB_NAME);
            if candidate.is_file() {
                return Ok(candidate);
            }
            if !searched.contains(&candidate) {
                searched.push(candidate);
            }
        }
    }
    Err(ScoreError::RuntimeNotFound {
        lib: ORT_LIB_NAME,
        searched,
    })
}

fn existing(path: PathBuf, origin: &'static str) -> Result<PathBuf> {
    if path.is_file() {
        // Report (and load) an absolute path even when given a relative one.
        Ok(std::path::absolute(&path).unwrap_or(path))
    } else {
        Err(ScoreError::RuntimePathMissing { origin, path })
    }
}
