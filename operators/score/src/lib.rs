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
//! | 5 | [`registry`] | `models/<name>/<version>/`, `CONTROL`: which version to serve |
//! | 6 | [`batch`] | a micro-batch's contiguous values and scores, to the thread and back |
//! | 7 | [`models`] | primary + shadow/canary versions, stable canary split by key |
//! | 8 | [`budget`] | one CPU budget: pinned inference threads vs Timely workers |
//! | 9 | [`pool`] | one pinned inference thread per score instance, hot reload |
//! | 10 | [`records`] | rows + scores → scored batches (columns) and dead letters |
//! | 11 | [`batcher`] | micro-batches, in-flight bound, buffer reuse (no Timely) |
//! | 12 | [`operator`] | the Timely operator: input, capabilities, wake-ups |
//!
//! Errors are one [`ScoreError`] enum; see `docs/MODEL_MANIFEST.md` for the model
//! directory format.

#![deny(missing_docs)]

pub mod batch;
pub mod batcher;
pub mod budget;
pub mod error;
pub mod manifest;
pub mod models;
pub mod operator;
pub mod pool;
pub mod preprocess;
pub mod records;
pub mod registry;
pub mod runtime;
pub mod session;

pub use error::{Result, ScoreError};
pub use manifest::ModelManifest;
pub use runtime::{init_onnx_runtime, onnx_environment};
pub use session::{BatchStats, ModelSession, SessionOptions};
