//! The binary container of one snapshot file (`ckpt/<epoch>/<operator>/kg-<lo>-<hi>`).
//!
//! Version 1, little-endian, 28-byte header then the payload:
//!
//! ```text
//! 0  magic        8 bytes  b"WEIRSNAP"
//! 8  version      u16      FORMAT_VERSION
//! 10 flags        u16      0 (reserved: compression, ...; unknown flags are rejected)
//! 12 payload_len  u64
//! 20 payload_xxh3 u64      xxh3_64 of the payload
//! 28 payload      payload_len bytes (the operator's own versioned state encoding)
//! ```
//!
//! [`decode`] dispatches on the version: when version 2 arrives, `decode_v1` stays and turns
//! old files into the current [`Snapshot`] (the migration path), so old checkpoints restore.

use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{CheckpointError, Result};

/// Magic bytes that open every snapshot file.
pub const MAGIC: [u8; 8] = *b"WEIRSNAP";
/// The format version this build writes (and the newest it reads).
pub const FORMAT_VERSION: u16 = 1;
/// Size of the version-1 header in bytes.
pub const HEADER_LEN: usize = 28;

/// A decoded, verified snapshot file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Format version the file was written with (before migration).
    pub format_version: u16,
    /// Size of the whole file in bytes.
    pub file_size: u64,
    /// xxh3_64 of the payload (verified).
    pub payload_xxh3: u64,
    /// The operator's state bytes.
    pub payload: Vec<u8>,
}

/// Encodes `payload` as a current-version snapshot file; returns the bytes and the payload
/// checksum.
pub fn encode(payload: &[u8]) -> (Vec<u8>, u64) {
    let checksum = xxh3_64(payload);
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum.to_le_bytes());
    out.extend_from_slice(payload);
    (out, checksum)
}

/// Decodes and verifies a snapshot file read from `path` (used only in error messages):
/// magic, version, flags, length and checksum. Older versions are migrated here.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<Snapshot> {
    if bytes.len() < 10 {
        return Err(CheckpointError::Truncated {
            path: path.into(),
            expected: HEADER_LEN as u64,
            actual: bytes.len() as u64,
        });
    }
    if bytes[..8] != MAGIC {
        return Err(CheckpointError::BadMagic {
            path: path.into(),
            found: bytes[..8].to_vec(),
        });
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    match version {
        1 => decode_v1(path, bytes),
        other => Err(CheckpointError::UnsupportedVersion {
            path: path.into(),
            version: u32::from(other),
            supported: u32::from(FORMAT_VERSION),
        }),
    }
}

fn decode_v1(path: &Path, bytes: &[u8]) -> Result<Snapshot> {
    let actual = bytes.len() as u64;
    let header = bytes
        .get(..HEADER_LEN)
        .ok_or_else(|| CheckpointError::Truncated {
            path: path.into(),
            expected: HEADER_LEN as u64,
            actual,
        })?;
    let u64_at = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let flags = u16::from_le_bytes([header[10], header[11]]);
    if flags != 0 {
        return Err(CheckpointError::Corrupt {
            path: path.into(),
            detail: format!("unknown header flags {flags:#06x} in a version-1 snapshot"),
        });
    }
    let payload_len = u64_at(12);
    let recorded = u64_at(20);
    let expected = (HEADER_LEN as u64).saturating_add(payload_len);
    if actual < expected {
        return Err(CheckpointError::Truncated {
            path: path.into(),
            expected,
            actual,
        });
    }
    if actual > expected {
        return Err(CheckpointError::SizeMismatch {
            path: path.into(),
            expected,
            actual,
        });
    }
    let payload = &bytes[HEADER_LEN..];
    let checksum = xxh3_64(payload);
    if checksum != recorded {
        return Err(CheckpointError::ChecksumMismatch {
            path: path.into(),
            expected: recorded,
            actual: checksum,
        });
    }
    Ok(Snapshot {
        format_version: 1,
        file_size: actual,
        payload_xxh3: checksum,
        payload: payload.to_vec(),
    })
}
