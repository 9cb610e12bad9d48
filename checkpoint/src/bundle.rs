//! Bundle files: the state shards one operator instance changed in one epoch, written as one
//! snapshot file (one fsync) whose payload is their concatenation. Each shard is listed in the
//! manifest as its own [`SnapshotEntry`] with a [`Section`] (offset, checksum), so a later
//! epoch can keep listing a shard of this file while the instance's other shards move on.
//!
//! Pipeline position: called by the window operator's snapshot writer thread
//! ([`crate::SnapshotStore::write_bundle`]) and by restore and verification
//! ([`crate::SnapshotStore::for_each_snapshot`]).

use xxhash_rust::xxh3::xxh3_64;

use weir_features::vocab::Epoch;

use crate::error::{CheckpointError, Result};
use crate::format::Snapshot;
use crate::manifest::{Section, SnapshotEntry};
use crate::range::KeyGroupRange;
use crate::store::SnapshotStore;

/// Writes `sections` (key-group range, bytes) of `operator` at `epoch` as the bundle file
/// `<operator>/kg-<lo>-<hi>` of `file`; returns one entry per section, in order.
pub(crate) fn write<S: SnapshotStore + ?Sized>(
    store: &S,
    epoch: Epoch,
    operator: &str,
    file: KeyGroupRange,
    sections: &[(KeyGroupRange, &[u8])],
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
    let written = store.write_snapshot(epoch, operator, file, &payload)?;
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

/// Reads and verifies every snapshot of `entries` (listed by the manifest of `listed_by`) and
/// hands its bytes to `each`, reading each file once: whole-file snapshots are checked against
/// their size and payload checksum, sections against their file's size, their bounds and their
/// own checksum.
pub(crate) fn for_each<'a, S: SnapshotStore + ?Sized>(
    store: &S,
    listed_by: Epoch,
    entries: impl IntoIterator<Item = &'a SnapshotEntry>,
    mut each: impl FnMut(&SnapshotEntry, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut entries: Vec<&SnapshotEntry> = entries.into_iter().collect();
    let file_of =
        |e: &'a SnapshotEntry| (e.file_epoch(listed_by), e.operator.as_str(), e.file_range());
    entries.sort_by_key(|e| (file_of(e), e.section.map_or(0, |s| s.offset)));
    let mut open: Option<((Epoch, &str, KeyGroupRange), Snapshot)> = None;
    for entry in entries {
        let key = file_of(entry);
        let (epoch, operator, file) = key;
        let path = || store.snapshot_location(epoch, operator, file);
        let snapshot = match open.take() {
            Some((at, snapshot)) if at == key => snapshot,
            _ => {
                let snapshot = store.read_snapshot(epoch, operator, file)?;
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
