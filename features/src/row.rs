//! Feature rows: what the window operator emits per (key, window) firing and the scoring
//! stage consumes. Values follow the job's feature order (= the model's input order).

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::vocab::{EventTime, Key, KeyGroup, SourcePosition};

/// A row's feature values, inline up to 8 (no allocation per row for jobs of up to 8
/// features, and the scoring stage reads them from the row itself instead of through a
/// pointer to a heap block); wider rows spill to the heap like a `Vec`. Serialized as a
/// sequence, exactly like a `Vec<f64>`.
pub type RowValues = SmallVec<[f64; 8]>;

/// One fired window of one key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureRow {
    /// The key.
    pub key: Key,
    /// Its key group.
    pub key_group: KeyGroup,
    /// Window start (inclusive).
    pub window_start: EventTime,
    /// Window end (exclusive).
    pub window_end: EventTime,
    /// 0 for the first firing; +1 for each re-emission caused by an allowed-late record.
    pub revision: u32,
    /// Feature values in model input order; NaN means missing.
    pub values: RowValues,
    /// Number of records aggregated.
    pub records: u64,
    /// First record's source position (offset range start).
    pub first: SourcePosition,
    /// Last record's source position (offset range end).
    pub last: SourcePosition,
    /// Wall-clock time the window fired (Unix ns), set by the operator; 0 in pure code.
    pub fired_at_ns: u64,
    /// `true` when the window did not close by the watermark but was force-closed because
    /// its key had no record for the state TTL (processing time); its values cover the
    /// records seen so far, and the key's state was dropped.
    #[serde(default)]
    pub closed_by_timeout: bool,
    /// Wall-clock time (Unix ms) the source read the latest-read record of the window that
    /// this process saw; 0 when unknown (pure code, or every record came before a restore:
    /// window-state snapshots do not keep it). The start of `weir_ingest_to_score_seconds`.
    pub ingested_at_ms: u64,
}

/// Model identity attached to every score. Inline strings (up to 24 bytes, like keys), so
/// tagging each of a batch's rows copies bytes instead of allocating twice per row.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelTag {
    /// Model name from its manifest.
    pub name: CompactString,
    /// Model version from its manifest.
    pub version: CompactString,
}

/// A feature row with its score (or the reason it has none).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoredRow {
    /// The scored window.
    pub row: FeatureRow,
    /// The model that scored it.
    pub model: ModelTag,
    /// The score; `None` when inference failed.
    pub score: Option<f64>,
    /// Why inference failed, when it did.
    pub error: Option<String>,
    /// Wall-clock time of inference, Unix milliseconds.
    pub inference_ts_ms: i64,
    /// The shadow model's score of the same row, when a shadow version runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Box<ShadowScore>>,
}

/// A shadow version's score of a row: recorded beside the primary score, never used for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShadowScore {
    /// The shadow model.
    pub model: ModelTag,
    /// Its score; `None` when its inference failed.
    pub score: Option<f64>,
    /// Why its inference failed, when it did.
    pub error: Option<String>,
}

/// The deterministic id of a score: `xxh3_64(key, window_end, model_version)` in hex. Replays
/// and restores produce the same id, so consumers can deduplicate at-least-once output.
pub fn score_id(key: &str, window_end: EventTime, model_version: &str) -> String {
    format!("{:016x}", score_id_digest(key, window_end, model_version))
}

/// The number [`score_id`] writes in hex: the XXH3 of the key's length, the key, the window
/// end and the version. Hashed in one call from a stack buffer when they fit it (XXH3's
/// one-shot path; the streaming hasher was ~8 % of writing a score record, BENCHMARKS.md, S),
/// else streamed: both give the same digest.
pub(crate) fn score_id_digest(key: &str, window_end: EventTime, model_version: &str) -> u64 {
    const ROOM: usize = 128;
    let (key_len, key, end) = (
        (key.len() as u64).to_le_bytes(),
        key.as_bytes(),
        window_end.to_le_bytes(),
    );
    let parts = [&key_len[..], key, &end[..], model_version.as_bytes()];
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len <= ROOM {
        let mut buf = [0_u8; ROOM];
        let mut at = 0;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        return xxhash_rust::xxh3::xxh3_64_with_seed(&buf[..len], SCORE_ID_SEED);
    }
    let mut hasher = xxhash_rust::xxh3::Xxh3::with_seed(SCORE_ID_SEED);
    parts.iter().for_each(|part| hasher.update(part));
    hasher.digest()
}

/// Fixed seed of score ids. Changing it changes every id: never do.
const SCORE_ID_SEED: u64 = 0x5745_4952_5343_0001; // "WEIRSC" + format 1

#[cfg(test)]
mod tests {
    use super::*;

    /// [`score_id_digest`] as first written: the four parts streamed.
    fn streamed(key: &str, window_end: EventTime, model_version: &str) -> u64 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::with_seed(SCORE_ID_SEED);
        hasher.update(&(key.len() as u64).to_le_bytes());
        hasher.update(key.as_bytes());
        hasher.update(&window_end.to_le_bytes());
        hasher.update(model_version.as_bytes());
        hasher.digest()
    }

    /// Ids never change: the one-shot path and the streamed one agree on every length, on
    /// both sides of the stack buffer's room.
    #[test]
    fn score_ids_are_the_streamed_digest_at_every_length() {
        for key_len in 0..150 {
            for version_len in [0, 1, 7, 24, 60, 130] {
                let key = "k".repeat(key_len);
                let version = "v".repeat(version_len);
                let end = 1_767_225_600_000 + key_len as i64;
                assert_eq!(
                    score_id_digest(&key, end, &version),
                    streamed(&key, end, &version),
                    "key {key_len} bytes, version {version_len} bytes"
                );
            }
        }
    }

    /// One id pinned, as `weir run` wrote it before the one-shot path (the committed model,
    /// `tiny-1`, over the clickstream's first events): consumers deduplicate by ids that
    /// earlier runs wrote.
    #[test]
    fn a_score_id_is_what_earlier_runs_wrote() {
        assert_eq!(
            score_id("u000000", 1_767_225_600_000, "tiny-1"),
            "8560eb21fb9ba70f"
        );
    }
}
