//! Record schema: the typed fields a job declares for its input, which field is the key and
//! which carries event time. Decoders (JSON today; Avro/Protobuf later) fill records shaped by it.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::{FeatureError, Result};

/// The type of one input field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    /// UTF-8 string. Usable as the key, in predicates and in distinct counts.
    String,
    /// 64-bit float; JSON integers are accepted. Non-finite values are rejected.
    F64,
    /// 64-bit integer, held as f64 for aggregation (exact up to 2^53).
    I64,
    /// Boolean.
    Bool,
    /// Event time as integer milliseconds since the Unix epoch.
    TimestampMs,
    /// Event time as seconds since the Unix epoch, integer or fractional (held in ms).
    TimestampS,
    /// Event time as an RFC 3339 string, e.g. `"2026-11-30T12:00:00Z"` (held in ms).
    TimestampRfc3339,
}

impl FieldType {
    /// Whether values of this type are event times (held as epoch milliseconds).
    pub fn is_timestamp(self) -> bool {
        matches!(
            self,
            FieldType::TimestampMs | FieldType::TimestampS | FieldType::TimestampRfc3339
        )
    }

    /// Whether values of this type are numbers in records (aggregatable, compared as f64):
    /// f64, i64 and every timestamp format (as epoch milliseconds).
    pub fn is_numeric(self) -> bool {
        matches!(self, FieldType::F64 | FieldType::I64) || self.is_timestamp()
    }

    /// The name a job file uses for this type.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::F64 => "f64",
            FieldType::I64 => "i64",
            FieldType::Bool => "bool",
            FieldType::TimestampMs => "timestamp_ms",
            FieldType::TimestampS => "timestamp_s",
            FieldType::TimestampRfc3339 => "timestamp_rfc3339",
        }
    }
}

/// A field declaration in a job file: either just a type (`amount = "f64"`) or a table
/// (`amount = { type = "f64", required = false }`). Fields are required unless said otherwise.
///
/// Deserialized by hand rather than as an untagged enum, so that a misspelt type names the
/// valid ones and an unknown option in the table (`requird = false`) is an error instead of
/// being ignored.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldDecl {
    /// A required field of this type.
    Type(FieldType),
    /// A field with explicit options.
    Full {
        /// The field's type.
        ty: FieldType,
        /// Whether a record without this field goes to the dead-letter topic.
        required: bool,
    },
}

/// The table form of [`FieldDecl`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldTable {
    #[serde(rename = "type")]
    ty: FieldType,
    #[serde(default = "yes")]
    required: bool,
}

fn yes() -> bool {
    true
}

impl<'de> Deserialize<'de> for FieldDecl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct DeclVisitor;
        impl<'de> Visitor<'de> for DeclVisitor {
            type Value = FieldDecl;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a field type (\"string\", \"f64\", \"i64\", \"bool\", \"timestamp_ms\", \
                     \"timestamp_s\", \"timestamp_rfc3339\") or a table like { type = \"f64\", required = false }",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<FieldDecl, E> {
                FieldType::deserialize(v.into_deserializer()).map(FieldDecl::Type)
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<FieldDecl, A::Error> {
                let table = FieldTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(FieldDecl::Full {
                    ty: table.ty,
                    required: table.required,
                })
            }
        }
        deserializer.deserialize_any(DeclVisitor)
    }
}

impl FieldDecl {
    fn ty(&self) -> FieldType {
        match self {
            FieldDecl::Type(ty) | FieldDecl::Full { ty, .. } => *ty,
        }
    }
    fn required(&self) -> bool {
        match self {
            FieldDecl::Type(_) => true,
            FieldDecl::Full { required, .. } => *required,
        }
    }
}

/// One field of a compiled schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// Field name as it appears in the input.
    pub name: String,
    /// Declared type.
    pub ty: FieldType,
    /// Whether the field must be present and non-null.
    pub required: bool,
}

/// A compiled record schema: fields in a fixed order (by name), with the key and the
/// event-time field identified. Value slots in records follow `fields` order.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordSchema {
    fields: Vec<Field>,
    key: usize,
    event_time: usize,
    /// Each field's name as [`short_name`] packs it, and its length (`None` for a longer one):
    /// the JSON fast path's lookup compares these integers.
    short_names: Vec<Option<(u64, usize)>>,
}

/// A name of up to 8 bytes as an integer (its bytes little-endian, zeros above them), built
/// byte by byte; `None` for a longer one. Compared with the length beside it, equal integers
/// are equal names.
#[inline]
fn short_name(name: &[u8]) -> Option<u64> {
    (name.len() <= 8).then(|| {
        name.iter()
            .rev()
            .fold(0_u64, |packed, &b| packed << 8 | u64::from(b))
    })
}

impl RecordSchema {
    /// Compiles declared fields; `key` must be a string or i64 field and `event_time` a
    /// timestamp field (`timestamp_ms`, `timestamp_s` or `timestamp_rfc3339`), both required.
    pub fn new(fields: &BTreeMap<String, FieldDecl>, key: &str, event_time: &str) -> Result<Self> {
        let fields: Vec<Field> = fields
            .iter()
            .map(|(name, decl)| Field {
                name: name.clone(),
                ty: decl.ty(),
                required: decl.required(),
            })
            .collect();
        let find = |name: &str, role: &str| {
            fields.iter().position(|f| f.name == name).ok_or_else(|| {
                FeatureError::Schema(format!(
                    "the {role} field `{name}` is not declared in [source.fields]; declare it, e.g. `{name} = \"string\"`"
                ))
            })
        };
        let key_idx = find(key, "key")?;
        let time_idx = find(event_time, "event_time")?;
        let key_field = &fields[key_idx];
        if !matches!(key_field.ty, FieldType::String | FieldType::I64) || !key_field.required {
            return Err(FeatureError::Schema(format!(
                "the key field `{key}` must be a required \"string\" or \"i64\" field"
            )));
        }
        let time_field = &fields[time_idx];
        if !time_field.ty.is_timestamp() || !time_field.required {
            return Err(FeatureError::Schema(format!(
                "the event_time field `{event_time}` must be a required timestamp field \
                 (\"timestamp_ms\", \"timestamp_s\" or \"timestamp_rfc3339\")"
            )));
        }
        let short_names = fields
            .iter()
            .map(|f| short_name(f.name.as_bytes()).map(|packed| (packed, f.name.len())))
            .collect();
        Ok(RecordSchema {
            fields,
            key: key_idx,
            event_time: time_idx,
            short_names,
        })
    }

    /// All fields in slot order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Slot index of a field by name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// [`RecordSchema::index_of`] for the JSON fast path, once per field of every record: a
    /// name of up to 8 bytes is found by comparing integers, where comparing strings called
    /// libc's `memcmp` for each candidate of the same length (~3 % of a features run).
    #[inline]
    pub(crate) fn slot_of(&self, name: &str) -> Option<usize> {
        match short_name(name.as_bytes()) {
            Some(packed) => {
                let wanted = Some((packed, name.len()));
                self.short_names.iter().position(|&short| short == wanted)
            }
            None => self.index_of(name),
        }
    }

    /// Slot index of the key field.
    pub fn key_index(&self) -> usize {
        self.key
    }

    /// Slot index of the event-time field.
    pub fn event_time_index(&self) -> usize {
        self.event_time
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names of every length around the packed ones' bound are found at their slot, as
    /// `index_of` finds them; their prefixes, extensions and a name differing in one byte are
    /// not found, nor is a name that only pads with zero bytes.
    #[test]
    fn slot_of_finds_exactly_the_names_index_of_finds() -> Result<()> {
        let names = [
            "",
            "a",
            "ts",
            "user",
            "type",
            "dwell_ms",
            "dwell_mss",
            "a_long_field_name",
        ];
        let mut fields: BTreeMap<String, FieldDecl> = names
            .iter()
            .map(|n| (n.to_string(), FieldDecl::Type(FieldType::F64)))
            .collect();
        fields.insert("k".into(), FieldDecl::Type(FieldType::String));
        fields.insert("t".into(), FieldDecl::Type(FieldType::TimestampMs));
        let schema = RecordSchema::new(&fields, "k", "t")?;
        for name in names.iter().chain(&["k", "t"]) {
            assert_eq!(schema.slot_of(name), schema.index_of(name), "{name}");
            assert!(schema.slot_of(name).is_some(), "{name}");
        }
        for other in [
            "b",
            "t\0",
            "tsx",
            "use",
            "uses",
            "dwell_m",
            "dwell_mt",
            "dwell_msss",
        ] {
            assert_eq!(schema.slot_of(other), None, "{other:?}");
        }
        Ok(())
    }
}
