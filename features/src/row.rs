//! Feature rows: what the window operator emits per (key, window) firing and the scoring
//! stage consumes. Values follow the job's feature order (= the model's input order).

use serde::{Deserialize, Serialize};

use crate::vocab::{EventTime, Key, KeyGroup, SourcePosition};

/// One fired window of one key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureRow {
    /// The key.
    pub key: Key,
    /// Its key group.
    pub key_group: KeyGroup,
    /// Window start (inclusive).
    pub window_start: EventTime,
    /// Window end (exclusive).
    pub window_end: EventTime,
    /// 0 for the first firing; +1 for each re-emission caused by an allowed-late record.
    pub revision: u32,
    /// Feature values in model input order; NaN means missing.
    pub values: Vec<f64>,
    /// Number of records aggregated.
    pub records: u64,
    /// First record's source position (offset range start).
    pub first: SourcePosition,
    /// Last record's source position (offset range end).
    pub last: SourcePosition,
    /// Wall-clock time the window fired (Unix ns), set by the operator; 0 in pure code.
    pub fired_at_ns: u64,
}
