//! Record schemas in one line: `schema("k", "ts", &[("x", F64), ("amount", F64_OPTIONAL)])` is a
//! string key `k`, an event time `ts` and the listed fields. Slots follow field names, as in
//! every compiled [`RecordSchema`].

use std::collections::BTreeMap;

use weir_features::schema::{FieldDecl, FieldType, RecordSchema};

/// A required string.
pub const STRING: FieldDecl = FieldDecl::Type(FieldType::String);
/// An optional string.
pub const STRING_OPTIONAL: FieldDecl = FieldDecl::Full {
    ty: FieldType::String,
    required: false,
};
/// A required f64.
pub const F64: FieldDecl = FieldDecl::Type(FieldType::F64);
/// An optional f64.
pub const F64_OPTIONAL: FieldDecl = FieldDecl::Full {
    ty: FieldType::F64,
    required: false,
};
/// A required i64.
pub const I64: FieldDecl = FieldDecl::Type(FieldType::I64);
/// A required bool.
pub const BOOL: FieldDecl = FieldDecl::Type(FieldType::Bool);
/// An optional bool.
pub const BOOL_OPTIONAL: FieldDecl = FieldDecl::Full {
    ty: FieldType::Bool,
    required: false,
};
/// A required event time in milliseconds.
pub const TIMESTAMP_MS: FieldDecl = FieldDecl::Type(FieldType::TimestampMs);

/// The declarations as a job file's `[source.fields]` holds them.
pub fn fields(decls: &[(&str, FieldDecl)]) -> BTreeMap<String, FieldDecl> {
    decls
        .iter()
        .map(|(name, decl)| ((*name).to_owned(), decl.clone()))
        .collect()
}

/// The schema of exactly `decls`, keyed by `key` with event time `event_time`; panics (failing
/// the test) if it does not compile.
pub fn schema_of(decls: &[(&str, FieldDecl)], key: &str, event_time: &str) -> RecordSchema {
    RecordSchema::new(&fields(decls), key, event_time)
        .unwrap_or_else(|e| panic!("test schema: {e}"))
}

/// A string key `key`, an event time `event_time` (`timestamp_ms`) and the fields `others`.
pub fn schema(key: &str, event_time: &str, others: &[(&str, FieldDecl)]) -> RecordSchema {
    let mut decls = vec![(key, STRING), (event_time, TIMESTAMP_MS)];
    decls.extend(others.iter().map(|(name, decl)| (*name, decl.clone())));
    schema_of(&decls, key, event_time)
}
