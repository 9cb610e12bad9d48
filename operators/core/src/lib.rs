//! # weir-operators
//!
//! Weir's Timely Dataflow operators between the edges: where each stage's instances run
//! ([`placement`]), the keyed window-feature operator ([`window_features`]) and the job's
//! shared counters ([`metrics`]) and served model versions ([`serving`]). Kafka (`weir-kafka`) and ONNX scoring (`weir-score`) live
//! in their own crates so this one builds and tests without native dependencies.

pub mod backpressure;
pub mod clock;
pub mod committer;
mod direct_file;
pub mod epoch_sink;
pub mod epochs;
pub mod error;
pub mod file_claims;
pub mod file_lane;
pub mod file_ranges;
pub mod file_sink;
pub mod file_source;
mod file_writer;
pub mod input_file;
pub mod metrics;
pub mod placement;
mod range_file;
pub mod record_batches;
pub mod serving;
pub mod snapshot_restore;
pub mod snapshot_writer;
pub mod source;
pub mod source_alignment;
pub mod source_operator;
mod source_pace;
pub mod window_features;
pub mod window_instance;

pub use placement::{Placement, StageParallelism};
pub use window_features::{WindowConfig, WindowFeatures, WindowStreams};
