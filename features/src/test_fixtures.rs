//! Fixtures of this crate's unit tests (integration tests use `weir-testkit`, which cannot be
//! used here: it links this crate as a separate copy).

use std::collections::BTreeMap;

use crate::aggregate::AggKind;
use crate::error::Result;
use crate::feature::{FeatureSet, FeatureSpec};
use crate::record::{Event, Value};
use crate::schema::{FieldDecl, FieldType, RecordSchema};
use crate::vocab::{Key, KeyGroup, SourcePosition};

/// One feature, `n = count()`, over records `{k: string, ts: timestamp_ms}`.
pub(crate) fn count_feature() -> Result<FeatureSet> {
    let fields = BTreeMap::from([
        ("k".to_owned(), FieldDecl::Type(FieldType::String)),
        ("ts".to_owned(), FieldDecl::Type(FieldType::TimestampMs)),
    ]);
    let schema = RecordSchema::new(&fields, "k", "ts")?;
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
