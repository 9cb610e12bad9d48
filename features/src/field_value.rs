//! A JSON value as the value of a record field of a declared type ([`FieldType`]): the one
//! place both paths of the JSON decoder ([`crate::decode`]'s serde visitor and its fast path,
//! [`crate::json_scan`]) type a value, so they cannot disagree. A value a field's type does
//! not take is a [`Refusal`]; the serde path turns it into the dead letter's reason and
//! message, the fast path hands the record to the serde path.

use crate::record::Value;
use crate::schema::FieldType;
use crate::timestamp::{self, JsonNumber, TimestampError};
use crate::vocab::{EventTime, Key};

/// Largest integer magnitude an f64 holds exactly (2^53): the range of i64 and timestamp fields.
const MAX_EXACT_INT: u64 = 1 << 53;

/// Why a JSON value is not a value of its field's declared type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Refusal {
    /// A JSON type the field's type does not take (the JSON type's name).
    Wrong(&'static str),
    /// A number that is not finite.
    NonFinite(f64),
    /// An i64 beyond ±2^53.
    OutOfRange(f64),
    /// Not a timestamp of the field's format.
    Timestamp(TimestampError),
}

/// The value a JSON number gives a field of type `ty`.
pub(crate) fn number_value(ty: FieldType, n: JsonNumber) -> Result<Value, Refusal> {
    let x = match n {
        JsonNumber::I64(v) => v as f64,
        JsonNumber::U64(v) => v as f64,
        JsonNumber::F64(x) => x,
    };
    if !x.is_finite() {
        return Err(Refusal::NonFinite(x));
    }
    let timestamp = |parsed: Result<EventTime, TimestampError>| {
        parsed
            .map(|ms| Value::Num(ms as f64))
            .map_err(Refusal::Timestamp)
    };
    match ty {
        FieldType::F64 => Ok(Value::Num(x)),
        // (An integer literal has no fraction: `fract` is a libm call per value.)
        FieldType::I64 if matches!(n, JsonNumber::F64(_)) && x.fract() != 0.0 => {
            Err(Refusal::Wrong("a fractional number"))
        }
        FieldType::I64 if exceeds_exact(n) => Err(Refusal::OutOfRange(x)),
        FieldType::I64 => Ok(Value::Num(x)),
        FieldType::TimestampMs => timestamp(timestamp::from_epoch_millis(n)),
        FieldType::TimestampS => timestamp(timestamp::from_epoch_seconds(n)),
        FieldType::String | FieldType::Bool | FieldType::TimestampRfc3339 => {
            Err(Refusal::Wrong("a number"))
        }
    }
}

/// The value a JSON string gives a field of type `ty`.
pub(crate) fn string_value(ty: FieldType, v: &str) -> Result<Value, Refusal> {
    match ty {
        FieldType::String => Ok(Value::Str(Key::from(v))),
        FieldType::TimestampRfc3339 => timestamp::from_rfc3339(v)
            .map(|ms| Value::Num(ms as f64))
            .map_err(Refusal::Timestamp),
        _ => Err(Refusal::Wrong("a string")),
    }
}

/// The value a JSON boolean gives a field of type `ty`.
pub(crate) fn bool_value(ty: FieldType, v: bool) -> Result<Value, Refusal> {
    match ty {
        FieldType::Bool => Ok(Value::Bool(v)),
        _ => Err(Refusal::Wrong("a boolean")),
    }
}

/// Whether an integer's exact magnitude is beyond what an f64 holds exactly.
fn exceeds_exact(n: JsonNumber) -> bool {
    match n {
        JsonNumber::I64(v) => v.unsigned_abs() > MAX_EXACT_INT,
        JsonNumber::U64(v) => v > MAX_EXACT_INT,
        JsonNumber::F64(x) => x.abs() > MAX_EXACT_INT as f64,
    }
}
