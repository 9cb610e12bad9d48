//! Dead letters: every record the pipeline cannot use, with why, where it came from and its
//! raw bytes. Sources, the window operator and the scoring stage all emit them; the sink writes
//! them to the dead-letter topic. Nothing is dropped silently.

use serde::{Deserialize, Serialize};

use crate::vocab::{EventTime, SourcePosition};

/// Why a record went to the dead-letter topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeadLetterReason {
    /// The bytes are not a JSON object (syntax error, truncated, invalid UTF-8, not an object).
    Malformed,
    /// A required field is absent or null.
    MissingField,
    /// A field has a value of the wrong type.
    WrongType,
    /// A number is infinite, NaN or out of the f64 range.
    NonFinite,
    /// The record's event time is behind the watermark by more than the allowed lateness.
    Late,
    /// Inference failed for the feature vector built from this record's window.
    InferenceFailed,
    /// The record's event time is more than `[watermark] max_future` ahead of the wall clock
    /// (a broken device clock): it would move its partition's watermark past every later
    /// record.
    FutureTimestamp,
    /// The record's key or whole payload is over the source's `max_key_bytes` /
    /// `max_record_bytes`: an output built from it could exceed what the broker accepts.
    Oversize,
    /// The broker refused a score or dead letter built from this record for good (too large,
    /// invalid); retriable errors are retried and never end here.
    Undeliverable,
}

impl DeadLetterReason {
    /// Stable snake_case name, used in Kafka headers and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeadLetterReason::Malformed => "malformed",
            DeadLetterReason::MissingField => "missing_field",
            DeadLetterReason::WrongType => "wrong_type",
            DeadLetterReason::NonFinite => "non_finite",
            DeadLetterReason::Late => "late",
            DeadLetterReason::InferenceFailed => "inference_failed",
            DeadLetterReason::FutureTimestamp => "future_timestamp",
            DeadLetterReason::Oversize => "oversize",
            DeadLetterReason::Undeliverable => "undeliverable",
        }
    }

    /// Whether a letter of this reason carries a source record (its raw bytes, or for `late`
    /// the decoded event re-encoded), which can be re-sent to the source topic. An
    /// `inference_failed` letter carries a feature row, an `undeliverable` one an output record.
    pub fn carries_source_record(&self) -> bool {
        !matches!(
            self,
            DeadLetterReason::InferenceFailed | DeadLetterReason::Undeliverable
        )
    }

    /// Every reason, in declaration order (`reason as usize` indexes this list).
    pub const ALL: [DeadLetterReason; 9] = [
        DeadLetterReason::Malformed,
        DeadLetterReason::MissingField,
        DeadLetterReason::WrongType,
        DeadLetterReason::NonFinite,
        DeadLetterReason::Late,
        DeadLetterReason::InferenceFailed,
        DeadLetterReason::FutureTimestamp,
        DeadLetterReason::Oversize,
        DeadLetterReason::Undeliverable,
    ];
}

impl std::str::FromStr for DeadLetterReason {
    type Err = String;

    /// The reason named by [`DeadLetterReason::as_str`] (`late`, `inference_failed`, ...).
    fn from_str(name: &str) -> Result<Self, String> {
        let name = name.trim();
        DeadLetterReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = DeadLetterReason::ALL.iter().map(|r| r.as_str()).collect();
                format!(
                    "unknown dead-letter reason `{name}`; the reasons are {}",
                    known.join(", ")
                )
            })
    }
}

/// A record that could not be used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Why.
    pub reason: DeadLetterReason,
    /// Human-readable detail (the decoder's message, the watermark it was late against, ...).
    pub error: String,
    /// Source topic (or file path).
    pub topic: String,
    /// Partition and offset of the original record.
    pub position: SourcePosition,
    /// Timestamp of the original record: the Kafka message timestamp when there is one,
    /// else its event time, else `None`.
    pub timestamp: Option<EventTime>,
    /// The original key bytes, if any.
    pub key: Option<Vec<u8>>,
    /// The original payload, byte for byte.
    pub raw: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::DeadLetterReason;

    #[test]
    fn every_reason_parses_from_its_name_and_nothing_else_does() {
        for reason in DeadLetterReason::ALL {
            assert_eq!(reason.as_str().parse::<DeadLetterReason>(), Ok(reason));
        }
        let err = "lat".parse::<DeadLetterReason>().err().unwrap_or_default();
        assert!(err.contains("unknown dead-letter reason `lat`"), "{err}");
        assert!(err.contains("late, inference_failed"), "{err}");
        assert!("Late".parse::<DeadLetterReason>().is_err());
    }

    #[test]
    fn all_lists_every_reason_at_its_discriminant() {
        for (index, reason) in DeadLetterReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index, "{}", reason.as_str());
        }
    }
}
