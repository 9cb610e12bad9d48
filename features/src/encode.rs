//! JSON encodings of what leaves the pipeline: feature rows (`weir features`), dead letters,
//! the payload of an `inference_failed` letter, and the re-encoding of a decoded event (the
//! payload of a `late` dead letter, whose original bytes the window operator no longer holds;
//! its source position points at the original). The number writer here also writes the score
//! records (`crate::score_json`).

use serde_json::{json, Map, Value as Json};

use crate::record::{Event, Value};
use crate::schema::{FieldType, RecordSchema};
use crate::timestamp;
use crate::vocab::EventTime;

/// `x` as a JSON number, `null` when it is not finite.
pub(crate) fn number(x: f64) -> Json {
    serde_json::Number::from_f64(x).map_or(Json::Null, Json::Number)
}

/// `{name: value}` for a feature row's values (null = missing).
pub(crate) fn features_object(feature_names: &[String], values: &[f64]) -> Map<String, Json> {
    feature_names
        .iter()
        .cloned()
        .zip(values.iter().map(|x| number(*x)))
        .collect()
}

/// The payload of an `inference_failed` dead letter: the row's key, window bounds and named
/// feature values, so the failing input can be replayed against the model.
pub fn unscored_row_json(row: &crate::row::FeatureRow, feature_names: &[String]) -> Vec<u8> {
    let record = json!({
        "key": row.key.as_str(),
        "window_start": row.window_start,
        "window_end": row.window_end,
        "features": features_object(feature_names, &row.values),
    });
    serde_json::to_vec(&record).unwrap_or_default()
}

/// The JSON object of a decoded event, fields in schema order (missing fields omitted).
/// Timestamps are written in their declared format (`timestamp_s` as seconds,
/// `timestamp_rfc3339` as a UTC string with milliseconds), so the letter decodes again as the
/// same event when it is replayed to the source topic.
pub fn event_json(schema: &RecordSchema, event: &Event) -> Vec<u8> {
    let mut object = Map::new();
    for (field, value) in schema.fields().iter().zip(event.values.iter()) {
        let value = match (field.ty, value) {
            (_, Value::Missing) => continue,
            (FieldType::TimestampS, Value::Num(ms)) => {
                number(timestamp::seconds_from_millis(*ms as i64))
            }
            (FieldType::TimestampRfc3339, Value::Num(ms)) => {
                match timestamp::rfc3339_from_millis(*ms as i64) {
                    Some(text) => Json::from(text),
                    None => number(*ms),
                }
            }
            (_, value) => plain_json(value),
        };
        object.insert(field.name.clone(), value);
    }
    serde_json::to_vec(&Json::Object(object)).unwrap_or_default()
}

fn plain_json(value: &Value) -> Json {
    match value {
        Value::Missing => Json::Null,
        Value::Num(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Json::from(*x as i64),
        Value::Num(x) => number(*x),
        Value::Str(s) => Json::from(s.as_str()),
        Value::Bool(b) => Json::from(*b),
    }
}

/// A dead letter as one JSON object (file sinks): reason, error, source position, timestamp,
/// and the key and raw bytes in standard base64 (raw bytes need not be UTF-8).
pub fn dead_letter_json(letter: &crate::dead_letter::DeadLetter) -> Vec<u8> {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let record = json!({
        "reason": letter.reason.as_str(),
        "error": letter.error,
        "topic": letter.topic,
        "partition": letter.position.partition,
        "offset": letter.position.offset,
        "timestamp": letter.timestamp,
        "key_base64": letter.key.as_deref().map(b64),
        "raw_base64": b64(&letter.raw),
    });
    serde_json::to_vec(&record).unwrap_or_default()
}

/// Feature rows as JSON objects (`weir features` output), each appended to a buffer by
/// [`FeatureRowsJson::write`]: key, window bounds, revision, whether it was closed by the
/// state TTL, and the values in feature order (null = missing), with the keys in the order a
/// `serde_json::Value` object has them (sorted). Written byte by byte rather than through
/// serde (a features run writes a line per window, and serde's writer was ~12 % of run F):
/// numbers by the crates serde_json formats them with (`zmij` for floats, `itoa` for
/// integers) and the key through serde_json when it needs an escape, so the bytes are
/// serde_json's. One writer serves a stream of rows. Tumbling and hopping windows fire end by
/// end, so a row's last fields (revision and bounds) are most often the row before's: from
/// the second row of such a run on, their text is kept and copied instead of formatting
/// three integers again. Session rows, whose bounds are their own, are written directly.
#[derive(Default)]
pub struct FeatureRowsJson {
    numbers: Numbers,
    /// The text from `,"revision":` to the closing brace, for the fields `tail_of`.
    tail: Vec<u8>,
    tail_of: Option<TailFields>,
    /// The last row's fields of the tail.
    last: Option<TailFields>,
}

/// A row's revision, window end and window start: the fields its text ends with.
type TailFields = (u32, EventTime, EventTime);

impl FeatureRowsJson {
    /// Appends `row`'s JSON object to `out`.
    pub fn write(&mut self, row: &crate::row::FeatureRow, out: &mut Vec<u8>) {
        out.extend_from_slice(if row.closed_by_timeout {
            br#"{"closed_by_timeout":true,"features":["#
        } else {
            br#"{"closed_by_timeout":false,"features":["#
        });
        for (i, &x) in row.values.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            self.numbers.f64(x, out);
        }
        out.extend_from_slice(br#"],"key":"#);
        write_json_string(row.key.as_str(), out);
        let fields = (row.revision, row.window_end, row.window_start);
        let last = self.last.replace(fields);
        if self.tail_of == Some(fields) {
            out.extend_from_slice(&self.tail);
        } else if last == Some(fields) {
            // The second row of a run: its text is kept for the rest.
            self.tail.clear();
            write_tail(&mut self.numbers, fields, &mut self.tail);
            self.tail_of = Some(fields);
            out.extend_from_slice(&self.tail);
        } else {
            write_tail(&mut self.numbers, fields, out);
        }
    }
}

/// Appends `,"revision":…,"window_end":…,"window_start":…}` to `out`.
fn write_tail(numbers: &mut Numbers, (revision, end, start): TailFields, out: &mut Vec<u8>) {
    out.extend_from_slice(br#","revision":"#);
    numbers.integer(revision, out);
    out.extend_from_slice(br#","window_end":"#);
    numbers.integer(end, out);
    out.extend_from_slice(br#","window_start":"#);
    numbers.integer(start, out);
    out.push(b'}');
}

/// Numbers as serde_json writes them, by the crates it formats them with (`zmij` for floats,
/// `itoa` for integers): the formatters' buffers.
#[derive(Default)]
pub(crate) struct Numbers {
    floats: zmij::Buffer,
    integers: itoa::Buffer,
}

/// Below this magnitude an integral f64 is written as its integer and `.0`, which is what
/// zmij writes for it (from 1e16 on it writes an exponent; `-0.0` keeps its sign there).
const INTEGRAL_AS_INTEGER: f64 = 1e15;

/// Below this many tenths in magnitude a value is tried as a whole number of tenths.
const TENTHS_BOUND: f64 = 1e15;

/// `x` as a whole number of tenths that is not a whole number (measurements with one decimal,
/// and their sums and extremes, are many of a row's other values), when `x` is the double
/// nearest to that many tenths. Its shortest text that reads back as `x`, which is what zmij
/// writes, is then those tenths with the point before the last digit: a text with fewer
/// digits is a whole number, and `x` is not one. A check, not a formatter: any `x` it does
/// not confirm is left to zmij.
fn whole_tenths(x: f64) -> Option<i64> {
    let scaled = x * 10.0;
    if scaled.is_nan() || scaled.abs() >= TENTHS_BOUND {
        return None;
    }
    // The nearest whole number (the cast truncates), confirmed below.
    let tenths = (scaled + 0.5_f64.copysign(scaled)) as i64;
    (tenths % 10 != 0 && tenths as f64 / 10.0 == x).then_some(tenths)
}

impl Numbers {
    /// An integer. Inlined into its callers by hand: with [`append_short`] inside it the
    /// compiler stopped doing so, and the call cost ~1 % of a hopping run (BENCHMARKS.md, F,
    /// fix 72).
    #[inline(always)]
    pub(crate) fn integer(&mut self, n: impl itoa::Integer, out: &mut Vec<u8>) {
        append_short(out, self.integers.format(n).as_bytes());
    }

    /// A number as serde_json writes an f64 (`null` when it is not finite). Counts are most of
    /// a feature row's values: those are written by `itoa`, faster than the float formatter.
    /// Inlined into its callers' loops over a row's values (three callers: feature rows and
    /// two in score records): run F's CPU ×0.97-0.99, hopping ×0.95-0.98, in three
    /// interleaved series (BENCHMARKS.md, F, fix 69).
    #[inline(always)]
    pub(crate) fn f64(&mut self, x: f64, out: &mut Vec<u8>) {
        // A count of 0-9, most of a feature row's values: its three bytes, no formatter and
        // no copy of a formatted text (the cast saturates, and NaN casts to 0 but is not 0).
        let digit = x as u8;
        if digit < 10 && f64::from(digit) == x && x.is_sign_positive() {
            out.extend_from_slice(&[b'0' + digit, b'.', b'0']);
            return;
        }
        // Integral below the bound: its conversion to i64 is exact and converts back to it (a
        // cast, where `fract` is a libm call per value).
        let integral = x.abs() < INTEGRAL_AS_INTEGER && (x as i64) as f64 == x;
        if !x.is_finite() {
            out.extend_from_slice(b"null");
        } else if integral && (x != 0.0 || x.is_sign_positive()) {
            self.integer(x as i64, out);
            out.extend_from_slice(b".0");
        } else if let Some(tenths) = whole_tenths(x) {
            if tenths < 0 {
                out.push(b'-');
            }
            let tenths = tenths.unsigned_abs();
            self.integer(tenths / 10, out);
            out.extend_from_slice(&[b'.', b'0' + (tenths % 10) as u8]);
        } else {
            append_short(out, self.floats.format_finite(x).as_bytes());
        }
    }
}

/// `text` as a JSON string: copied between quotes when nothing in it needs an escape (a
/// quote, a backslash or a control character), else escaped by serde_json.
pub(crate) fn write_json_string(text: &str, out: &mut Vec<u8>) {
    if text.bytes().any(crate::json_scan::needs_escape) {
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(out, text);
        return;
    }
    out.push(b'"');
    append_short(out, text.as_bytes());
    out.push(b'"');
}

/// The longest text [`append_short`] copies itself.
const SHORT: usize = 32;

/// Appends `bytes` to `out` as `extend_from_slice` does. A formatted number or a key is a
/// few bytes long: a copy of a length known only at run time is a `memcpy` call, which cost
/// about as much as formatting the number. Up to [`SHORT`] bytes are copied here as two
/// fixed-size copies (of 1, 4, 8 or 16 bytes) that overlap in the middle, with no call.
#[inline(always)]
fn append_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    if n > SHORT {
        out.extend_from_slice(bytes);
        return;
    }
    out.reserve(n);
    let len = out.len();
    /// Copies `W` bytes from `bytes[at..]` to the room after `out`'s end, at `at`.
    ///
    /// SAFETY (callers): `at + W <= n`, and `out` has room for `n` more bytes.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn copy<const W: usize>(from: *const u8, to: *mut u8, at: usize) {
        // SAFETY: both ranges are in bounds by the caller's contract; a `Vec`'s spare room
        // never overlaps a borrowed slice.
        unsafe { std::ptr::copy_nonoverlapping(from.add(at), to.add(at), W) }
    }
    let (from, to) = (
        bytes.as_ptr(),
        out.spare_capacity_mut().as_mut_ptr().cast::<u8>(),
    );
    // SAFETY: each pair of copies is in bounds (its width is at most `n`) and together they
    // cover all `n` bytes; `reserve` made room for them; the length then counts exactly the
    // bytes written.
    #[allow(unsafe_code)]
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                copy::<1>(from, to, 0);
                copy::<1>(from, to, n / 2);
                copy::<1>(from, to, n - 1);
            }
            4..=7 => {
                copy::<4>(from, to, 0);
                copy::<4>(from, to, n - 4);
            }
            8..=15 => {
                copy::<8>(from, to, 0);
                copy::<8>(from, to, n - 8);
            }
            _ => {
                copy::<16>(from, to, 0);
                copy::<16>(from, to, n - 16);
            }
        }
        out.set_len(len + n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::FeatureRow;
    use crate::vocab::{Key, KeyGroup, SourcePosition};

    #[test]
    fn short_appends_equal_extend_from_slice_at_every_length_and_room() {
        let text: Vec<u8> = (0..=40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=text.len() {
            for (before, room) in [(0, 0), (3, 3), (5, 64), (17, 17)] {
                let mut expected = Vec::with_capacity(room);
                expected.extend(std::iter::repeat_n(b'x', before));
                let mut got = expected.clone();
                expected.extend_from_slice(&text[..n]);
                append_short(&mut got, &text[..n]);
                assert_eq!(got, expected, "{n} bytes after {before}");
            }
        }
    }

    /// The encoding the direct writer replaced: the same object built as a `serde_json::Value`.
    fn through_value(row: &FeatureRow) -> Vec<u8> {
        let values: Vec<Json> = row.values.iter().map(|x| number(*x)).collect();
        let record = json!({
            "key": row.key.as_str(),
            "window_start": row.window_start,
            "window_end": row.window_end,
            "revision": row.revision,
            "closed_by_timeout": row.closed_by_timeout,
            "features": values,
        });
        serde_json::to_vec(&record).unwrap_or_default()
    }

    #[test]
    fn feature_rows_are_written_byte_for_byte_as_their_value_encoding() {
        let at = SourcePosition {
            partition: 1,
            offset: 2,
        };
        let values = [
            3.0,
            -0.5,
            f64::NAN,
            f64::INFINITY,
            1e300,
            0.1 + 0.2,
            -0.0,
            5e-324,
        ];
        // One writer for every row, as a sink has: rows of one window and revision share
        // their last fields' text, and a row of another window or revision writes its own.
        let mut writer = FeatureRowsJson::default();
        for (key, values, closed, (revision, window_end)) in [
            ("u1", &values[..], false, (7, 0)),
            ("a \"quoted\" key\n\u{e9}", &values[..2], true, (7, 0)),
            (
                "back\\slash\t\u{1}\u{1f}\u{7f}",
                &values[4..],
                false,
                (8, 0),
            ),
            ("", &[][..], false, (8, 60_000)),
            ("u2", &values[..3], false, (8, 60_000)),
            ("u3", &values[1..], false, (8, 60_000)),
            ("u4", &values[1..], false, (0, -60_000)),
            ("u5", &values[1..], false, (8, 60_000)),
        ] {
            let row = FeatureRow {
                key: Key::from(key),
                key_group: KeyGroup(3),
                window_start: window_end - 60_000,
                window_end,
                revision,
                values: values.iter().copied().collect(),
                records: 4,
                first: at,
                last: at,
                fired_at_ns: 5,
                closed_by_timeout: closed,
                ingested_at_ms: 6,
            };
            let mut direct = b"before".to_vec();
            writer.write(&row, &mut direct);
            let want = [&b"before"[..], &through_value(&row)].concat();
            assert_eq!(
                String::from_utf8_lossy(&direct),
                String::from_utf8_lossy(&want)
            );
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_f64s() {
        let mut numbers = Numbers::default();
        let mut check = |x: f64| {
            let mut ours = Vec::new();
            numbers.f64(x, &mut ours);
            let theirs = serde_json::to_vec(&Some(x).filter(|x| x.is_finite())).unwrap_or_default();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "{x:e}"
            );
        };
        for n in -100_000..100_000_i64 {
            check(n as f64);
            check(n as f64 / 10.0);
            check(n as f64 / 100.0);
            check(n as f64 * 0.1);
        }
        // Doubles one step beside a tenth, and arbitrary bit patterns (seeded xorshift).
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let tenth = (state % 2_000_000) as f64 / 10.0 - 100_000.0;
            check(f64::from_bits(tenth.to_bits() + 1));
            check(f64::from_bits(tenth.to_bits().saturating_sub(1)));
            check(f64::from_bits(state));
        }
        // Tenths where the check's bound and the doubles' spacing begin to matter.
        for n in [1e13, 1e14 - 1.0, 1e14, 1e15, 2f64.powi(50), 2f64.powi(53)] {
            for offset in [-0.9, -0.5, -0.1, 0.1, 0.2, 0.5, 0.7] {
                check(n + offset);
                check(-(n + offset));
            }
        }
        let mut power = 1.0_f64;
        for _ in 0..20 {
            for x in [power - 1.0, power, power + 1.0, power * 1.5, power / 3.0] {
                check(x);
                check(-x);
            }
            power *= 10.0;
        }
        for x in [
            -0.0,
            0.0,
            0.5,
            9.5,
            9.999_999_999,
            10.0 - 1e-14,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::NAN,
            f64::NEG_INFINITY,
        ] {
            check(x);
        }
    }
}
