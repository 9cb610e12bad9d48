//! Weir's scoring stage: ONNX models scored on micro-batches of feature rows.
//!
//! Pipeline position: `... → window_features → **score** → kafka_sink`. This crate
//! holds everything the score operator needs below Timely:
//!
//! | step | module | what |
//! |------|--------|------|
//! | 1 | [`runtime`] | find and load `libonnxruntime.so` once per process |
//! | 2 | [`manifest`] | parse and check `manifest.json` |
//! | 3 | [`preprocess`] | defaults for missing values, scaling, into an `f32` buffer |
//! | 4 | [`session`] | validate model vs manifest vs job, warm up, score batches |
//! | 5 | [`secondary`] | the second version's role (shadow, canary and its share) |
//! | 6 | [`control`] | the `CONTROL` file: pin/rollback, canary share, shadow |
//! | 7 | [`registry`] | `models/<name>/<version>/` + `CONTROL`: which versions to serve |
//! | 7a | [`registry_mirror`] | a registry on S3 mirrored into a local cache, synced every poll |
//! | 7b | [`registry_sync`] | one sync: complete versions and `CONTROL`, swapped in atomically |
//! | 8 | [`inference_batch`] | a micro-batch's values in and scores out, to the thread and back |
//! | 9 | [`canary`] | the stable canary split by key, and the share a thread serves |
//! | 10 | [`counters`] | the scoring stage's counters (reloads, canary rows, busy time) |
//! | 11 | [`model_set`] | primary + shadow/canary versions, one batch split between them |
//! | 11a | [`bisect`] | a failed run split and retried: only rows failing alone get errors |
//! | 12 | [`budget`] | one CPU budget: pinned inference threads vs Timely workers |
//! | 13 | [`config`] | the stage's settings, and each inference thread's (a leaf) |
//! | 14 | [`reload`] | load at start, hot reload of both versions between batches |
//! | 14a | `follower` | one version the watcher keeps current: serving, failed, loading |
//! | 14b | `loader` | a new version loads and warms on its own thread, off the scoring path |
//! | 15 | [`inference_thread`] | one pinned inference thread per score instance |
//! | 16 | [`records`] | rows + scores → scored batches (columns) and dead letters |
//! | 17 | [`batcher`] | micro-batches, in-flight bound, buffer reuse (no Timely) |
//! | 18 | [`operator`] | the Timely operator: input, capabilities, wake-ups |
//!
//! Errors are one [`ScoreError`] enum; see `docs/MODEL_MANIFEST.md` for the model
//! directory format.

#![deny(missing_docs)]

pub mod batcher;
pub mod bisect;
pub mod budget;
pub mod canary;
pub mod config;
pub mod control;
pub mod counters;
pub mod drift;
pub mod error;
mod follower;
pub mod inference_batch;
pub mod inference_thread;
mod loader;
pub mod manifest;
pub mod model_set;
pub mod operator;
pub mod preprocess;
pub mod psi;
pub mod records;
pub mod registry;
pub mod registry_mirror;
pub mod registry_sync;
pub mod reload;
pub mod runtime;
pub mod secondary;
pub mod session;

pub use error::{Result, ScoreError};
pub use manifest::ModelManifest;
pub use runtime::{init_onnx_runtime, onnx_environment};
pub use session::{BatchStats, ModelSession, SessionOptions};
