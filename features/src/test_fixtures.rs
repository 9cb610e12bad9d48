//! Fixtures of this crate's unit tests (integration tests use `weir-testkit`, which cannot be
//! used here: it links this crate as a separate copy).

use std::collections::BTreeMap;

use crate::aggregate::AggKind;
use crate::error::Result;
use crate::feature::{FeatureSet, FeatureSpec};
use crate::record::{Event, Value};
use crate::schema::{FieldDecl, FieldType, RecordSchema};
use crate::vocab::{Key, KeyGroup, SourcePosition};

/// Records `{k: string, ts: timestamp_ms}`, keyed by `k` ([`event`]'s).
pub(crate) fn key_ts_schema() -> Result<RecordSchema> {
    let fields = BTreeMap::from([
        ("k".to_owned(), FieldDecl::Type(FieldType::String)),
        ("ts".to_owned(), FieldDecl::Type(FieldType::TimestampMs)),
    ]);
    RecordSchema::new(&fields, "k", "ts")
}

/// One feature, `n = count()`, over [`key_ts_schema`]'s records.
pub(crate) fn count_feature() -> Result<FeatureSet> {
    let schema = key_ts_schema()?;
    let count = FeatureSpec {
        name: "n".to_owned(),
        agg: AggKind::Count,
        ..FeatureSpec::default()
    };
    FeatureSet::compile(&[count], &schema)
}

/// A record of `key` at `ts` (16 key groups).
pub(crate) fn event(key: &str, ts: i64) -> Event {
    Event {
        key: Key::from(key),
        key_group: KeyGroup::of(key.as_bytes(), 16),
        ts,
        values: [Value::Str(Key::from(key)), Value::Num(ts as f64)]
            .into_iter()
            .collect(),
        position: SourcePosition {
            partition: 0,
            offset: 0,
        },
        ingested_ms: 0,
    }
}
