//! Errors of the checkpoint store: each says which file or epoch is wrong, what is wrong with
//! it and, where there is one, what to do about it.

use std::path::PathBuf;

use weir_features::vocab::Epoch;

/// A checkpoint that cannot be written, read or trusted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// An I/O operation on the store failed.
    #[error("checkpoint I/O error: cannot {op} {path}: {source}")]
    Io {
        /// What was being done (`"write"`, `"rename"`, `"fsync"`, ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A snapshot file does not start with the snapshot magic bytes.
    #[error("{path} is not a Weir snapshot file (magic bytes {found:02x?}); it was overwritten or is not a checkpoint")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first bytes found instead.
        found: Vec<u8>,
    },
    /// A file was written by a newer (or unknown) format version.
    #[error("{path} has format version {version}, this build reads versions up to {supported}: restore with a newer `weir`")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version found in the file.
        version: u32,
        /// Newest version this build understands.
        supported: u32,
    },
    /// A file is shorter than its header says: the write was cut off or the file truncated.
    #[error("{path} is truncated: expected {expected} bytes, found {actual}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the header or manifest promises.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// A file is longer than its header or manifest says.
    #[error("{path} has the wrong size: expected {expected} bytes, found {actual}")]
    SizeMismatch {
        /// The file.
        path: PathBuf,
        /// Expected size in bytes.
        expected: u64,
        /// Actual size in bytes.
        actual: u64,
    },
    /// A checksum does not match the content: the file is corrupt.
    #[error(
        "{path} is corrupt: checksum {actual:016x} does not match the recorded {expected:016x}"
    )]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// Recorded checksum (in the header or the manifest).
        expected: u64,
        /// Checksum of the bytes present.
        actual: u64,
    },
    /// A file's header or structure is malformed in another way.
    #[error("{path} is corrupt: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The epoch has no MANIFEST: it was never committed (e.g. the job died while writing it).
    #[error("epoch {} is not committed: {path} does not exist", epoch.0)]
    NotCommitted {
        /// The epoch.
        epoch: Epoch,
        /// Where its manifest would be.
        path: PathBuf,
    },
    /// The epoch directory does not exist at all.
    #[error("epoch {} does not exist in the checkpoint store {path}", epoch.0)]
    NoSuchEpoch {
        /// The epoch.
        epoch: Epoch,
        /// The store's root.
        path: PathBuf,
    },
    /// A MANIFEST is not valid JSON of the expected shape.
    #[error("{path} is not a valid manifest: {source}")]
    ManifestParse {
        /// The manifest file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A snapshot file listed in the manifest is missing.
    #[error("{path} is listed in the manifest of epoch {} but missing", epoch.0)]
    SnapshotMissing {
        /// The epoch.
        epoch: Epoch,
        /// The missing file.
        path: PathBuf,
    },
    /// A manifest is internally inconsistent, or a manifest about to be committed is.
    #[error("manifest of epoch {} is inconsistent: {detail}", epoch.0)]
    InvalidManifest {
        /// The epoch.
        epoch: Epoch,
        /// What is wrong.
        detail: String,
    },
    /// An operator name cannot be used as a path component.
    #[error("operator name `{name}` cannot name a checkpoint directory: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why not.
        reason: &'static str,
    },
    /// A key-group range is empty or reversed.
    #[error("invalid key-group range {lo}..{hi}: {reason}")]
    InvalidRange {
        /// Lower bound (inclusive).
        lo: u32,
        /// Upper bound (exclusive).
        hi: u32,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A checkpoint location (`[checkpoint] dir`, `--checkpoint-dir`) cannot be used.
    #[error("checkpoint location `{location}` cannot be used: {reason}")]
    InvalidLocation {
        /// The location as given.
        location: String,
        /// Why not.
        reason: String,
    },
    /// The job's key-group count differs from the checkpoint's: state cannot be mapped.
    #[error("checkpoint of epoch {} was written with {stored} key groups but the job uses {current}: the key-group count is fixed for the life of a job; set `key_groups = {stored}` or start without restoring", epoch.0)]
    KeyGroupsChanged {
        /// The epoch.
        epoch: Epoch,
        /// Key groups in the checkpoint.
        stored: u32,
        /// Key groups of the job.
        current: u32,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, CheckpointError>;

impl CheckpointError {
    /// An I/O error on `path` while doing `op`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CheckpointError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
