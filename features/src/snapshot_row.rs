//! [`FeatureRow`]s as window-state snapshots hold them: every field but `ingested_at_ms`, in
//! the layout rows had before they carried it, so the snapshot format did not change. A row
//! restored from a snapshot has an ingest time of 0 (unknown: its records were read by an
//! earlier run). Pipeline position: inside [`crate::closed_windows::ClosedWindows`]'s
//! snapshot encoding; rows sent between workers keep every field.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::key_table::FastHash;
use crate::row::{FeatureRow, RowValues};
use crate::vocab::{EventTime, Key, KeyGroup, SourcePosition};

/// The snapshot fields of a [`FeatureRow`] (serde's remote derive: same names, same order).
#[derive(Serialize, Deserialize)]
#[serde(remote = "FeatureRow")]
struct SnapshotRow {
    key: Key,
    key_group: KeyGroup,
    window_start: EventTime,
    window_end: EventTime,
    revision: u32,
    values: RowValues,
    records: u64,
    first: SourcePosition,
    last: SourcePosition,
    fired_at_ns: u64,
    #[serde(default)]
    closed_by_timeout: bool,
    #[serde(skip)]
    ingested_at_ms: u64,
}

#[derive(Serialize)]
struct RowRef<'a>(#[serde(with = "SnapshotRow")] &'a FeatureRow);

#[derive(Deserialize)]
struct RowOwned(#[serde(with = "SnapshotRow")] FeatureRow);

struct WindowsRef<'a>(&'a BTreeMap<EventTime, FeatureRow>);

impl Serialize for WindowsRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(end, row)| (end, RowRef(row))))
    }
}

/// Closed windows by key, each by window end.
pub(crate) type RowsByKey = HashMap<Key, BTreeMap<EventTime, FeatureRow>, FastHash>;

/// Serializes `rows` without their ingest times.
pub(crate) fn serialize<S: Serializer>(rows: &RowsByKey, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(rows.iter().map(|(key, windows)| (key, WindowsRef(windows))))
}

/// Deserializes what [`serialize`] wrote (ingest times 0).
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<RowsByKey, D::Error> {
    let stored =
        HashMap::<Key, BTreeMap<EventTime, RowOwned>, FastHash>::deserialize(deserializer)?;
    Ok(stored
        .into_iter()
        .map(|(key, windows)| {
            (
                key,
                windows.into_iter().map(|(end, row)| (end, row.0)).collect(),
            )
        })
        .collect())
}
