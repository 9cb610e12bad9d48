//! # weir-features
//!
//! The pure-Rust core of Weir's feature engine (no Timely, no Kafka, no ONNX): the shared
//! vocabulary of the pipeline, the input schema and its JSON decoder, dead letters, window
//! assignment, mergeable aggregates, keyed window state, and event-time watermarks.
//!
//! Pipeline position: the Kafka source decodes with [`decode`], tracks [`watermark`]s per
//! partition; the window operator applies records to [`window_state::KeyedWindows`] and emits
//! [`row::FeatureRow`]s; bad records become [`dead_letter::DeadLetter`]s.

pub mod aggregate;
mod closed_windows;
pub mod dead_letter;
pub mod decode;
pub mod duration_ms;
pub mod encode;
pub mod error;
pub mod feature;
pub mod feature_spec;
mod field_value;
pub mod hll;
pub mod job_features;
mod json_scan;
#[cfg(test)]
mod json_scan_agreement;
pub mod key_activity;
mod key_table;
pub mod keyed_features;
pub mod over_range;
pub mod ownership;
mod pane_table;
mod panes;
pub mod predicate;
pub mod ratio;
pub mod record;
pub mod row;
pub mod schedule;
pub mod schema;
pub mod score_json;
pub mod scored;
mod session_list;
mod session_timers;
mod sessions;
mod slot;
mod snapshot_row;
pub mod state_shards;
#[cfg(test)]
mod test_fixtures;
pub mod timestamp;
mod update_plan;
pub mod vocab;
pub mod watermark;
pub mod window;
pub mod window_state;

pub use error::{FeatureError, Result};
