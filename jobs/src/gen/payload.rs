//! Event payload encoding: the valid JSON event and the malformed variants the job must reject.
//!
//! A valid payload is one compact JSON object with keys in a fixed order:
//! `{"user":"u000123","ts":1767225600123,"type":"purchase","dwell_ms":1234.5,"amount":19.99}`
//! (`amount` only on purchases). No payload, valid or not, contains a `\n` or `\r` byte, so
//! every payload is one JSON Lines line.

use super::rng::Sampler;
use super::truth::EventType;

/// The ways a generated record can be malformed; each must end in the dead-letter topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MalformedKind {
    /// A strict prefix of a valid event: not JSON.
    TruncatedJson,
    /// Bytes that are not UTF-8 inside a JSON-looking object.
    InvalidUtf8,
    /// The required field `ts` is missing.
    MissingTs,
    /// The required field `user` is missing.
    MissingUser,
    /// `ts` is a string: `"ts":"yesterday"`.
    TsWrongType,
    /// `dwell_ms` is a string: `"dwell_ms":"long"`.
    DwellWrongType,
    /// `dwell_ms` is `1e999`, which overflows an `f64` (not finite).
    NumberOutOfRange,
}

impl MalformedKind {
    /// Every kind, in the order the generator draws them from.
    pub const ALL: [MalformedKind; 7] = [
        MalformedKind::TruncatedJson,
        MalformedKind::InvalidUtf8,
        MalformedKind::MissingTs,
        MalformedKind::MissingUser,
        MalformedKind::TsWrongType,
        MalformedKind::DwellWrongType,
        MalformedKind::NumberOutOfRange,
    ];

    /// A short stable name, e.g. `"missing_ts"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MalformedKind::TruncatedJson => "truncated_json",
            MalformedKind::InvalidUtf8 => "invalid_utf8",
            MalformedKind::MissingTs => "missing_ts",
            MalformedKind::MissingUser => "missing_user",
            MalformedKind::TsWrongType => "ts_wrong_type",
            MalformedKind::DwellWrongType => "dwell_wrong_type",
            MalformedKind::NumberOutOfRange => "number_out_of_range",
        }
    }
}

/// The fields of one event, before encoding.
#[derive(Debug, Clone)]
pub(crate) struct Fields<'a> {
    pub(crate) user: &'a str,
    pub(crate) ts: i64,
    pub(crate) event_type: EventType,
    pub(crate) dwell_ms: f64,
    pub(crate) amount: Option<f64>,
}

/// Encodes a valid event (dwell to 0.1 ms, amount to cents).
pub(crate) fn encode(f: &Fields<'_>) -> Vec<u8> {
    let mut s = format!(
        r#"{{"user":"{}","ts":{},"type":"{}","dwell_ms":{:.1}"#,
        f.user,
        f.ts,
        f.event_type.as_str(),
        f.dwell_ms
    );
    if let Some(amount) = f.amount {
        s.push_str(&format!(r#","amount":{amount:.2}"#));
    }
    s.push('}');
    s.into_bytes()
}

/// Encodes `f` corrupted as `kind`.
pub(crate) fn encode_malformed(
    kind: MalformedKind,
    f: &Fields<'_>,
    sampler: &mut Sampler,
) -> Vec<u8> {
    let (user, ts, ty, dwell) = (f.user, f.ts, f.event_type.as_str(), f.dwell_ms);
    match kind {
        MalformedKind::TruncatedJson => {
            let mut valid = encode(f);
            // Any strict, non-empty prefix of a JSON object is not JSON.
            let cut = 1 + sampler.below(valid.len() as u64 - 1) as usize;
            valid.truncate(cut);
            valid
        }
        MalformedKind::InvalidUtf8 => {
            let mut bytes = format!(r#"{{"user":"{user}","ts":{ts},"type":""#).into_bytes();
            bytes.extend_from_slice(&[0xFF, 0xFE, 0xC3, 0x28]);
            bytes.extend_from_slice(format!(r#"{ty}","dwell_ms":{dwell:.1}}}"#).as_bytes());
            bytes
        }
        MalformedKind::MissingTs => {
            format!(r#"{{"user":"{user}","type":"{ty}","dwell_ms":{dwell:.1}}}"#).into_bytes()
        }
        MalformedKind::MissingUser => {
            format!(r#"{{"ts":{ts},"type":"{ty}","dwell_ms":{dwell:.1}}}"#).into_bytes()
        }
        MalformedKind::TsWrongType => {
            format!(r#"{{"user":"{user}","ts":"yesterday","type":"{ty}","dwell_ms":{dwell:.1}}}"#)
                .into_bytes()
        }
        MalformedKind::DwellWrongType => {
            format!(r#"{{"user":"{user}","ts":{ts},"type":"{ty}","dwell_ms":"long"}}"#).into_bytes()
        }
        MalformedKind::NumberOutOfRange => {
            format!(r#"{{"user":"{user}","ts":{ts},"type":"{ty}","dwell_ms":1e999}}"#).into_bytes()
        }
    }
}
