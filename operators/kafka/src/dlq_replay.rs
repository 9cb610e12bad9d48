//! `weir replay-dlq`: after a fix (a schema change, a model that no longer fails, a longer
//! lateness), re-send the dead letters of chosen reasons to the job's source topic. A letter's
//! key and payload are the original record's raw bytes (see `dead_letter_fit.rs` for the
//! headers); they are produced again unchanged. The read is bounded: it stops at the end
//! offsets the dead-letter topic had when the replay started, so letters that the replayed
//! records turn into again are never read by the same replay, and the target may not be the
//! dead-letter topic itself.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use weir_features::dead_letter::DeadLetterReason;

use crate::dead_letter_fit::{KEY_TRUNCATED_HEADER, PAYLOAD_TRUNCATED_HEADER, REASON_HEADER};
use crate::error::Result;
use crate::properties::brokers;
use crate::record_producer::RecordProducer;
use crate::topic_reader::{read_topic, TopicRecord};

/// What to replay.
#[derive(Clone, Debug)]
pub struct ReplayRequest {
    /// librdkafka properties (`bootstrap.servers`, security, ...).
    pub properties: BTreeMap<String, String>,
    /// The dead-letter topic to read.
    pub dead_letter_topic: String,
    /// Where to re-send (the job's source topic, or `--to-topic`).
    pub to_topic: String,
    /// Reasons to re-send; letters of other reasons are skipped.
    pub reasons: HashSet<DeadLetterReason>,
    /// Count only: send nothing.
    pub dry_run: bool,
}

/// Letters per reason (the header's text, `(none)` without one): re-sent and skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Letters re-sent (or, in a dry run, that would be).
    pub resent: BTreeMap<String, u64>,
    /// Letters of reasons not chosen.
    pub skipped: BTreeMap<String, u64>,
    /// Letters of chosen reasons whose key or payload was cut to fit the dead-letter topic:
    /// their original bytes are gone, so they are not re-sent.
    pub truncated: BTreeMap<String, u64>,
}

/// Whether a letter is re-sent, and under which reason it is counted.
fn classify(letter: &TopicRecord, reasons: &HashSet<DeadLetterReason>) -> (String, Verdict) {
    let name = letter
        .headers
        .get(REASON_HEADER)
        .cloned()
        .unwrap_or_else(|| "(none)".to_owned());
    let chosen = name
        .parse::<DeadLetterReason>()
        .is_ok_and(|reason| reasons.contains(&reason));
    let truncated = [PAYLOAD_TRUNCATED_HEADER, KEY_TRUNCATED_HEADER]
        .iter()
        .any(|h| letter.headers.contains_key(*h));
    let verdict = match (chosen, truncated) {
        (false, _) => Verdict::Skip,
        (true, true) => Verdict::Truncated,
        (true, false) => Verdict::Resend,
    };
    (name, verdict)
}

enum Verdict {
    Resend,
    Skip,
    Truncated,
}

/// Reads the dead-letter topic up to its current end and re-sends the chosen letters' raw key
/// and payload to `to_topic`, waiting for every acknowledgement. The caller refuses a
/// `to_topic` equal to the dead-letter topic (that would only duplicate the letters).
pub fn replay_dead_letters(request: &ReplayRequest) -> Result<ReplayReport> {
    let letters = read_topic(
        &request.properties,
        &request.dead_letter_topic,
        Duration::from_secs(300),
    )?;
    let mut producer = if request.dry_run {
        None
    } else {
        let properties: Vec<(String, String)> = request
            .properties
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Some(RecordProducer::create(
            &brokers(&request.properties),
            &request.to_topic,
            &properties,
        )?)
    };
    let mut report = ReplayReport::default();
    for letter in &letters {
        let (name, verdict) = classify(letter, &request.reasons);
        let counts = match verdict {
            Verdict::Skip => &mut report.skipped,
            Verdict::Truncated => &mut report.truncated,
            Verdict::Resend => {
                if let Some(producer) = producer.as_mut() {
                    producer.send_record(None, letter.key.as_deref(), &letter.payload)?;
                }
                &mut report.resent
            }
        };
        *counts.entry(name).or_default() += 1;
    }
    if let Some(producer) = producer.as_mut() {
        producer.finish()?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(headers: &[(&str, &str)]) -> TopicRecord {
        TopicRecord {
            partition: 0,
            key: Some(b"k".to_vec()),
            payload: b"raw".to_vec(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn only_chosen_whole_letters_are_resent() {
        let reasons = HashSet::from([DeadLetterReason::Late, DeadLetterReason::InferenceFailed]);
        let verdict = |headers: &[(&str, &str)]| classify(&letter(headers), &reasons);
        assert!(matches!(verdict(&[(REASON_HEADER, "late")]), (n, Verdict::Resend) if n == "late"));
        assert!(matches!(
            verdict(&[(REASON_HEADER, "malformed")]),
            (_, Verdict::Skip)
        ));
        assert!(matches!(
            verdict(&[(REASON_HEADER, "no_such")]),
            (_, Verdict::Skip)
        ));
        assert!(matches!(verdict(&[]), (n, Verdict::Skip) if n == "(none)"));
        assert!(matches!(
            verdict(&[
                (REASON_HEADER, "inference_failed"),
                (PAYLOAD_TRUNCATED_HEADER, "9000")
            ]),
            (_, Verdict::Truncated)
        ));
    }
}
