//! [`FeatureRow`]s for tests: [`feature_row`] with neutral defaults (window start 0, revision
//! 0, one record at partition 0 offset 0, not closed by timeout); a test overrides the rest
//! with struct update syntax.

use weir_features::row::FeatureRow;
use weir_features::vocab::{EventTime, Key, KeyGroup, SourcePosition};

/// A row of `key` (key group out of `key_groups`) for the window ending at `window_end`.
pub fn feature_row(
    key: &str,
    key_groups: u32,
    window_end: EventTime,
    values: &[f64],
) -> FeatureRow {
    let position = SourcePosition {
        partition: 0,
        offset: 0,
    };
    FeatureRow {
        key: Key::from(key),
        key_group: KeyGroup::of(key.as_bytes(), key_groups),
        window_start: 0,
        window_end,
        revision: 0,
        values: values.iter().copied().collect(),
        records: 1,
        first: position,
        last: position,
        fired_at_ns: 0,
        closed_by_timeout: false,
        ingested_at_ms: 0,
    }
}
