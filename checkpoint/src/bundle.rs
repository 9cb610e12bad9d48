//! Bundle files: the state shards one operator instance changed in one epoch, written as one
//! snapshot file (one fsync) whose payload is their concatenation. Each shard is listed in the
//! manifest as its own [`SnapshotEntry`] with a [`Section`] (offset, checksum), so a later
//! epoch can keep listing a shard of this file while the instance's other shards move on.
//!
//! Pipeline position: the layout behind [`crate::SnapshotStore::write_bundle`] (called by the
//! window operator's snapshot writer thread) and [`crate::SnapshotStore::for_each_snapshot`]
//! (restore and verification); the store passes in its own file reads and writes.

use std::path::PathBuf;

use xxhash_rust::xxh3::xxh3_64;

use weir_features::vocab::Epoch;

use crate::error::{CheckpointError, Result};
use crate::format::Snapshot;
use crate::range::{KeyGroupRange, Section, SnapshotEntry};

/// Which snapshot file: the epoch whose directory holds it, its operator, its name's range.
pub(crate) type FileKey<'a> = (Epoch, &'a str, KeyGroupRange);

/// Writes `sections` (key-group range, bytes) of `operator` at `epoch` as the bundle file
/// `<operator>/kg-<lo>-<hi>` of `file`, storing its payload with `write_snapshot`; returns one
/// entry per section, in order.
pub(crate) fn write(
    epoch: Epoch,
    operator: &str,
    file: KeyGroupRange,
    sections: &[(KeyGroupRange, &[u8])],
    write_snapshot: impl FnOnce(&[u8]) -> Result<SnapshotEntry>,
) -> Result<Vec<SnapshotEntry>> {
    let mut payload = Vec::with_capacity(sections.iter().map(|(_, b)| b.len()).sum());
    let mut placed = Vec::with_capacity(sections.len());
    for (range, bytes) in sections {
        placed.push((
            *range,
            payload.len() as u64,
            bytes.len() as u64,
            xxh3_64(bytes),
        ));
        payload.extend_from_slice(bytes);
    }
    let written = write_snapshot(&payload)?;
    Ok(placed
        .into_iter()
        .map(|(range, offset, size, xxh3)| SnapshotEntry {
            operator: operator.to_owned(),
            range,
            size,
            xxh3,
            stored_in: Some(epoch),
            section: Some(Section {
                file,
                offset,
                file_size: written.size,
            }),
        })
        .collect())
}

/// Reads (with `read_snapshot`) and verifies every snapshot of `entries` (listed by the
/// manifest of `listed_by`) and hands its bytes to `each`, reading each file once: whole-file
/// snapshots are checked against their size and payload checksum, sections against their
/// file's size, their bounds and their own checksum. `location` names a file in errors.
pub(crate) fn for_each<'a>(
    listed_by: Epoch,
    entries: impl IntoIterator<Item = &'a SnapshotEntry>,
    mut read_snapshot: impl FnMut(FileKey<'_>) -> Result<Snapshot>,
    location: impl Fn(FileKey<'_>) -> PathBuf,
    mut each: impl FnMut(&SnapshotEntry, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut entries: Vec<&SnapshotEntry> = entries.into_iter().collect();
    let file_of =
        |e: &'a SnapshotEntry| (e.file_epoch(listed_by), e.operator.as_str(), e.file_range());
    entries.sort_by_key(|e| (file_of(e), e.section.map_or(0, |s| s.offset)));
    let mut open: Option<(FileKey<'a>, Snapshot)> = None;
    for entry in entries {
        let key = file_of(entry);
        let path = || location(key);
        let snapshot = match open.take() {
            Some((at, snapshot)) if at == key => snapshot,
            _ => {
                let snapshot = read_snapshot(key)?;
                if snapshot.file_size != entry.file_size() {
                    return Err(CheckpointError::SizeMismatch {
                        path: path(),
                        expected: entry.file_size(),
                        actual: snapshot.file_size,
                    });
                }
                snapshot
            }
        };
        let (bytes, actual) = match entry.section {
            None => (&snapshot.payload[..], snapshot.payload_xxh3),
            Some(section) => {
                let bytes = usize::try_from(section.offset)
                    .ok()
                    .zip(usize::try_from(entry.size).ok())
                    .and_then(|(at, len)| snapshot.payload.get(at..at.checked_add(len)?))
                    .ok_or_else(|| CheckpointError::Corrupt {
                        path: path(),
                        detail: format!(
                            "the section of key groups {} ({} bytes at {}) lies outside the {}-byte payload",
                            entry.range,
                            entry.size,
                            section.offset,
                            snapshot.payload.len()
                        ),
                    })?;
                (bytes, xxh3_64(bytes))
            }
        };
        if actual != entry.xxh3 {
            return Err(CheckpointError::ChecksumMismatch {
                path: path(),
                expected: entry.xxh3,
                actual,
            });
        }
        each(entry, bytes)?;
        open = Some((key, snapshot));
    }
    Ok(())
}
