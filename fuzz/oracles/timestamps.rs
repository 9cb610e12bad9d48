//! The check of the `timestamps` fuzz target, shared with the stable test that replays the
//! committed seeds (`features/tests/fuzz_seeds.rs`): every event-time parser of
//! `weir_features::timestamp` on arbitrary input. None may panic. RFC 3339 text is checked
//! against a naive reference parser written here from the RFC's grammar (§5.6), both ways:
//! what one accepts the other accepts, with the same millisecond; an accepted time re-encodes
//! (`rfc3339_from_millis`) to a string that parses back to it. Epoch numbers are checked
//! against their definitions: milliseconds are exact integers within ±2^53, seconds are
//! rounded to the nearest millisecond.

use weir_features::timestamp::{
    from_epoch_millis, from_epoch_seconds, from_rfc3339, rfc3339_from_millis, JsonNumber,
    MAX_EVENT_TIME_MS,
};

fn digits(text: &[u8], from: usize, n: usize) -> Option<i64> {
    let part = text.get(from..from + n)?;
    part.iter().try_fold(0i64, |acc, b| {
        b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0'))
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// RFC 3339 `date-time` to epoch ms, fraction cut toward the past, `:60` the last ms of its
/// minute; `None` for anything the grammar or the calendar refuses.
fn reference_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let (y, mo, d) = (digits(b, 0, 4)?, digits(b, 5, 2)?, digits(b, 8, 2)?);
    let (h, mi, s) = (digits(b, 11, 2)?, digits(b, 14, 2)?, digits(b, 17, 2)?);
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|(i, c)| b.get(*i) != Some(c))
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        ms = (0..3).fold(0, |acc, k| {
            acc * 10
                + b.get(start + k)
                    .filter(|_| start + k < i)
                    .map_or(0, |c| i64::from(c - b'0'))
        });
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (digits(b, i + 1, 2)?, digits(b, i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            if *sign == b'+' {
                oh * 60 + om
            } else {
                -(oh * 60 + om)
            }
        }
        _ => return None,
    };
    let (s, ms) = if s == 60 { (59, 999) } else { (s, ms) };
    let seconds = days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60 + s - offset_min * 60;
    Some(seconds * 1_000 + ms)
}

fn check_rfc3339(text: &str) {
    let parsed = from_rfc3339(text).ok();
    assert_eq!(parsed, reference_rfc3339(text), "{text:?}");
    if let Some(ms) = parsed {
        assert!(ms.unsigned_abs() <= MAX_EVENT_TIME_MS, "{text:?} → {ms}");
        if let Some(again) = rfc3339_from_millis(ms) {
            assert_eq!(from_rfc3339(&again), Ok(ms), "{text:?} → {ms} → {again:?}");
        }
    }
}

fn check_numbers(bits: u64) {
    let limit = MAX_EVENT_TIME_MS as i64;
    for n in [JsonNumber::I64(bits as i64), JsonNumber::U64(bits)] {
        let exact = match n {
            JsonNumber::I64(v) => i128::from(v),
            JsonNumber::U64(v) => i128::from(v),
            JsonNumber::F64(_) => unreachable!(),
        };
        let millis = from_epoch_millis(n).ok();
        let want = (exact.unsigned_abs() <= limit as u128).then_some(exact as i64);
        assert_eq!(millis, want, "{n:?} as ms");
        let seconds = from_epoch_seconds(n).ok();
        let want = (exact.unsigned_abs() * 1000 <= limit as u128).then(|| exact as i64 * 1000);
        assert_eq!(seconds, want, "{n:?} as s");
    }
    let x = f64::from_bits(bits);
    match from_epoch_millis(JsonNumber::F64(x)) {
        Ok(ms) => assert!(
            x.fract() == 0.0 && x.abs() <= limit as f64 && ms as f64 == x,
            "{x}"
        ),
        Err(_) => assert!(
            !x.is_finite() || x.fract() != 0.0 || x.abs() > limit as f64,
            "{x}"
        ),
    }
    match from_epoch_seconds(JsonNumber::F64(x)) {
        Ok(ms) => {
            assert!(ms.abs() <= limit, "{x} s → {ms}");
            assert_eq!(ms as f64, (x * 1000.0).round(), "{x} s");
        }
        Err(_) => assert!(
            !x.is_finite() || (x * 1000.0).round().abs() > limit as f64,
            "{x}"
        ),
    }
}

/// Runs `data` through every parser: its first 8 bytes as a number, all of it as RFC 3339
/// text when it is UTF-8 (panics on a disagreement).
pub fn check(data: &[u8]) {
    if let Some(bytes) = data.get(..8) {
        check_numbers(u64::from_le_bytes(bytes.try_into().expect("8 bytes")));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        check_rfc3339(text);
    }
}
