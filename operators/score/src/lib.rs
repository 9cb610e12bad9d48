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
//! | 5 | [`control`] | the `CONTROL` file: pin/rollback, canary share, shadow |
//! | 6 | [`registry`] | `models/<name>/<version>/` + `CONTROL`: which versions to serve |
//! | 7 | [`inference_batch`] | a micro-batch's contiguous values and scores, to the thread and back |
//! | 8 | [`models`] | primary + shadow/canary versions, stable canary split by key |
//! | 9 | [`budget`] | one CPU budget: pinned inference threads vs Timely workers |
//! | 9a | [`config`] | the stage's settings, and each inference thread's (a leaf) |
//! | 10 | [`reload`] | load at start, hot reload of both versions between batches |
//! | 10a | `loader` | a new version loads and warms on its own thread, off the scoring path |
//! | 11 | [`inference_thread`] | one pinned inference thread per score instance |
//! | 12 | [`records`] | rows + scores → scored batches (columns) and dead letters |
//! | 13 | [`batcher`] | micro-batches, in-flight bound, buffer reuse (no Timely) |
//! | 14 | [`operator`] | the Timely operator: input, capabilities, wake-ups |
//!
//! Errors are one [`ScoreError`] enum; see `docs/MODEL_MANIFEST.md` for the model
//! directory format.

#![deny(missing_docs)]

pub mod batcher;
pub mod budget;
pub mod config;
pub mod control;
pub mod error;
pub mod inference_batch;
pub mod inference_thread;
mod loader;
pub mod manifest;
pub mod models;
pub mod operator;
pub mod preprocess;
pub mod records;
pub mod registry;
pub mod reload;
pub mod runtime;
pub mod session;

pub use error::{Result, ScoreError};
pub use manifest::ModelManifest;
pub use runtime::{init_onnx_runtime, onnx_environment};
pub use session::{BatchStats, ModelSession, SessionOptions};
