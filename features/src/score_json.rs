//! The score record's JSON, the score sinks' payload (docs/ARCHITECTURE.md, "Score records"):
//! one object per scored row, its keys in the order a `serde_json::Value` object has them
//! (sorted), nested objects likewise. Pipeline position: the file and Kafka score sinks encode
//! every scored row with a [`ScoreJson`] made once per sink.
//!
//! Written byte by byte, as the feature rows are ([`crate::encode::FeatureRowsJson`]):
//! through serde, string escaping, the per-record sort of the feature names and the score id's
//! `String` were ~15 % of run S's CPU (BENCHMARKS.md, S). Numbers are written by the crates
//! serde_json formats them with and strings escaped by serde_json where they need it, so the
//! bytes are those the `Value` encoding gave (a test compares them).

use std::cell::RefCell;

use crate::encode::{write_json_string, Numbers};
use crate::row::{score_id_digest, ModelTag};
use crate::scored::ScoreView;
use crate::vocab::SourcePosition;

/// Writes the score records of one job: its feature names, in the order a JSON object keeps
/// its keys, and its source topic are escaped once, not per record; so is the last model it
/// wrote (a sink's records nearly all name one model).
#[derive(Clone, Debug)]
pub struct ScoreJson {
    /// Each feature's `"name":` and its index in a row's values, sorted by name (a stable
    /// sort: features of one name keep their order, as serde's map of them did).
    features: Vec<(usize, Vec<u8>)>,
    /// `"topic":"…"`: the source the rows were read from.
    topic: Vec<u8>,
    /// The last primary model written and its `{"name":…,"version":…}`.
    last_model: RefCell<Option<(ModelTag, Vec<u8>)>>,
}

/// A score: `null` when absent or not finite.
fn write_score(numbers: &mut Numbers, score: Option<f64>, out: &mut Vec<u8>) {
    match score {
        Some(x) => numbers.f64(x, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// `{"offset":…,"partition":…}`.
fn write_position(numbers: &mut Numbers, at: SourcePosition, out: &mut Vec<u8>) {
    out.extend_from_slice(br#"{"offset":"#);
    numbers.integer(at.offset, out);
    out.extend_from_slice(br#","partition":"#);
    numbers.integer(at.partition, out);
    out.push(b'}');
}

impl ScoreJson {
    /// The writer for rows of `feature_names` read from `source_topic`.
    pub fn new(feature_names: &[String], source_topic: &str) -> Self {
        let mut order: Vec<usize> = (0..feature_names.len()).collect();
        order.sort_by(|&a, &b| feature_names[a].cmp(&feature_names[b]));
        let features = order
            .into_iter()
            .map(|i| {
                let mut key = Vec::new();
                write_json_string(&feature_names[i], &mut key);
                key.push(b':');
                (i, key)
            })
            .collect();
        let mut topic = br#""topic":"#.to_vec();
        write_json_string(source_topic, &mut topic);
        ScoreJson {
            features,
            topic,
            last_model: RefCell::new(None),
        }
    }

    /// [`write_model`], from the text of the last model written when it is the same one.
    fn write_primary_model(&self, model: &ModelTag, out: &mut Vec<u8>) {
        let mut last = self.last_model.borrow_mut();
        match &*last {
            Some((tag, json)) if tag == model => out.extend_from_slice(json),
            _ => {
                let mut json = Vec::new();
                write_model(model, &mut json);
                out.extend_from_slice(&json);
                *last = Some((model.clone(), json));
            }
        }
    }

    /// Appends the score record of `scored` to `out`; returns its score id's text
    /// ([`crate::row::score_id`]), which the Kafka sink also sends as a header: the id is
    /// hashed once per record.
    pub fn write(&self, scored: &ScoreView<'_>, out: &mut Vec<u8>) -> [u8; 16] {
        let row = scored.row;
        let mut numbers = Numbers::default();
        out.extend_from_slice(br#"{"error":"#);
        write_optional_str(scored.error, out);
        out.extend_from_slice(br#","features":{"#);
        // A row with fewer values than names writes those it has (as serde's zip did).
        let present = self.features.iter().filter(|(i, _)| *i < row.values.len());
        for (n, (i, key)) in present.enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            numbers.f64(row.values[*i], out);
        }
        out.extend_from_slice(br#"},"inference_ts":"#);
        numbers.integer(scored.inference_ts_ms, out);
        out.extend_from_slice(br#","key":"#);
        write_json_string(row.key.as_str(), out);
        out.extend_from_slice(br#","model":"#);
        self.write_primary_model(scored.model, out);
        out.extend_from_slice(br#","revision":"#);
        numbers.integer(row.revision, out);
        out.extend_from_slice(br#","score":"#);
        write_score(&mut numbers, scored.score, out);
        out.extend_from_slice(br#","score_id":""#);
        let id = hex16(score_id_digest(
            row.key.as_str(),
            row.window_end,
            &scored.model.version,
        ));
        out.extend_from_slice(&id);
        out.push(b'"');
        if let Some(shadow) = &scored.shadow {
            out.extend_from_slice(br#","shadow":{"error":"#);
            write_optional_str(shadow.error, out);
            out.extend_from_slice(br#","model":"#);
            write_model(shadow.model, out);
            out.extend_from_slice(br#","score":"#);
            write_score(&mut numbers, shadow.score, out);
            out.push(b'}');
        }
        out.extend_from_slice(br#","source":{"first":"#);
        write_position(&mut numbers, row.first, out);
        out.extend_from_slice(br#","last":"#);
        write_position(&mut numbers, row.last, out);
        out.extend_from_slice(br#","records":"#);
        numbers.integer(row.records, out);
        out.push(b',');
        out.extend_from_slice(&self.topic);
        out.extend_from_slice(br#"},"window_end":"#);
        numbers.integer(row.window_end, out);
        out.extend_from_slice(br#","window_start":"#);
        numbers.integer(row.window_start, out);
        out.push(b'}');
        id
    }
}

/// A string, or `null`.
fn write_optional_str(text: Option<&str>, out: &mut Vec<u8>) {
    match text {
        Some(text) => write_json_string(text, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// `{"name":…,"version":…}`.
fn write_model(model: &ModelTag, out: &mut Vec<u8>) {
    out.extend_from_slice(br#"{"name":"#);
    write_json_string(model.name.as_str(), out);
    out.extend_from_slice(br#","version":"#);
    write_json_string(model.version.as_str(), out);
    out.push(b'}');
}

/// `id` as 16 lower-case hex digits ([`crate::row::score_id`]'s text).
fn hex16(id: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    std::array::from_fn(|i| DIGITS[((id >> (4 * (15 - i))) & 0xf) as usize])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::encode::{features_object, number};
    use crate::row::{score_id, FeatureRow};
    use crate::vocab::{Key, KeyGroup};

    /// The record [`ScoreJson::write`] writes for `scored`, checked to return its score id.
    fn record(json: &ScoreJson, scored: &ScoreView<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        let id = json.write(scored, &mut out);
        let row = scored.row;
        assert_eq!(
            String::from_utf8_lossy(&id),
            score_id(&row.key, row.window_end, &scored.model.version)
        );
        out
    }

    /// The score record as the `Value` encoding wrote it before the direct writer.
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
            values: [4.0, f64::NAN, 0.25, 3.0e-7].into_iter().collect(),
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
        // One writer for every record, its primary model changing from record to record (as a
        // canary's rows do) and back: each record names its own model.
        let canary = ModelTag {
            name: "purchase \"canary\"".into(),
            version: "v5".into(),
        };
        let json = ScoreJson::new(&names, "clicks \"a\"");
        for (score, error) in [
            (Some(0.125), None),
            (Some(f64::NAN), None),
            (None, Some("bad")),
        ] {
            for (shadow, model) in shadows.into_iter().zip([&primary, &canary, &primary]) {
                let view = ScoreView {
                    row: &row,
                    model,
                    score,
                    error,
                    inference_ts_ms: 1_767_225_600_123,
                    shadow,
                };
                assert_eq!(
                    String::from_utf8_lossy(&record(&json, &view)),
                    String::from_utf8_lossy(&score_through_value(&view, &names, "clicks \"a\""))
                );
            }
        }
        // A row with fewer values than names: those it has.
        let mut short = row.clone();
        short.values.truncate(2);
        let view = ScoreView {
            row: &short,
            model: &primary,
            score: Some(-1.5),
            error: None,
            inference_ts_ms: -5,
            shadow: None,
        };
        assert_eq!(
            String::from_utf8_lossy(&record(&ScoreJson::new(&names, "t"), &view)),
            String::from_utf8_lossy(&score_through_value(&view, &names, "t"))
        );
    }
}
