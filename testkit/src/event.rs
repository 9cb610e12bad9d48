//! [`Event`]s for tests: `event("k", ts).values([..]).key_groups(64).offset(i).build()`, or
//! the values filled by field name from a schema with [`EventBuilder::by_name`]. Unset, an
//! event has no values, key groups of 16 and position partition 0, offset 0.

use weir_features::decode::Decoded;
use weir_features::record::{Event, Value, Values};
use weir_features::schema::RecordSchema;
use weir_features::vocab::{EventTime, Key, KeyGroup, SourcePosition};

/// A string value.
pub fn text(s: &str) -> Value {
    Value::Str(Key::from(s))
}

/// A number, or missing.
pub fn maybe(x: Option<f64>) -> Value {
    x.map_or(Value::Missing, Value::Num)
}

/// An event under construction.
#[derive(Clone, Debug)]
pub struct EventBuilder {
    key: Key,
    ts: EventTime,
    values: Values,
    key_groups: u32,
    position: SourcePosition,
    ingested_ms: u64,
}

/// An event of key `key` at event time `ts`.
pub fn event(key: &str, ts: EventTime) -> EventBuilder {
    EventBuilder {
        key: Key::from(key),
        ts,
        values: Values::new(),
        key_groups: 16,
        position: SourcePosition {
            partition: 0,
            offset: 0,
        },
        ingested_ms: 0,
    }
}

/// A decoded record as the source hands it on: key group of `key_groups`, partition 0.
pub fn from_decoded(decoded: Decoded, key_groups: u32, offset: i64) -> Event {
    Event {
        key_group: KeyGroup::of(decoded.key.as_bytes(), key_groups),
        key: decoded.key,
        ts: decoded.ts,
        values: decoded.values,
        position: SourcePosition {
            partition: 0,
            offset,
        },
        ingested_ms: 0,
    }
}

impl EventBuilder {
    /// The values in schema slot order.
    pub fn values(mut self, values: impl IntoIterator<Item = Value>) -> Self {
        self.values = values.into_iter().collect();
        self
    }

    /// The values of `schema`'s fields: the key field holds the key, the event-time field the
    /// time, every other field `value(name)`.
    pub fn by_name(self, schema: &RecordSchema, value: impl Fn(&str) -> Value) -> Self {
        let (key, time) = (schema.key_index(), schema.event_time_index());
        let values: Vec<Value> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(slot, field)| match slot {
                _ if slot == key => Value::Str(self.key.clone()),
                _ if slot == time => Value::Num(self.ts as f64),
                _ => value(&field.name),
            })
            .collect();
        self.values(values)
    }

    /// The key group is taken out of `key_groups`.
    pub fn key_groups(mut self, key_groups: u32) -> Self {
        self.key_groups = key_groups;
        self
    }

    /// Read from `partition`.
    pub fn partition(mut self, partition: i32) -> Self {
        self.position.partition = partition;
        self
    }

    /// Read at `offset`.
    pub fn offset(mut self, offset: i64) -> Self {
        self.position.offset = offset;
        self
    }

    /// Read by the source at wall-clock time `ms` (Unix ms).
    pub fn ingested(mut self, ms: u64) -> Self {
        self.ingested_ms = ms;
        self
    }

    /// The event.
    pub fn build(self) -> Event {
        Event {
            key_group: KeyGroup::of(self.key.as_bytes(), self.key_groups),
            key: self.key,
            ts: self.ts,
            values: self.values,
            position: self.position,
            ingested_ms: self.ingested_ms,
        }
    }
}
