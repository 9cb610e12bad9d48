//! Event-time parsers: the three declared timestamp formats of a record field (epoch
//! milliseconds, epoch seconds, RFC 3339 strings) turned into the pipeline's [`EventTime`]
//! (integer milliseconds since the Unix epoch). Each is one small pure function that never
//! allocates, so the decoder calls them per record and a fuzz target can call them directly.
//! [`rfc3339_from_millis`] and [`seconds_from_millis`] are their inverses, used when a decoded
//! event is re-encoded (a `late` dead letter) so that a replay reads it back in its own format.

use std::fmt;

use crate::vocab::EventTime;

/// Largest magnitude, in milliseconds, of an event time: values are held as f64 in records,
/// which is exact up to 2^53 (about ±285 000 years).
pub const MAX_EVENT_TIME_MS: u64 = 1 << 53;

/// A JSON number as the decoder sees it: serde's three number shapes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum JsonNumber {
    /// A negative integer.
    I64(i64),
    /// A non-negative integer.
    U64(u64),
    /// A number with a fraction or an exponent.
    F64(f64),
}

/// Why a value is not a timestamp of its declared format. Carries no heap data, so a wrong
/// value costs no allocation until its message is rendered for the dead-letter topic.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TimestampError {
    /// NaN or an infinity.
    #[error("{0} is not finite")]
    NonFinite(f64),
    /// Epoch milliseconds with a fractional part.
    #[error("epoch milliseconds must be an integer, got a fractional number ({0})")]
    FractionalMillis(f64),
    /// Beyond ±2^53 milliseconds.
    #[error("{0} is outside ±2^53 ms, the exact integer range of timestamps")]
    OutOfRange(f64),
    /// Not an RFC 3339 date-time.
    #[error("not an RFC 3339 date-time like 2026-11-30T12:00:00Z or 2026-11-30T13:00:00.250+01:00 ({0})")]
    NotRfc3339(Rfc3339Error),
}

/// The RFC 3339 parser's reason (wrapped so the public API does not name chrono's type).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rfc3339Error(chrono::format::ParseError);

impl fmt::Display for Rfc3339Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

fn in_range(ms: f64) -> Result<EventTime, TimestampError> {
    if ms.abs() <= MAX_EVENT_TIME_MS as f64 {
        Ok(ms as EventTime)
    } else {
        Err(TimestampError::OutOfRange(ms))
    }
}

/// Epoch milliseconds (`timestamp_ms`): an integer, or a float with no fraction (`1000.0`),
/// within ±2^53.
pub fn from_epoch_millis(n: JsonNumber) -> Result<EventTime, TimestampError> {
    match n {
        // Exact magnitudes: 2^53 + 1 would round to 2^53 as an f64 and pass.
        JsonNumber::I64(v) if v.unsigned_abs() > MAX_EVENT_TIME_MS => {
            Err(TimestampError::OutOfRange(v as f64))
        }
        JsonNumber::U64(v) if v > MAX_EVENT_TIME_MS => Err(TimestampError::OutOfRange(v as f64)),
        JsonNumber::I64(v) => Ok(v),
        JsonNumber::U64(v) => Ok(v as EventTime),
        JsonNumber::F64(x) if !x.is_finite() => Err(TimestampError::NonFinite(x)),
        JsonNumber::F64(x) if x.fract() != 0.0 => Err(TimestampError::FractionalMillis(x)),
        JsonNumber::F64(x) => in_range(x),
    }
}

/// Epoch seconds (`timestamp_s`): an integer or a fraction (`1733097600.25`), rounded to the
/// nearest millisecond. Rounding, not truncation: `1.001` is 1.000999… in binary and must
/// still be 1001 ms, and at large magnitudes an f64 holds no digits below the millisecond.
pub fn from_epoch_seconds(n: JsonNumber) -> Result<EventTime, TimestampError> {
    let limit_s = MAX_EVENT_TIME_MS / 1000;
    match n {
        JsonNumber::I64(v) if v.unsigned_abs() > limit_s => {
            Err(TimestampError::OutOfRange(v as f64 * 1000.0))
        }
        JsonNumber::U64(v) if v > limit_s => Err(TimestampError::OutOfRange(v as f64 * 1000.0)),
        JsonNumber::I64(v) => Ok(v * 1000),
        JsonNumber::U64(v) => Ok(v as EventTime * 1000),
        JsonNumber::F64(x) if !x.is_finite() => Err(TimestampError::NonFinite(x)),
        JsonNumber::F64(x) => in_range((x * 1000.0).round()),
    }
}

/// An RFC 3339 date-time (`timestamp_rfc3339`): `2026-11-30T12:00:00Z`, with an optional
/// fraction and a `Z` or `±hh:mm` offset (a space for `T` and lower-case `t`/`z` are accepted
/// too, as RFC 3339 §5.6 allows). Fractions are cut to the millisecond toward the past; a leap
/// second (`:60`) is the last millisecond of its minute. Years 0000–9999, always in range.
pub fn from_rfc3339(text: &str) -> Result<EventTime, TimestampError> {
    use chrono::Timelike as _;
    let time = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| TimestampError::NotRfc3339(Rfc3339Error(e)))?;
    // chrono holds a leap second as second 59 with 1 s or more of nanoseconds, which
    // `timestamp_millis` would put in the next minute, after records stamped `:00.000` that
    // came later; the last millisecond of its own minute keeps event time in order.
    if time.nanosecond() >= 1_000_000_000 {
        return Ok(time.timestamp() * 1_000 + 999);
    }
    Ok(time.timestamp_millis())
}

/// `ms` as epoch seconds, the inverse of [`from_epoch_seconds`] (`1001` → `1.001`).
pub fn seconds_from_millis(ms: EventTime) -> f64 {
    ms as f64 / 1000.0
}

/// `ms` as an RFC 3339 UTC string with milliseconds (`2026-11-30T12:00:00.000Z`), the inverse
/// of [`from_rfc3339`]; `None` outside the years 0000–9999 that RFC 3339 can write.
pub fn rfc3339_from_millis(ms: EventTime) -> Option<String> {
    let time = chrono::DateTime::from_timestamp_millis(ms)?;
    let text = time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    (from_rfc3339(&text) == Ok(ms)).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_accept_integers_and_whole_floats_within_2_pow_53() {
        assert_eq!(from_epoch_millis(JsonNumber::U64(1000)), Ok(1000));
        assert_eq!(from_epoch_millis(JsonNumber::I64(-5)), Ok(-5));
        assert_eq!(from_epoch_millis(JsonNumber::F64(1000.0)), Ok(1000));
        assert_eq!(
            from_epoch_millis(JsonNumber::U64(1 << 53)),
            Ok(9_007_199_254_740_992)
        );
        assert!(matches!(
            from_epoch_millis(JsonNumber::U64((1 << 53) + 1)),
            Err(TimestampError::OutOfRange(_))
        ));
        assert!(matches!(
            from_epoch_millis(JsonNumber::F64(1000.5)),
            Err(TimestampError::FractionalMillis(_))
        ));
        assert!(matches!(
            from_epoch_millis(JsonNumber::F64(f64::NAN)),
            Err(TimestampError::NonFinite(_))
        ));
    }

    #[test]
    fn seconds_round_to_the_nearest_millisecond() {
        assert_eq!(
            from_epoch_seconds(JsonNumber::U64(1_733_097_600)),
            Ok(1_733_097_600_000)
        );
        assert_eq!(from_epoch_seconds(JsonNumber::F64(1.001)), Ok(1001));
        assert_eq!(
            from_epoch_seconds(JsonNumber::F64(1_733_097_600.123)),
            Ok(1_733_097_600_123)
        );
        assert_eq!(from_epoch_seconds(JsonNumber::F64(1.0006)), Ok(1001));
        assert_eq!(from_epoch_seconds(JsonNumber::F64(1.0004)), Ok(1000));
        assert_eq!(from_epoch_seconds(JsonNumber::F64(-0.0016)), Ok(-2));
        assert_eq!(
            from_epoch_seconds(JsonNumber::F64(167_181_245_006.233)),
            Ok(167_181_245_006_233)
        );
        assert_eq!(from_epoch_seconds(JsonNumber::I64(-2)), Ok(-2000));
        assert!(matches!(
            from_epoch_seconds(JsonNumber::U64(u64::MAX)),
            Err(TimestampError::OutOfRange(_))
        ));
        assert!(matches!(
            from_epoch_seconds(JsonNumber::F64(1e300)),
            Err(TimestampError::OutOfRange(_))
        ));
        assert!(matches!(
            from_epoch_seconds(JsonNumber::F64(f64::INFINITY)),
            Err(TimestampError::NonFinite(_))
        ));
    }

    #[test]
    fn rfc3339_takes_offsets_and_fractions() {
        let noon = 1_796_040_000_000; // 2026-11-30T12:00:00Z
        assert_eq!(from_rfc3339("2026-11-30T12:00:00Z"), Ok(noon));
        assert_eq!(from_rfc3339("2026-11-30T13:00:00+01:00"), Ok(noon));
        assert_eq!(from_rfc3339("2026-11-30t11:30:00.25-00:30"), Ok(noon + 250));
        assert_eq!(from_rfc3339("2026-11-30 12:00:00.0009z"), Ok(noon));
        assert_eq!(from_rfc3339("1969-12-31T23:59:59.999Z"), Ok(-1));
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30T12:00:00",
            "2026-11-30T25:00:00Z",
            "2026-02-30T12:00:00Z",
            "1796040000000",
            "2026-11-30T12:00:00Z trailing",
        ] {
            assert!(
                matches!(from_rfc3339(bad), Err(TimestampError::NotRfc3339(_))),
                "{bad:?} parsed"
            );
        }
    }

    #[test]
    fn inverses_read_back_to_the_same_millisecond() {
        for ms in [0, -1, 1001, 1_796_040_000_123, -62_135_596_800_000] {
            let text = rfc3339_from_millis(ms).expect("in RFC 3339 range");
            assert_eq!(from_rfc3339(&text), Ok(ms), "{text}");
            assert_eq!(
                from_epoch_seconds(JsonNumber::F64(seconds_from_millis(ms))),
                Ok(ms)
            );
        }
        assert_eq!(rfc3339_from_millis(1 << 53), None);
    }
}
