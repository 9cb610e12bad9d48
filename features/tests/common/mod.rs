//! Shared builders of the feature-engine tests that use the small `{user, ts, x}` schema.

use std::collections::BTreeMap;

use anyhow::Result;
use smallvec::smallvec;

use weir_features::record::{Event, Value, Values};
use weir_features::schema::{FieldDecl, FieldType, RecordSchema};
use weir_features::vocab::{Key, KeyGroup, SourcePosition};

/// `user` (string key), `ts` (event time), `x` (f64).
pub fn user_ts_x_schema() -> Result<RecordSchema> {
    let fields = BTreeMap::from([
        ("user".to_owned(), FieldDecl::Type(FieldType::String)),
        ("ts".to_owned(), FieldDecl::Type(FieldType::TimestampMs)),
        ("x".to_owned(), FieldDecl::Type(FieldType::F64)),
    ]);
    Ok(RecordSchema::new(&fields, "user", "ts")?)
}

/// An event of that schema on partition 0 at `offset`.
pub fn event(schema: &RecordSchema, key: &str, ts: i64, x: f64, offset: i64) -> Event {
    let mut values: Values = smallvec![Value::Missing; schema.fields().len()];
    for (slot, field) in schema.fields().iter().enumerate() {
        values[slot] = match field.name.as_str() {
            "user" => Value::Str(Key::from(key)),
            "ts" => Value::Num(ts as f64),
            _ => Value::Num(x),
        };
    }
    Event {
        key: Key::from(key),
        key_group: KeyGroup::of(key.as_bytes(), 16),
        ts,
        values,
        position: SourcePosition {
            partition: 0,
            offset,
        },
    }
}
