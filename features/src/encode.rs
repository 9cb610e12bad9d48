//! JSON encodings of what leaves the pipeline: score records (the sink's payload) and the
//! re-encoding of a decoded event (the payload of a `late` dead letter, whose original bytes
//! the window operator no longer holds; its source position points at the original).

use serde::Serialize;
use serde_json::{json, Map, Value as Json};

use crate::record::{Event, Value};
use crate::row::{score_id, ModelTag};
use crate::schema::{FieldType, RecordSchema};
use crate::scored::ScoreView;
use crate::timestamp;

fn number(x: f64) -> Json {
    serde_json::Number::from_f64(x).map_or(Json::Null, Json::Number)
}

/// `{name: value}` for a feature row's values (null = missing).
fn features_object(feature_names: &[String], values: &[f64]) -> Map<String, Json> {
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

/// The score record written to the output topic (see docs/ARCHITECTURE.md, "Score records").
pub fn score_json(scored: &ScoreView<'_>, feature_names: &[String], source_topic: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    write_score_json(scored, feature_names, source_topic, &mut out);
    out
}

/// [`score_json`], appended to `out`. Serialized straight from the view (no
/// `serde_json::Value` per record), with every object's keys in the order a `Value` object
/// has them (sorted), so the bytes are those the `Value` encoding gave.
pub fn write_score_json(
    scored: &ScoreView<'_>,
    feature_names: &[String],
    source_topic: &str,
    out: &mut Vec<u8>,
) {
    #[derive(Serialize)]
    struct Model<'a> {
        name: &'a str,
        version: &'a str,
    }
    #[derive(Serialize)]
    struct Position {
        offset: i64,
        partition: i32,
    }
    #[derive(Serialize)]
    struct Source<'a> {
        first: Position,
        last: Position,
        records: u64,
        topic: &'a str,
    }
    #[derive(Serialize)]
    struct Shadow<'a> {
        error: Option<&'a str>,
        model: Model<'a>,
        score: Option<f64>,
    }
    #[derive(Serialize)]
    struct Record<'a> {
        error: Option<&'a str>,
        features: FeaturesObject<'a>,
        inference_ts: i64,
        key: &'a str,
        model: Model<'a>,
        revision: u32,
        score: Option<f64>,
        score_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        shadow: Option<Shadow<'a>>,
        source: Source<'a>,
        window_end: i64,
        window_start: i64,
    }
    fn model(tag: &ModelTag) -> Model<'_> {
        Model {
            name: tag.name.as_str(),
            version: tag.version.as_str(),
        }
    }
    let row = scored.row;
    let position = |p: crate::vocab::SourcePosition| Position {
        offset: p.offset,
        partition: p.partition,
    };
    let record = Record {
        error: scored.error,
        features: FeaturesObject {
            names: feature_names,
            values: &row.values,
        },
        inference_ts: scored.inference_ts_ms,
        key: row.key.as_str(),
        model: model(scored.model),
        revision: row.revision,
        score: finite(scored.score),
        score_id: score_id(&row.key, row.window_end, &scored.model.version),
        shadow: scored.shadow.map(|shadow| Shadow {
            error: shadow.error,
            model: model(shadow.model),
            score: finite(shadow.score),
        }),
        source: Source {
            first: position(row.first),
            last: position(row.last),
            records: row.records,
            topic: source_topic,
        },
        window_end: row.window_end,
        window_start: row.window_start,
    };
    // Writing to a Vec cannot fail, and every field serializes.
    let _ = serde_json::to_writer(out, &record);
}

/// A score as [`number`] writes it: a non-finite one is null.
fn finite(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite())
}

/// `{name: value}` for a feature row's values, names in sorted order as in a `Value` object
/// ([`features_object`]'s bytes), missing values null.
struct FeaturesObject<'a> {
    names: &'a [String],
    values: &'a [f64],
}

impl Serialize for FeaturesObject<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let n = self.names.len().min(self.values.len());
        let mut order: smallvec::SmallVec<[usize; 16]> = (0..n).collect();
        order.sort_by(|&a, &b| self.names[a].cmp(&self.names[b]));
        serializer.collect_map(
            order
                .into_iter()
                .map(|i| (&self.names[i], finite(Some(self.values[i])))),
        )
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

/// A feature row as one JSON object (`weir features` output), appended to `out`: key, window
/// bounds, revision, whether it was closed by the state TTL, and the values in feature order
/// (null = missing), with the keys in the order a `serde_json::Value` object has them (sorted).
/// Written byte by byte rather than through serde (a features run writes a line per window,
/// and serde's writer was ~12 % of run F): numbers by the crates serde_json formats them with
/// (`zmij` for floats, `itoa` for integers) and the key through serde_json when it needs an
/// escape, so the bytes are serde_json's.
pub fn write_feature_row_json(row: &crate::row::FeatureRow, out: &mut Vec<u8>) {
    out.extend_from_slice(if row.closed_by_timeout {
        br#"{"closed_by_timeout":true,"features":["#
    } else {
        br#"{"closed_by_timeout":false,"features":["#
    });
    let (mut floats, mut integers) = (zmij::Buffer::new(), itoa::Buffer::new());
    for (i, &x) in row.values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_f64(x, (&mut floats, &mut integers), out);
    }
    out.extend_from_slice(br#"],"key":"#);
    write_json_string(row.key.as_str(), out);
    out.extend_from_slice(br#","revision":"#);
    out.extend_from_slice(integers.format(row.revision).as_bytes());
    out.extend_from_slice(br#","window_end":"#);
    out.extend_from_slice(integers.format(row.window_end).as_bytes());
    out.extend_from_slice(br#","window_start":"#);
    out.extend_from_slice(integers.format(row.window_start).as_bytes());
    out.push(b'}');
}

/// Below this magnitude an integral f64 is written as its integer and `.0`, which is what
/// zmij writes for it (from 1e16 on it writes an exponent; `-0.0` keeps its sign there).
const INTEGRAL_AS_INTEGER: f64 = 1e15;

/// A number as serde_json writes an f64 (`null` when it is not finite). Counts are most of a
/// feature row's values: those are written by `itoa`, faster than the float formatter.
fn write_f64(
    x: f64,
    (floats, integers): (&mut zmij::Buffer, &mut itoa::Buffer),
    out: &mut Vec<u8>,
) {
    // Integral below the bound: its conversion to i64 is exact and converts back to it (a
    // cast, where `fract` is a libm call per value).
    let integral = x.abs() < INTEGRAL_AS_INTEGER && (x as i64) as f64 == x;
    if !x.is_finite() {
        out.extend_from_slice(b"null");
    } else if integral && (x != 0.0 || x.is_sign_positive()) {
        out.extend_from_slice(integers.format(x as i64).as_bytes());
        out.extend_from_slice(b".0");
    } else {
        out.extend_from_slice(floats.format_finite(x).as_bytes());
    }
}

/// `text` as a JSON string: copied between quotes when nothing in it needs an escape (a
/// quote, a backslash or a control character), else escaped by serde_json.
fn write_json_string(text: &str, out: &mut Vec<u8>) {
    if text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(out, text);
        return;
    }
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::FeatureRow;
    use crate::vocab::{Key, KeyGroup, SourcePosition};

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

    /// The score record as the `Value` encoding wrote it before `write_score_json`.
    fn score_through_value(scored: &ScoreView<'_>, names: &[String], topic: &str) -> Vec<u8> {
        let row = scored.row;
        let mut record = json!({
            "score_id": score_id(&row.key, row.window_end, &scored.model.version),
            "key": row.key.as_str(),
            "window_start": row.window_start,
            "window_end": row.window_end,
            "revision": row.revision,
            "features": features_object(names, &row.values),
            "score": scored.score.map(number),
            "error": scored.error,
            "model": { "name": scored.model.name, "version": scored.model.version },
            "inference_ts": scored.inference_ts_ms,
            "source": {
                "topic": topic,
                "first": { "partition": row.first.partition, "offset": row.first.offset },
                "last": { "partition": row.last.partition, "offset": row.last.offset },
                "records": row.records,
            },
        });
        if let (Some(shadow), Some(object)) = (&scored.shadow, record.as_object_mut()) {
            object.insert(
                "shadow".to_owned(),
                json!({
                    "model": { "name": shadow.model.name, "version": shadow.model.version },
                    "score": shadow.score.map(number),
                    "error": shadow.error,
                }),
            );
        }
        serde_json::to_vec(&record).unwrap_or_default()
    }

    #[test]
    fn score_records_are_written_byte_for_byte_as_their_value_encoding() {
        let at = |offset| SourcePosition {
            partition: 2,
            offset,
        };
        let row = FeatureRow {
            key: Key::from("u\"7"),
            key_group: KeyGroup(1),
            window_start: 60_000,
            window_end: 120_000,
            revision: 1,
            values: [4.0, f64::NAN, 0.25, -3.5].into_iter().collect(),
            records: 9,
            first: at(10),
            last: at(99),
            fired_at_ns: 1,
            closed_by_timeout: false,
            ingested_at_ms: 2,
        };
        let names: Vec<String> = ["views", "amount_max", "dwell \"ms\"", "clicks"]
            .map(String::from)
            .into();
        let tag = |version: &str| ModelTag {
            name: "purchase".into(),
            version: version.into(),
        };
        let (primary, second) = (tag("v3"), tag("v4"));
        let shadows = [
            None,
            Some(crate::scored::ShadowView {
                model: &second,
                score: Some(0.5),
                error: None,
            }),
            Some(crate::scored::ShadowView {
                model: &second,
                score: None,
                error: Some("shadow failed"),
            }),
        ];
        for (score, error) in [
            (Some(0.125), None),
            (Some(f64::NAN), None),
            (None, Some("bad")),
        ] {
            for shadow in shadows {
                let view = ScoreView {
                    row: &row,
                    model: &primary,
                    score,
                    error,
                    inference_ts_ms: 1_767_225_600_123,
                    shadow,
                };
                assert_eq!(
                    String::from_utf8_lossy(&score_json(&view, &names, "clicks")),
                    String::from_utf8_lossy(&score_through_value(&view, &names, "clicks"))
                );
            }
        }
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
        for (key, values, closed) in [
            ("u1", &values[..], false),
            ("a \"quoted\" key\n\u{e9}", &values[..2], true),
            ("back\\slash\t\u{1}\u{1f}\u{7f}", &values[4..], false),
            ("", &[][..], false),
        ] {
            let row = FeatureRow {
                key: Key::from(key),
                key_group: KeyGroup(3),
                window_start: -60_000,
                window_end: 0,
                revision: 7,
                values: values.iter().copied().collect(),
                records: 4,
                first: at,
                last: at,
                fired_at_ns: 5,
                closed_by_timeout: closed,
                ingested_at_ms: 6,
            };
            let mut direct = b"before".to_vec();
            write_feature_row_json(&row, &mut direct);
            let want = [&b"before"[..], &through_value(&row)].concat();
            assert_eq!(
                String::from_utf8_lossy(&direct),
                String::from_utf8_lossy(&want)
            );
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_f64s() {
        let (mut floats, mut integers) = (zmij::Buffer::new(), itoa::Buffer::new());
        let mut check = |x: f64| {
            let mut ours = Vec::new();
            write_f64(x, (&mut floats, &mut integers), &mut ours);
            let theirs = serde_json::to_vec(&Some(x).filter(|x| x.is_finite())).unwrap_or_default();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "{x:e}"
            );
        };
        for n in -100_000..100_000_i64 {
            check(n as f64);
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
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::NAN,
            f64::NEG_INFINITY,
        ] {
            check(x);
        }
    }
}
