//! Fitting a dead letter into one Kafka record (used by the dead-letter sink in [`crate::sink`]).
//! A bad input record can be as large as the input topic allows, and the dead letter adds its
//! headers to it; librdkafka refuses a message whose wire size exceeds the producer's
//! `message.max.bytes` before it is ever sent. Such a dead letter would be lost, and a lost
//! record stops every later checkpoint. Instead, the letter keeps its headers (reason, error,
//! source position) and as much of the key and payload as fits, and says how long they were:
//! the original stays readable at its position in the source topic while it is retained.

use std::collections::BTreeMap;

/// librdkafka's default `message.max.bytes` (below Apache Kafka's broker default 1,048,588).
pub const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// Bytes a record needs beyond its key, payload and header bytes, with room to spare:
/// librdkafka counts at most 36 bytes of record framing (length, attributes, deltas and
/// lengths as varints) and up to 10 bytes of varints per header.
const RECORD_FRAMING: usize = 64;
const PER_HEADER: usize = 10;

/// Headers of every dead letter, in the order they are written: reason, error, source topic,
/// partition, offset, timestamp (what Kafka Connect's DLQ headers carry).
pub const LETTER_HEADERS: [&str; 6] = [
    REASON_HEADER,
    "weir.dlq.error",
    "weir.dlq.topic",
    "weir.dlq.partition",
    "weir.dlq.offset",
    "weir.dlq.timestamp",
];
/// The header holding a letter's reason (`DeadLetterReason::as_str`).
pub const REASON_HEADER: &str = "weir.dlq.reason";
/// Header naming the payload's original length when it was cut.
pub const PAYLOAD_TRUNCATED_HEADER: &str = "weir.dlq.truncated";
/// Header naming the key's original length when it was cut.
pub const KEY_TRUNCATED_HEADER: &str = "weir.dlq.key_truncated";
/// The longest value either truncation header can have (`usize::MAX` in decimal).
const TRUNCATION_VALUE: usize = 20;

/// The producer's `message.max.bytes`: the job's setting, else librdkafka's default.
pub fn message_max_bytes(properties: &BTreeMap<String, String>) -> usize {
    properties
        .get("message.max.bytes")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES)
}

/// Size on the wire of headers given as (name, value) pairs.
pub fn headers_size<'a>(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> usize {
    headers
        .into_iter()
        .map(|(name, value)| name.len() + value.len() + PER_HEADER)
        .sum()
}

/// The key and payload to send, cut to fit `limit` bytes with headers of `headers` bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Fitted<'a> {
    /// The key, whole or cut.
    pub key: Option<&'a [u8]>,
    /// The payload, whole or cut.
    pub payload: &'a [u8],
    /// The key's original length, when it was cut.
    pub key_cut_from: Option<usize>,
    /// The payload's original length, when it was cut.
    pub payload_cut_from: Option<usize>,
}

/// Cuts the payload first (the key routes the record and is usually short), then the key,
/// so that the record with its `headers` bytes and any truncation headers fits `limit`.
pub fn fit<'a>(
    key: Option<&'a [u8]>,
    payload: &'a [u8],
    headers: usize,
    limit: usize,
) -> Fitted<'a> {
    let key_len = key.map_or(0, <[u8]>::len);
    let whole = RECORD_FRAMING + headers + key_len + payload.len();
    if whole <= limit {
        return Fitted {
            key,
            payload,
            key_cut_from: None,
            payload_cut_from: None,
        };
    }
    // Room for both truncation headers, whichever are needed.
    let marker = PAYLOAD_TRUNCATED_HEADER.len() + KEY_TRUNCATED_HEADER.len();
    let room = limit
        .saturating_sub(RECORD_FRAMING + headers + marker + 2 * (TRUNCATION_VALUE + PER_HEADER));
    let key_kept = key_len.min(room);
    let payload_kept = payload.len().min(room - key_kept);
    Fitted {
        key: key.map(|k| &k[..key_kept]),
        payload: &payload[..payload_kept],
        key_cut_from: (key_kept < key_len).then_some(key_len),
        payload_cut_from: (payload_kept < payload.len()).then_some(payload.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of a zigzag varint (how librdkafka writes lengths in a v2 record).
    fn varint(n: usize) -> usize {
        let mut zigzag = (n as u64) << 1;
        let mut bytes = 1;
        while zigzag >= 0x80 {
            zigzag >>= 7;
            bytes += 1;
        }
        bytes
    }

    /// librdkafka's own check, independent of this module's estimate: 36 bytes of record
    /// overhead (`RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD`) + key + value + every header's name
    /// and value with their varint lengths (`rd_kafka_msg_new0`, `rd_kafka_headers_serialized_size`).
    fn librdkafka_size(f: &Fitted<'_>, headers: &[(&str, usize)]) -> usize {
        let cut = [
            f.payload_cut_from
                .map(|n| (PAYLOAD_TRUNCATED_HEADER, n.to_string().len())),
            f.key_cut_from
                .map(|n| (KEY_TRUNCATED_HEADER, n.to_string().len())),
        ];
        let header_bytes: usize = headers
            .iter()
            .copied()
            .chain(cut.into_iter().flatten())
            .map(|(name, value)| varint(name.len()) + name.len() + varint(value) + value)
            .sum();
        36 + f.key.map_or(0, <[u8]>::len) + f.payload.len() + header_bytes
    }

    /// A dead letter's six headers with values of the given total length.
    fn six_headers(values: usize) -> Vec<(&'static str, usize)> {
        let names = LETTER_HEADERS;
        names
            .iter()
            .enumerate()
            .map(|(i, name)| (*name, if i == 1 { values } else { 0 }))
            .collect()
    }

    fn estimate(headers: &[(&str, usize)]) -> usize {
        headers
            .iter()
            .map(|(name, value)| name.len() + value + PER_HEADER)
            .sum()
    }

    #[test]
    fn a_letter_that_fits_is_sent_whole() {
        let payload = vec![b'x'; 1_000];
        let f = fit(Some(b"user-1"), &payload, 300, DEFAULT_MESSAGE_MAX_BYTES);
        assert_eq!(f.payload.len(), 1_000);
        assert_eq!(f.key, Some(&b"user-1"[..]));
        assert_eq!((f.key_cut_from, f.payload_cut_from), (None, None));
    }

    #[test]
    fn a_payload_at_the_limit_is_cut_to_what_librdkafka_accepts() {
        let limit = DEFAULT_MESSAGE_MAX_BYTES;
        let headers = six_headers(200);
        for len in [limit - 400, limit - 300, limit - 20, limit, 3 * limit] {
            let payload = vec![b'x'; len];
            let f = fit(Some(b"user-1"), &payload, estimate(&headers), limit);
            let size = librdkafka_size(&f, &headers);
            assert!(
                size <= limit,
                "{len}: librdkafka would refuse {size} > {limit}"
            );
            assert!(
                size > limit - 200,
                "{len}: cut far more than needed ({size})"
            );
            assert_eq!(f.payload, &payload[..f.payload.len()]);
            assert_eq!(f.payload_cut_from.is_some(), f.payload.len() < len);
        }
    }

    #[test]
    fn an_oversized_key_is_cut_after_the_payload() {
        let key = vec![b'k'; 5_000];
        let headers = six_headers(50);
        let f = fit(Some(&key), b"{", estimate(&headers), 2_000);
        assert_eq!(f.payload, b"");
        assert_eq!(f.payload_cut_from, Some(1));
        assert_eq!(f.key_cut_from, Some(5_000));
        assert!(librdkafka_size(&f, &headers) <= 2_000);
        assert!(f.key.is_some_and(|k| k.len() > 1_500));
    }

    #[test]
    fn headers_larger_than_the_limit_leave_nothing_but_do_not_panic() {
        let f = fit(Some(b"k"), b"payload", 10_000, 1_000);
        assert_eq!((f.key, f.payload), (Some(&b""[..]), &b""[..]));
    }

    #[test]
    fn the_limit_follows_the_jobs_message_max_bytes() {
        let mut properties = BTreeMap::new();
        assert_eq!(message_max_bytes(&properties), DEFAULT_MESSAGE_MAX_BYTES);
        properties.insert("message.max.bytes".to_owned(), "4000000".to_owned());
        assert_eq!(message_max_bytes(&properties), 4_000_000);
    }
}
