//! Decoded records as they travel from the source to the window operator: key, key group,
//! event time, typed field values and the source position. Fixed-size for ordinary inputs
//! (inline key, up to eight inline values), so moving records in batches does not allocate.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::vocab::{EventTime, Key, KeyGroup, SourcePosition};

/// One decoded field value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// Absent or null (only for optional fields).
    Missing,
    /// A finite number (f64 and i64 fields).
    Num(f64),
    /// A string field (inline up to 24 bytes, so short strings do not allocate).
    Str(Key),
    /// A boolean field.
    Bool(bool),
}

impl Value {
    /// The numeric value, if this is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Num(x) => Some(*x),
            _ => None,
        }
    }
}

/// Field values of a record, in schema slot order.
pub type Values = SmallVec<[Value; 8]>;

/// A decoded, keyed, timestamped input record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The grouping key.
    pub key: Key,
    /// Key group of `key` (routing and state partitioning).
    pub key_group: KeyGroup,
    /// Event time.
    pub ts: EventTime,
    /// All declared fields, in schema order (the key and time fields included).
    pub values: Values,
    /// Where the record was read.
    pub position: SourcePosition,
    /// Wall-clock time the source read it (Unix ms); 0 when unknown (pure code).
    pub ingested_ms: u64,
}
