//! The MANIFEST of an epoch: everything a restore needs besides the snapshot files, and the
//! list of those files with sizes and checksums. Writing it (atomically, last) commits the epoch.
//!
//! Checkpoints are incremental: a file listed by epoch `E` may have been written by an earlier
//! epoch (its shard did not change since), named by [`SnapshotEntry::stored_in`]. Retention
//! ([`crate::SnapshotStore::prune`]) keeps every file a kept manifest lists.
//!
//! On disk it is JSON: `{"format_version": 2, "body_xxh3": "<hex>", "body": {...}}`, where
//! the checksum covers the exact bytes of `body`. [`decode`] dispatches on `format_version`
//! (the migration hook for older manifests; version 1 had no `stored_in`, version 2 no
//! `finished`). A manifest that lists finished partitions is version 3, which an older build
//! cannot read, so it never reads those partitions again from a misread manifest: it skips the
//! epoch as it skips any manifest it cannot read, restoring an earlier version-2 epoch if one
//! is left or starting over. A manifest that lists none is still written as version 2.

use std::collections::BTreeMap;
use std::path::Path;

use rangemap::RangeSet;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use xxhash_rust::xxh3::xxh3_64;

use weir_features::vocab::Epoch;

use crate::error::{CheckpointError, Result};
use crate::input_files::InputFingerprint;
pub use crate::positions::SourceOffset;
use crate::positions::SourcePositions;
use crate::range::{self, check_operator_name, KeyGroupRange};
pub use crate::range::{Section, SnapshotEntry};

/// Manifest format version this build writes when the manifest lists finished source
/// partitions ([`Manifest::finished`]), and the newest it reads. Without any it writes
/// version 2, which a build from before version 3 reads the same way.
pub const MANIFEST_VERSION: u32 = 3;

/// The version of a manifest without finished partitions.
const VERSION_WITHOUT_FINISHED: u32 = 2;

/// The committed description of one checkpoint epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The epoch.
    pub epoch: Epoch,
    /// Wall-clock time of the commit, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// Number of key groups `G` (fixed for the life of a job).
    pub key_groups: u32,
    /// Parallelism of each operator (stateless ones included).
    pub parallelism: BTreeMap<String, usize>,
    /// Per source, per partition being read: where to resume ([`SourcePositions::open`]).
    pub sources: BTreeMap<String, BTreeMap<i32, SourceOffset>>,
    /// Per source, the partitions read to their end as half-open spans of ids
    /// ([`SourcePositions::finished`]; a file source's finished ranges). Since version 3.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "finished_spans"
    )]
    pub finished: BTreeMap<String, RangeSet<i32>>,
    /// A file run's input files as they were ([`InputFingerprint`]), which a restore compares
    /// with the files as they are. Empty for a Kafka source and for earlier manifests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputFingerprint>,
    /// Version of each model in use, by model name.
    pub model_versions: BTreeMap<String, String>,
    /// Hash of the job's topology and feature definitions (refuse incompatible restores).
    pub topology_hash: u64,
    /// The job's tick in milliseconds: epochs are numbered in ticks (`unix_ms / tick_ms`), so
    /// checkpoints of another tick cannot be ordered with this job's. 0: not recorded (older
    /// checkpoints).
    #[serde(default)]
    pub tick_ms: u64,
    /// The window stage's combined watermark after the epoch (the lowest any instance
    /// reported); restored instances start from it, so records that were late stay late.
    /// `None`: not recorded (older checkpoints); restores then start from the minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_watermark: Option<i64>,
    /// Every snapshot file of the epoch.
    pub files: Vec<SnapshotEntry>,
}

/// Reads [`Manifest::finished`], refusing an empty or reversed span (which `RangeSet` would
/// panic on) with an error that names it.
fn finished_spans<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<BTreeMap<String, RangeSet<i32>>, D::Error> {
    let listed = BTreeMap::<String, Vec<(i32, i32)>>::deserialize(deserializer)?;
    let mut finished = BTreeMap::new();
    for (source, spans) in listed {
        let mut set = RangeSet::new();
        for (lo, hi) in spans {
            if lo >= hi {
                return Err(D::Error::custom(format!(
                    "source `{source}`: the finished span [{lo}, {hi}] is empty or reversed"
                )));
            }
            set.insert(lo..hi);
        }
        finished.insert(source, set);
    }
    Ok(finished)
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    format_version: u32,
    body_xxh3: String,
    body: Box<RawValue>,
}

impl Manifest {
    /// An empty manifest for `epoch` created now; fill in the rest before committing.
    pub fn new(epoch: Epoch, key_groups: u32) -> Self {
        let created_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Manifest {
            epoch,
            created_unix_ms,
            key_groups,
            parallelism: BTreeMap::new(),
            sources: BTreeMap::new(),
            finished: BTreeMap::new(),
            inputs: Vec::new(),
            model_versions: BTreeMap::new(),
            topology_hash: 0,
            tick_ms: 0,
            window_watermark: None,
            files: Vec::new(),
        }
    }

    /// Where source `source` resumes (nothing when the manifest has no position of it).
    pub fn positions_of(&self, source: &str) -> SourcePositions {
        SourcePositions {
            open: self.sources.get(source).cloned().unwrap_or_default(),
            finished: self.finished.get(source).cloned().unwrap_or_default(),
        }
    }

    /// Where every source resumes, by source name (what [`Manifest::set_positions`] recorded).
    pub fn positions(&self) -> BTreeMap<String, SourcePositions> {
        self.source_names()
            .map(|source| (source.to_owned(), self.positions_of(source)))
            .collect()
    }

    /// Records where every source resumes.
    pub fn set_positions(&mut self, positions: &BTreeMap<String, SourcePositions>) {
        self.sources = positions
            .iter()
            .map(|(source, p)| (source.clone(), p.open.clone()))
            .collect();
        self.finished = positions
            .iter()
            .filter(|(_, p)| !p.finished.is_empty())
            .map(|(source, p)| (source.clone(), p.finished.clone()))
            .collect();
    }

    /// Every source the manifest has positions of, open or finished.
    pub fn source_names(&self) -> impl Iterator<Item = &str> {
        let names: std::collections::BTreeSet<&str> = self
            .sources
            .keys()
            .chain(self.finished.keys())
            .map(String::as_str)
            .collect();
        names.into_iter()
    }

    /// Total bytes of the listed snapshots (the state's full size).
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The listed files written by this epoch itself (the rest are kept from earlier epochs).
    pub fn written_here(&self) -> impl Iterator<Item = &SnapshotEntry> {
        self.files
            .iter()
            .filter(|f| f.file_epoch(self.epoch) == self.epoch)
    }

    /// Checks that the manifest is self-consistent: `G > 0`, operator names are valid, each
    /// operator with files has a parallelism and its ranges cover `0..G` exactly once.
    pub fn validate(&self) -> Result<()> {
        let invalid = |detail: String| CheckpointError::InvalidManifest {
            epoch: self.epoch,
            detail,
        };
        if self.key_groups == 0 {
            return Err(invalid("key_groups is 0".into()));
        }
        for (source, finished) in &self.finished {
            let open = self.sources.get(source).into_iter().flat_map(|p| p.keys());
            if let Some(partition) = open.into_iter().find(|p| finished.contains(p)) {
                return Err(invalid(format!(
                    "source `{source}`: partition {partition} has a position but is also listed as finished"
                )));
            }
        }
        let mut by_operator: BTreeMap<&str, Vec<KeyGroupRange>> = BTreeMap::new();
        for file in &self.files {
            check_operator_name(&file.operator)?;
            if file.file_epoch(self.epoch) > self.epoch {
                return Err(invalid(format!(
                    "{} is said to be stored by the later epoch {}",
                    file.file_name(),
                    file.file_epoch(self.epoch).0
                )));
            }
            by_operator
                .entry(&file.operator)
                .or_default()
                .push(file.range);
        }
        for (operator, mut ranges) in by_operator {
            if !self.parallelism.contains_key(operator) {
                return Err(invalid(format!(
                    "operator `{operator}` has snapshot files but no parallelism entry"
                )));
            }
            ranges.sort();
            let mut next = 0u32;
            for r in &ranges {
                if r.is_empty() {
                    return Err(invalid(format!("operator `{operator}`: empty range {r}")));
                }
                if r.lo != next {
                    let what = if r.lo > next {
                        "missing"
                    } else {
                        "stored twice"
                    };
                    return Err(invalid(format!(
                        "operator `{operator}`: key groups from {} are {what} (next file {r})",
                        next.min(r.lo)
                    )));
                }
                next = r.hi;
            }
            if next != self.key_groups {
                return Err(invalid(format!(
                    "operator `{operator}`: files cover key groups 0..{next}, not 0..{}",
                    self.key_groups
                )));
            }
        }
        Ok(())
    }

    /// The snapshot files instance `instance` of `parallelism` of `operator` reads on restore,
    /// each with the key groups it keeps (see [`range::overlapping`]). Fails when the job's
    /// key-group count `key_groups` differs from the checkpoint's.
    pub fn files_for_instance(
        &self,
        operator: &str,
        instance: usize,
        parallelism: usize,
        key_groups: u32,
    ) -> Result<Vec<(&SnapshotEntry, KeyGroupRange)>> {
        if key_groups != self.key_groups {
            return Err(CheckpointError::KeyGroupsChanged {
                epoch: self.epoch,
                stored: self.key_groups,
                current: key_groups,
            });
        }
        Ok(range::overlapping(
            &self.files,
            operator,
            instance,
            parallelism,
            key_groups,
        ))
    }

    /// The manifest file's bytes (current format version).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let body =
            serde_json::to_string(self).map_err(|source| CheckpointError::InvalidManifest {
                epoch: self.epoch,
                detail: format!("cannot serialize: {source}"),
            })?;
        let format_version = if self.finished.is_empty() {
            VERSION_WITHOUT_FINISHED
        } else {
            MANIFEST_VERSION
        };
        let envelope = Envelope {
            format_version,
            body_xxh3: format!("{:016x}", xxh3_64(body.as_bytes())),
            body: RawValue::from_string(body).map_err(|source| {
                CheckpointError::InvalidManifest {
                    epoch: self.epoch,
                    detail: format!("cannot serialize: {source}"),
                }
            })?,
        };
        let mut out =
            serde_json::to_vec(&envelope).map_err(|source| CheckpointError::InvalidManifest {
                epoch: self.epoch,
                detail: format!("cannot serialize: {source}"),
            })?;
        out.push(b'\n');
        Ok(out)
    }
}

/// [`decode`], and refuses a manifest of another epoch than the one it is stored under
/// (`place`: "in the directory", "under the prefix", for the message).
pub(crate) fn decode_for_epoch(
    path: &Path,
    bytes: &[u8],
    epoch: Epoch,
    place: &str,
) -> Result<Manifest> {
    let manifest = decode(path, bytes)?;
    if manifest.epoch != epoch {
        return Err(CheckpointError::Corrupt {
            path: path.into(),
            detail: format!(
                "it describes epoch {} but sits {place} of epoch {}",
                manifest.epoch.0, epoch.0
            ),
        });
    }
    Ok(manifest)
}

impl Manifest {
    /// Before a commit: every file the manifest lists is stored with its listed size.
    /// `stored(epoch, entry)` gives where the entry's file of `epoch` lives and its stored
    /// size (`None` when absent), however the backend finds it.
    pub(crate) fn check_files_stored(
        &self,
        mut stored: impl FnMut(Epoch, &SnapshotEntry) -> Result<(std::path::PathBuf, Option<u64>)>,
    ) -> Result<()> {
        for entry in &self.files {
            let epoch = entry.file_epoch(self.epoch);
            let (path, size) = stored(epoch, entry)?;
            let Some(size) = size else {
                return Err(CheckpointError::SnapshotMissing { epoch, path });
            };
            if size != entry.file_size() {
                return Err(CheckpointError::SizeMismatch {
                    path,
                    expected: entry.file_size(),
                    actual: size,
                });
            }
        }
        Ok(())
    }
}

/// Decodes and verifies a MANIFEST read from `path`: envelope, version, body checksum.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest> {
    let parse_error = |source| CheckpointError::ManifestParse {
        path: path.into(),
        source,
    };
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(parse_error)?;
    let body = envelope.body.get().as_bytes();
    let actual = xxh3_64(body);
    let expected =
        u64::from_str_radix(&envelope.body_xxh3, 16).map_err(|_| CheckpointError::Corrupt {
            path: path.into(),
            detail: format!("body_xxh3 `{}` is not a hex checksum", envelope.body_xxh3),
        })?;
    if actual != expected {
        return Err(CheckpointError::ChecksumMismatch {
            path: path.into(),
            expected,
            actual,
        });
    }
    match envelope.format_version {
        1..=MANIFEST_VERSION => serde_json::from_slice(body).map_err(parse_error),
        version => Err(CheckpointError::UnsupportedVersion {
            path: path.into(),
            version,
            supported: MANIFEST_VERSION,
        }),
    }
}
