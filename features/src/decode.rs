//! JSON decoding of source payloads into typed [`Event`]s, driven by the job's
//! [`RecordSchema`]. Two paths: `json_scan` reads the ordinary records (one object,
//! no escapes) in one pass over the bytes; every other payload, and every error, goes through
//! a serde visitor over serde_json. Neither builds a `serde_json::Value` or allocates for
//! ordinary records, and both turn a JSON value into a field's value with the same functions
//! (`field_value.rs`). Every failure is classified into a
//! [`DeadLetterReason`] so the source can route the record to the dead-letter topic.
//!
//! [`Event`]: crate::record::Event

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use crate::dead_letter::DeadLetterReason;
use crate::field_value::{bool_value, number_value, string_value, Refusal};
use crate::json_scan;
use crate::record::{Value, Values};
use crate::schema::{FieldType, RecordSchema};
use crate::timestamp::{JsonNumber, TimestampError};
use crate::vocab::{EventTime, Key};

/// Why a payload could not be decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeError {
    /// Classification for the dead-letter topic.
    pub reason: DeadLetterReason,
    /// Detail, naming the field when there is one.
    pub message: String,
}

/// A successfully decoded payload: key, event time and all field values in slot order.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// Value of the key field (i64 keys are rendered in decimal).
    pub key: Key,
    /// Value of the event-time field.
    pub ts: EventTime,
    /// All fields in schema slot order.
    pub values: Values,
}

/// Decodes JSON objects according to a schema.
#[derive(Clone, Debug)]
pub struct JsonDecoder {
    schema: RecordSchema,
}

impl JsonDecoder {
    /// A decoder for records of `schema`.
    pub fn new(schema: RecordSchema) -> Self {
        JsonDecoder { schema }
    }

    /// The schema this decoder fills.
    pub fn schema(&self) -> &RecordSchema {
        &self.schema
    }

    /// Decodes one payload.
    pub fn decode(&self, payload: &[u8]) -> Result<Decoded, DecodeError> {
        let mut values = Values::new();
        let (key, ts) = self.decode_into(payload, &mut values)?;
        Ok(Decoded { key, ts, values })
    }

    /// Decodes one payload into `values` (replacing what it held: the record's fields in
    /// schema slot order) and returns its key and event time. A source decodes straight into
    /// the event it is building, so the values are not copied on their way there.
    pub fn decode_into(
        &self,
        payload: &[u8],
        values: &mut Values,
    ) -> Result<(Key, EventTime), DecodeError> {
        // Every slot Missing until the payload fills it. Pushed one by one: `resize` (a
        // generic `extend` over a repeated clone, not inlined) was ~5 % of a features run.
        values.clear();
        for _ in self.schema.fields() {
            values.push(Value::Missing);
        }
        // JSON text is UTF-8 (RFC 8259 §8.1). Checked up front so that invalid bytes are
        // malformed wherever they are, not only inside declared fields (serde_json skips
        // unknown fields' strings without validating them).
        let text = utf8(payload)?;
        if json_scan::decode_object(&self.schema, text, values).is_some() {
            return self.finish(values);
        }
        self.decode_with_serde(text, values)
    }

    /// The serde path: every payload the fast path ([`json_scan`]) does not read, and every
    /// error's reason and message. `values` is reset first (the fast path may have filled
    /// part of it).
    pub(crate) fn decode_with_serde(
        &self,
        text: &str,
        values: &mut Values,
    ) -> Result<(Key, EventTime), DecodeError> {
        let reason = Cell::new(None);
        values.iter_mut().for_each(|v| *v = Value::Missing);
        let mut de = serde_json::Deserializer::from_str(text);
        let seed = ObjectSeed {
            schema: &self.schema,
            values,
            reason: &reason,
        };
        let parsed = seed.deserialize(&mut de).and_then(|()| de.end());
        if let Err(err) = parsed {
            // A field error stops the decoder where it is; bytes that are not JSON further on
            // make the record malformed all the same (checked only on this path).
            if reason.get().is_some() {
                if let Err(syntax) = serde_json::from_str::<IgnoredAny>(text) {
                    return Err(classify(&syntax, None));
                }
            }
            return Err(classify(&err, reason.get()));
        }
        self.finish(values)
    }

    fn finish(&self, values: &Values) -> Result<(Key, EventTime), DecodeError> {
        for (field, value) in self.schema.fields().iter().zip(values.iter()) {
            if field.required && *value == Value::Missing {
                return Err(DecodeError {
                    reason: DeadLetterReason::MissingField,
                    message: format!("required field `{}` is missing or null", field.name),
                });
            }
        }
        let key = match &values[self.schema.key_index()] {
            Value::Str(s) => s.clone(),
            Value::Num(x) => Key::from(format!("{}", *x as i64)),
            other => {
                return Err(DecodeError {
                    reason: DeadLetterReason::WrongType,
                    message: format!("key field has unexpected value {other:?}"),
                })
            }
        };
        let ts = match values[self.schema.event_time_index()] {
            Value::Num(x) => x as EventTime,
            _ => {
                return Err(DecodeError {
                    reason: DeadLetterReason::MissingField,
                    message: "event-time field is missing".to_owned(),
                })
            }
        };
        Ok((key, ts))
    }
}

fn classify(err: &serde_json::Error, reason: Option<DeadLetterReason>) -> DecodeError {
    let message = err.to_string();
    let reason = reason.unwrap_or_else(|| {
        if message.starts_with("number out of range") {
            DeadLetterReason::NonFinite
        } else {
            DeadLetterReason::Malformed
        }
    });
    DecodeError { reason, message }
}

/// Visits the top-level object and writes each declared field into its slot.
struct ObjectSeed<'a> {
    schema: &'a RecordSchema,
    values: &'a mut Values,
    reason: &'a Cell<Option<DeadLetterReason>>,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        // Not an object at all, or a syntax error: both classify as malformed payloads.
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<FieldName<'de>>()? {
            let slot = self
                .schema
                .fields()
                .iter()
                .position(|f| f.name == name.as_str());
            match slot {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(slot) => {
                    let field = &self.schema.fields()[slot];
                    let seed = FieldSeed {
                        ty: field.ty,
                        name: &field.name,
                        reason: self.reason,
                    };
                    self.values[slot] = map.next_value_seed(seed)?;
                }
            }
        }
        Ok(())
    }
}

/// A field name, borrowed from the input when it has no escapes.
enum FieldName<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl FieldName<'_> {
    fn as_str(&self) -> &str {
        match self {
            FieldName::Borrowed(s) => s,
            FieldName::Owned(s) => s,
        }
    }
}

impl<'de> de::Deserialize<'de> for FieldName<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = FieldName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(FieldName::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(FieldName::Owned(v.to_owned()))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// Decodes one field value according to its declared type.
struct FieldSeed<'a> {
    ty: FieldType,
    name: &'a str,
    reason: &'a Cell<Option<DeadLetterReason>>,
}

impl FieldSeed<'_> {
    fn fail<E: de::Error>(&self, reason: DeadLetterReason, what: fmt::Arguments) -> E {
        self.reason.set(Some(reason));
        E::custom(format_args!("field `{}`: {what}", self.name))
    }
    fn expected(&self) -> &'static str {
        match self.ty {
            FieldType::String => "a string",
            FieldType::F64 => "a number (f64)",
            FieldType::I64 => "an integer (i64)",
            FieldType::Bool => "a boolean",
            FieldType::TimestampMs => "integer epoch milliseconds (timestamp_ms)",
            FieldType::TimestampS => "epoch seconds (timestamp_s)",
            FieldType::TimestampRfc3339 => "an RFC 3339 string (timestamp_rfc3339)",
        }
    }
    /// A [`Refusal`] as the error that makes the record a dead letter.
    fn refuse<E: de::Error>(&self, refusal: Refusal) -> E {
        match refusal {
            Refusal::Wrong(got) => self.fail(
                DeadLetterReason::WrongType,
                format_args!("expected {}, got {got}", self.expected()),
            ),
            Refusal::NonFinite(x) => self.fail(
                DeadLetterReason::NonFinite,
                format_args!("{x} is not finite"),
            ),
            // i64 values are held as f64: beyond ±2^53 two different integers would become
            // the same value (two keys merged).
            Refusal::OutOfRange(x) => self.fail(
                DeadLetterReason::WrongType,
                format_args!(
                    "{x} is outside ±2^53, the exact integer range of {:?} fields",
                    self.ty
                ),
            ),
            Refusal::Timestamp(e @ TimestampError::NonFinite(_)) => {
                self.fail(DeadLetterReason::NonFinite, format_args!("{e}"))
            }
            Refusal::Timestamp(e) => self.fail(
                DeadLetterReason::WrongType,
                format_args!("expected {}: {e}", self.expected()),
            ),
        }
    }
    fn number<E: de::Error>(&self, n: JsonNumber) -> Result<Value, E> {
        number_value(self.ty, n).map_err(|r| self.refuse(r))
    }
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a value of type {:?}", self.ty)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Missing)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        bool_value(self.ty, v).map_err(|r| self.refuse(r))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.number(JsonNumber::I64(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.number(JsonNumber::U64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.number(JsonNumber::F64(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        string_value(self.ty, v).map_err(|r| self.refuse(r))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _seq: A) -> Result<Value, A::Error> {
        Err(self.refuse(Refusal::Wrong("an array")))
    }
    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<Value, A::Error> {
        Err(self.refuse(Refusal::Wrong("an object")))
    }
}

/// `payload` as text. An ASCII payload (most records) needs no more than std's word-at-a-time
/// `is_ascii`, inlined: `simdutf8`, which copies a payload shorter than its 64-byte block
/// before its SIMD check, was ~2.5 % of a features run of ~70-byte lines (BENCHMARKS.md, F,
/// fix 73). Others are checked by `simdutf8` (up to 4× std's speed by its authors'
/// measurements); an invalid payload is checked again by std for its error's wording and
/// position.
fn utf8(payload: &[u8]) -> Result<&str, DecodeError> {
    if payload.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        #[allow(unsafe_code)]
        return Ok(unsafe { std::str::from_utf8_unchecked(payload) });
    }
    if let Ok(text) = simdutf8::basic::from_utf8(payload) {
        return Ok(text);
    }
    std::str::from_utf8(payload).map_err(|e| DecodeError {
        reason: DeadLetterReason::Malformed,
        message: format!("payload is not valid UTF-8: {e}"),
    })
}
