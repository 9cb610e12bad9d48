//! Key-group sections inside a snapshot payload. A stateful operator writes its state as one
//! section per key group, so that after a rescale an instance keeps the key groups it now owns
//! without decoding the others (and incremental snapshots can later reuse unchanged groups).
//!
//! Layout (little-endian): `count: u32`, then `count` times `key_group: u32, len: u64, bytes`.
//! Each section's bytes are the operator's own versioned encoding of that key group's state.

use std::path::Path;

use crate::error::{CheckpointError, Result};
use crate::range::KeyGroupRange;

/// Encodes `(key_group, state bytes)` sections into one payload, in the given order.
pub fn encode_sections<'a>(sections: impl IntoIterator<Item = (u32, &'a [u8])>) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut count = 0u32;
    for (key_group, bytes) in sections {
        out.extend_from_slice(&key_group.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
        count += 1;
    }
    out[..4].copy_from_slice(&count.to_le_bytes());
    out
}

/// The sections of `payload` (read from `path`, for messages) whose key group is in `keep`,
/// borrowed from the payload. Fails when the payload is malformed.
pub fn decode_sections<'a>(
    path: &Path,
    payload: &'a [u8],
    keep: KeyGroupRange,
) -> Result<Vec<(u32, &'a [u8])>> {
    let corrupt = |detail: String| CheckpointError::Corrupt {
        path: path.into(),
        detail,
    };
    let mut rest = payload;
    let mut take = |n: usize, what: &str| -> Result<&'a [u8]> {
        if rest.len() < n {
            return Err(corrupt(format!(
                "key-group sections end early: {what} needs {n} bytes, {} left",
                rest.len()
            )));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let word = |bytes: &[u8]| {
        bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
    };
    let count = word(take(4, "the section count")?);
    let mut out = Vec::new();
    for _ in 0..count {
        let key_group = word(take(4, "a key group")?) as u32;
        let len = word(take(8, "a section length")?);
        let len = usize::try_from(len)
            .map_err(|_| corrupt(format!("section length {len} does not fit in memory")))?;
        let bytes = take(len, "a section")?;
        if keep.contains(key_group) {
            out.push((key_group, bytes));
        }
    }
    if !rest.is_empty() {
        return Err(corrupt(format!(
            "{} bytes follow the last key-group section",
            rest.len()
        )));
    }
    Ok(out)
}
