//! Summaries for `weir checkpoints list|inspect <dir>`: one [`EpochSummary`] per epoch,
//! printable as one line ([`EpochSummary::line`]) or in detail ([`std::fmt::Display`]).

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use weir_features::vocab::Epoch;

use crate::error::{CheckpointError, Result};
use crate::manifest::Manifest;
use crate::store::SnapshotStore;

/// Whether an epoch can be restored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochStatus {
    /// Committed and every listed file verifies.
    Valid,
    /// No MANIFEST: never committed (in progress, or a crash before the commit point).
    Uncommitted,
    /// No MANIFEST any more (retention removed it), but later epochs list files stored here.
    Retired,
    /// Committed but not restorable; the reason names the file and the problem.
    Invalid(String),
}

impl fmt::Display for EpochStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EpochStatus::Valid => f.write_str("valid"),
            EpochStatus::Uncommitted => f.write_str("uncommitted"),
            EpochStatus::Retired => f.write_str("retired (holds files later epochs list)"),
            EpochStatus::Invalid(reason) => write!(f, "INVALID: {reason}"),
        }
    }
}

/// What one epoch of a store holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochSummary {
    /// The epoch.
    pub epoch: Epoch,
    /// Restorable or not, and why.
    pub status: EpochStatus,
    /// Files present on disk (MANIFEST included).
    pub files: usize,
    /// Bytes present on disk.
    pub bytes: u64,
    /// The manifest, when it could be read (also for epochs whose files are invalid).
    pub manifest: Option<Manifest>,
}

/// Summarizes every epoch of `store`, oldest first. Verifies every committed epoch fully
/// (reads all its files).
pub fn inspect<S: SnapshotStore + ?Sized>(store: &S) -> Result<Vec<EpochSummary>> {
    let mut out = Vec::new();
    for epoch in store.list_epochs()? {
        let stored = store.stored_files(epoch)?;
        let (status, manifest) = match store.verify_epoch(epoch) {
            Ok(manifest) => (EpochStatus::Valid, Some(manifest)),
            Err(CheckpointError::NotCommitted { .. }) => (EpochStatus::Uncommitted, None),
            Err(CheckpointError::Io { op, path, source }) => {
                return Err(CheckpointError::Io { op, path, source })
            }
            Err(reason) => (
                EpochStatus::Invalid(reason.to_string()),
                store.read_manifest(epoch).ok(),
            ),
        };
        out.push(EpochSummary {
            epoch,
            status,
            files: stored.len(),
            bytes: stored.iter().map(|f| f.size).sum(),
            manifest,
        });
    }
    let listed: std::collections::BTreeSet<Epoch> = out
        .iter()
        .filter_map(|s| s.manifest.as_ref())
        .flat_map(|m| m.files.iter().map(|f| f.file_epoch(m.epoch)))
        .collect();
    for summary in &mut out {
        if summary.status == EpochStatus::Uncommitted && listed.contains(&summary.epoch) {
            summary.status = EpochStatus::Retired;
        }
    }
    Ok(out)
}

impl EpochSummary {
    /// One line for `weir checkpoints list`: epoch, created, bytes and files in the epoch's
    /// directory, the full state size the manifest lists (with older epochs' files), status.
    pub fn line(&self) -> String {
        let created = self
            .manifest
            .as_ref()
            .map_or_else(|| "-".to_owned(), |m| created(m.created_unix_ms));
        let state = self
            .manifest
            .as_ref()
            .map_or_else(|| "-".to_owned(), |m| format!("{} B", m.total_size()));
        format!(
            "{:>10}  {:<24}  {:>12} B  {:>5} files  state {:>14}  {}",
            self.epoch.0, created, self.bytes, self.files, state, self.status
        )
    }
}

/// RFC 3339 time of a manifest's `created_unix_ms`; a value past year 9999 (a damaged or
/// hand-edited manifest) is shown as the number instead of overflowing.
fn created(unix_ms: u64) -> String {
    /// 9999-12-31T23:59:59.999Z, the last instant RFC 3339 can write.
    const LAST_RFC3339_MS: u64 = 253_402_300_799_999;
    match UNIX_EPOCH.checked_add(Duration::from_millis(unix_ms)) {
        Some(time) if unix_ms <= LAST_RFC3339_MS => {
            humantime::format_rfc3339_millis(time).to_string()
        }
        _ => format!("{unix_ms} ms after the Unix epoch (not a valid date)"),
    }
}

impl fmt::Display for EpochSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "epoch {}: {}", self.epoch.0, self.status)?;
        writeln!(f, "  on disk: {} files, {} bytes", self.files, self.bytes)?;
        let Some(m) = &self.manifest else {
            return Ok(());
        };
        writeln!(f, "  created: {}", created(m.created_unix_ms))?;
        writeln!(f, "  key groups: {}", m.key_groups)?;
        if m.tick_ms > 0 {
            writeln!(f, "  tick: {} ms", m.tick_ms)?;
        }
        writeln!(f, "  topology hash: {:016x}", m.topology_hash)?;
        let parallelism: Vec<String> = m
            .parallelism
            .iter()
            .map(|(op, p)| format!("{op}={p}"))
            .collect();
        writeln!(f, "  parallelism: {}", parallelism.join(", "))?;
        let models: Vec<String> = m
            .model_versions
            .iter()
            .map(|(model, v)| format!("{model}@{v}"))
            .collect();
        writeln!(f, "  models: {}", models.join(", "))?;
        for source in m.source_names() {
            writeln!(f, "  source {source}:")?;
            let positions = m.positions_of(source);
            if !positions.finished.is_empty() {
                let spans: Vec<String> = positions
                    .finished
                    .iter()
                    .map(|span| format!("{}..{}", span.start, span.end))
                    .collect();
                writeln!(f, "    partitions read to their end: {}", spans.join(", "))?;
            }
            for (partition, at) in &positions.open {
                writeln!(
                    f,
                    "    partition {partition}: next offset {}, watermark {}",
                    at.next_offset, at.watermark.0
                )?;
            }
        }
        writeln!(
            f,
            "  snapshot files: {} ({} bytes); written by this epoch: {} ({} bytes)",
            m.files.len(),
            m.total_size(),
            m.written_here().count(),
            m.written_here().map(|e| e.size).sum::<u64>()
        )?;
        for file in &m.files {
            let stored = file.file_epoch(m.epoch);
            let origin = if stored == m.epoch {
                String::new()
            } else {
                format!("  (kept from epoch {})", stored.0)
            };
            let place = file.section.map_or(String::new(), |s| {
                format!(" in {} at {}", file.file_name(), s.offset)
            });
            writeln!(
                f,
                "    {} {}{place}  {} B  xxh3 {:016x}{origin}",
                file.operator, file.range, file.size, file.xxh3
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::created;

    #[test]
    fn creation_times_print_as_dates_and_absurd_ones_do_not_overflow() {
        assert_eq!(created(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(created(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert!(created(u64::MAX).contains("not a valid date"));
        assert!(created(253_402_300_800_000).contains("not a valid date"));
    }
}
