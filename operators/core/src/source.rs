//! What every source stage (Kafka, files) shares: its three output streams and the decoding of
//! one raw record into an event or a dead letter. Sources differ only in how they read bytes
//! and track partitions; everything after the bytes is this code.

use std::sync::Arc;

use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::Stream;

use weir_features::dead_letter::DeadLetter;
use weir_features::dead_letter::DeadLetterReason;
use weir_features::decode::{DecodeError, JsonDecoder};
use weir_features::record::{Event, Values};
use weir_features::vocab::{EventTime, Key, KeyGroup, SourcePosition, Tick};
use weir_features::watermark::WatermarkReport;

use std::collections::BTreeMap;

use weir_checkpoint::SourceOffset;
use weir_features::vocab::Watermark;
use weir_features::watermark::PartitionWatermarks;

use crate::epochs::CheckpointStream;
use crate::metrics::JobMetrics;

/// The three outputs of a source stage.
pub struct SourceStreams<'scope> {
    /// Decoded events.
    pub events: Stream<'scope, Tick, Vec<Event>>,
    /// Records that could not be decoded.
    pub dead_letters: Stream<'scope, Tick, Vec<DeadLetter>>,
    /// One progress report per tick per source instance.
    pub reports: Stream<'scope, Tick, Vec<WatermarkReport>>,
    /// Resume positions at each checkpoint epoch (and at the end of a bounded input).
    pub checkpoint: CheckpointStream<'scope>,
    /// The progress that paces the source (`Pacing::max_lag_ms`): attach it to the stream
    /// whose lag should hold the source back (`stream.probe_with(&progress)`); left
    /// unattached, it never does.
    pub progress: ProbeHandle<Tick>,
}

/// The dead-letter error of a record with a null payload.
pub const TOMBSTONE: &str =
    "null payload (a tombstone, a delete in a compacted topic), not an event";

/// Turns raw records into events (or dead letters) for one source instance.
#[derive(Clone, Debug)]
pub struct RecordDecoder {
    /// Payload decoder.
    pub decoder: JsonDecoder,
    /// Key groups of the job.
    pub key_groups: u32,
    /// Source name (topic or file path) for dead letters.
    pub source_name: String,
    /// Counters.
    pub metrics: Arc<JobMetrics>,
    /// Records whose event time is more than this many ms ahead of the wall clock are dead
    /// letters (`future_timestamp`) and never move a watermark (`[watermark] max_future`;
    /// `None`: no limit).
    pub max_future_ms: Option<i64>,
    /// Largest key and record accepted (`[source] max_key_bytes`, `max_record_bytes`).
    pub limits: RecordLimits,
}

/// Size limits checked at decode: a record over either is an `oversize` dead letter, so no
/// score or state built from it can exceed what the broker or the job can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLimits {
    /// Bytes of the decoded entity key (the key of every score and state entry built from it).
    pub max_key_bytes: usize,
    /// Bytes of the record as stored: its source key plus its payload.
    pub max_record_bytes: usize,
}

impl RecordLimits {
    /// Default key limit: 4 KiB, far above any id, far below a Kafka message.
    pub const DEFAULT_MAX_KEY_BYTES: usize = 4 * 1024;
    /// Default record limit: 1 MiB, Kafka's default `message.max.bytes`.
    pub const DEFAULT_MAX_RECORD_BYTES: usize = 1024 * 1024;

    /// Refuses a record whose key plus payload is over `max_record_bytes`.
    #[inline]
    fn check_record(&self, record: &RawRecord<'_>) -> Result<(), DecodeError> {
        let bytes = record.stored_bytes();
        if bytes <= self.max_record_bytes {
            return Ok(());
        }
        let key = record.key.map_or(0, <[u8]>::len);
        let payload = record.payload.map_or(0, <[u8]>::len);
        Err(DecodeError {
            reason: DeadLetterReason::Oversize,
            message: format!(
                "record of {bytes} bytes (key {key}, payload {payload}) is over [source] max_record_bytes ({})",
                self.max_record_bytes
            ),
        })
    }

    /// Refuses a decoded entity key over `max_key_bytes`.
    #[inline]
    fn check_key(&self, key: &str) -> Result<(), DecodeError> {
        if key.len() <= self.max_key_bytes {
            return Ok(());
        }
        Err(DecodeError {
            reason: DeadLetterReason::Oversize,
            message: format!(
                "key of {} bytes is over [source] max_key_bytes ({}); every score of it would carry it",
                key.len(),
                self.max_key_bytes
            ),
        })
    }
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            max_key_bytes: Self::DEFAULT_MAX_KEY_BYTES,
            max_record_bytes: Self::DEFAULT_MAX_RECORD_BYTES,
        }
    }
}

/// One raw record as read from a source.
#[derive(Clone, Copy, Debug)]
pub struct RawRecord<'a> {
    /// The payload bytes; `None` for a null payload (a Kafka tombstone).
    pub payload: Option<&'a [u8]>,
    /// Where it was read.
    pub position: SourcePosition,
    /// The source's own timestamp (Kafka message time), if any.
    pub timestamp: Option<EventTime>,
    /// The source's key bytes, if any.
    pub key: Option<&'a [u8]>,
}

impl RawRecord<'_> {
    /// Bytes of the record as stored: its key plus its payload.
    #[inline]
    pub fn stored_bytes(&self) -> usize {
        self.key.map_or(0, <[u8]>::len) + self.payload.map_or(0, <[u8]>::len)
    }
}

impl RecordDecoder {
    /// Counts `bytes` read (`weir_source_read_bytes_total`): the
    /// [`RawRecord::stored_bytes`] of the records a poll pushed, once per poll. The counter is
    /// one for every source instance of the process: an atomic add per record, its cache line
    /// bouncing between the workers' cores, was ~3 % of a 2-worker features run
    /// (BENCHMARKS.md, fix 41).
    pub fn count_bytes(&self, bytes: usize) {
        JobMetrics::add(&self.metrics.source_bytes, bytes as u64);
    }

    /// Decodes `record`, read at wall-clock time `now_ms`, into `events` or `dead`; returns the
    /// event time when it decoded into an event. The caller counts its bytes
    /// ([`RecordDecoder::count_bytes`]).
    #[inline]
    pub fn push(
        &self,
        record: RawRecord<'_>,
        now_ms: u64,
        events: &mut Vec<Event>,
        dead: &mut Vec<DeadLetter>,
    ) -> Option<EventTime> {
        // The event is built where it will stay, at the end of `events`, and decoded in place:
        // an event is ~260 bytes, and returning one through `Result`s copied it several times.
        let event = push_blank(events, record.position, now_ms);
        match self.decode_event(&record, now_ms, event) {
            Ok(ts) => Some(ts),
            Err(error) => {
                events.pop();
                self.metrics
                    .dead_letter_at(error.reason, record.position.partition);
                dead.push(DeadLetter {
                    reason: error.reason,
                    error: error.message,
                    topic: self.source_name.clone(),
                    position: record.position,
                    timestamp: record.timestamp,
                    key: record.key.map(<[u8]>::to_vec),
                    raw: record.payload.unwrap_or_default().to_vec(),
                });
                None
            }
        }
    }

    /// Decodes `record` into `event` (its position and read time already set): key, key
    /// group, event time and values; returns the event time.
    #[inline]
    fn decode_event(
        &self,
        record: &RawRecord<'_>,
        now_ms: u64,
        event: &mut Event,
    ) -> Result<EventTime, DecodeError> {
        self.limits.check_record(record)?;
        // A tombstone (null payload: a delete in a compacted topic) is not an event. Its dead
        // letter has an empty payload, not a null one: a null record in a compacted
        // dead-letter topic would delete the earlier letters of its key.
        let payload = record.payload.ok_or_else(|| DecodeError {
            reason: DeadLetterReason::Malformed,
            message: TOMBSTONE.to_owned(),
        })?;
        let (key, ts) = self.decoder.decode_into(payload, &mut event.values)?;
        self.limits.check_key(&key)?;
        self.check_future(ts, now_ms)?;
        event.key_group = KeyGroup::of(key.as_bytes(), self.key_groups);
        event.key = key;
        event.ts = ts;
        Ok(ts)
    }

    /// Refuses an event time more than `max_future_ms` ahead of `now_ms`.
    #[inline]
    fn check_future(&self, ts: EventTime, now_ms: u64) -> Result<(), DecodeError> {
        let Some(max_future) = self.max_future_ms else {
            return Ok(());
        };
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let ahead = ts.saturating_sub(now);
        if ahead <= max_future {
            return Ok(());
        }
        Err(DecodeError {
            reason: DeadLetterReason::FutureTimestamp,
            message: format!(
                "event time {ts} is {ahead} ms ahead of the wall clock ({now}), more than [watermark] max_future ({max_future} ms); it would hold back every later record of its partition"
            ),
        })
    }
}

/// Resume positions of a source instance: each partition's next offset with the partition's
/// watermark (what [`crate::source_operator::SourceReader::positions`] returns).
pub fn resume_positions(
    watermarks: &PartitionWatermarks,
    next_offsets: impl IntoIterator<Item = (i32, i64)>,
) -> BTreeMap<i32, SourceOffset> {
    next_offsets
        .into_iter()
        .map(|(partition, next_offset)| {
            let watermark = watermarks
                .partition_watermark(partition)
                .unwrap_or(Watermark::MIN);
            let position = SourceOffset {
                next_offset,
                watermark,
            };
            (partition, position)
        })
        .collect()
}

/// Appends a blank event (read at `position` at `now_ms`) to `events` and returns it, its
/// fields written one by one where it stays. `Vec::push` of an `Event` built on the stack
/// copied all of its ~260 bytes (its values' inline room unused), a third of the bytes a
/// 2-worker features run copied; the fields hold ~70.
#[allow(unsafe_code)]
fn push_blank(events: &mut Vec<Event>, position: SourcePosition, now_ms: u64) -> &mut Event {
    // Every field is written below: this pattern (no `..`) stops compiling when `Event` gains
    // a field, which would otherwise be left unwritten.
    let _fields_written = |event: &Event| {
        let Event {
            key: _,
            key_group: _,
            ts: _,
            values: _,
            position: _,
            ingested_ms: _,
        } = event;
    };
    events.reserve(1);
    let len = events.len();
    let slot = events.spare_capacity_mut()[0].as_mut_ptr();
    // SAFETY: `slot` is the first unused place of `events` (`reserve` made room for it):
    // every field of the event is written through it, without reading, before `set_len`
    // counts it, so the vector never holds a partly written event.
    unsafe {
        std::ptr::addr_of_mut!((*slot).key).write(Key::default());
        std::ptr::addr_of_mut!((*slot).key_group).write(KeyGroup(0));
        std::ptr::addr_of_mut!((*slot).ts).write(0);
        std::ptr::addr_of_mut!((*slot).values).write(Values::new());
        std::ptr::addr_of_mut!((*slot).position).write(position);
        std::ptr::addr_of_mut!((*slot).ingested_ms).write(now_ms);
        events.set_len(len + 1);
    }
    &mut events[len]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use weir_features::schema::{FieldDecl, FieldType, RecordSchema};

    use super::*;

    fn decoder() -> RecordDecoder {
        let fields = BTreeMap::from([
            ("user".to_owned(), FieldDecl::Type(FieldType::String)),
            ("ts".to_owned(), FieldDecl::Type(FieldType::TimestampMs)),
        ]);
        let schema = RecordSchema::new(&fields, "user", "ts").expect("schema");
        RecordDecoder {
            decoder: JsonDecoder::new(schema),
            key_groups: 16,
            source_name: "clicks".to_owned(),
            metrics: Arc::new(JobMetrics::default()),
            max_future_ms: Some(3_600_000),
            limits: RecordLimits {
                max_key_bytes: 8,
                max_record_bytes: 64,
            },
        }
    }

    /// The wall clock the tests decode at (Unix ms).
    const NOW: u64 = 1_767_225_600_000;

    fn record(payload: Option<&[u8]>) -> RawRecord<'_> {
        RawRecord {
            payload,
            position: SourcePosition {
                partition: 3,
                offset: 41,
            },
            timestamp: Some(7),
            key: Some(b"u1"),
        }
    }

    #[test]
    fn a_tombstone_is_a_dead_letter_that_says_so() {
        let (mut events, mut dead) = (Vec::new(), Vec::new());
        let decoder = decoder();
        assert_eq!(
            decoder.push(record(None), NOW, &mut events, &mut dead),
            None
        );
        assert!(events.is_empty());
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].reason, DeadLetterReason::Malformed);
        assert_eq!(dead[0].error, TOMBSTONE);
        assert_eq!(dead[0].raw, b"");
        assert_eq!(dead[0].key.as_deref(), Some(&b"u1"[..]));
        assert_eq!(dead[0].position.offset, 41);
    }

    #[test]
    fn an_empty_payload_is_malformed_json_not_a_tombstone() {
        let (mut events, mut dead) = (Vec::new(), Vec::new());
        decoder().push(record(Some(b"")), NOW, &mut events, &mut dead);
        assert_eq!(dead.len(), 1);
        assert_ne!(dead[0].error, TOMBSTONE);
        let good = br#"{"user":"u1","ts":5}"#;
        assert_eq!(
            decoder().push(record(Some(good)), NOW, &mut events, &mut dead),
            Some(5)
        );
    }

    #[test]
    fn an_event_time_too_far_ahead_of_the_wall_clock_is_a_dead_letter() {
        let (mut events, mut dead) = (Vec::new(), Vec::new());
        let decoder = decoder();
        let at = |ts: u64| format!(r#"{{"user":"u1","ts":{ts}}}"#);
        let (limit, over) = (at(NOW + 3_600_000), at(NOW + 3_600_001));
        let limit = decoder.push(record(Some(limit.as_bytes())), NOW, &mut events, &mut dead);
        assert_eq!(
            limit,
            Some((NOW + 3_600_000) as i64),
            "exactly max_future ahead is fine"
        );
        let pushed = decoder.push(record(Some(over.as_bytes())), NOW, &mut events, &mut dead);
        assert_eq!(pushed, None, "it must not reach the watermark");
        assert_eq!(events.len(), 1);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].reason, DeadLetterReason::FutureTimestamp);
        assert_eq!(dead[0].reason.as_str(), "future_timestamp");
        assert!(
            dead[0].error.contains("3600001 ms ahead") && dead[0].error.contains("max_future"),
            "{}",
            dead[0].error
        );
        assert_eq!(dead[0].raw, over.as_bytes());
        let counted = decoder.metrics.dead_letters_by_reason();
        assert!(
            counted.contains(&(DeadLetterReason::FutureTimestamp, 1)),
            "{counted:?}"
        );
        // Off: any event time is an event.
        let off = RecordDecoder {
            max_future_ms: None,
            ..decoder.clone()
        };
        let far = at(NOW * 2);
        assert!(off
            .push(record(Some(far.as_bytes())), NOW, &mut events, &mut dead)
            .is_some());
    }

    #[test]
    fn a_key_or_record_over_its_limit_is_an_oversize_dead_letter_with_its_bytes() {
        let (mut events, mut dead) = (Vec::new(), Vec::new());
        let decoder = decoder();
        let with_user = |user: &str| format!(r#"{{"user":"{user}","ts":5}}"#);
        // Exactly at the limits (8-byte key; 2-byte source key + 62-byte payload) is fine.
        let at_key = with_user("12345678");
        assert!(decoder
            .push(record(Some(at_key.as_bytes())), NOW, &mut events, &mut dead)
            .is_some());
        let at_record = format!(r#"{{"user":"u1","ts":5,"pad":"{}"}}"#, "x".repeat(33));
        assert_eq!(at_record.len(), 62);
        assert!(decoder
            .push(
                record(Some(at_record.as_bytes())),
                NOW,
                &mut events,
                &mut dead
            )
            .is_some());
        assert!(dead.is_empty(), "{dead:?}");

        let long_key = with_user("123456789");
        let long_record = format!(r#"{{"user":"u1","ts":5,"pad":"{}"}}"#, "x".repeat(34));
        for raw in [&long_key, &long_record] {
            let pushed = decoder.push(record(Some(raw.as_bytes())), NOW, &mut events, &mut dead);
            assert_eq!(
                pushed, None,
                "an oversize record never reaches the watermark"
            );
        }
        assert_eq!(events.len(), 2);
        assert_eq!(dead.len(), 2);
        assert!(dead.iter().all(|d| d.reason == DeadLetterReason::Oversize));
        assert!(
            dead[0].error.contains("max_key_bytes (8)"),
            "{}",
            dead[0].error
        );
        assert!(
            dead[1].error.contains("max_record_bytes (64)"),
            "{}",
            dead[1].error
        );
        assert_eq!(dead[0].raw, long_key.as_bytes());
        assert_eq!(dead[1].raw, long_record.as_bytes());
        assert_eq!(dead[1].key.as_deref(), Some(&b"u1"[..]));
        let counted = decoder.metrics.dead_letters_by_reason();
        assert!(
            counted.contains(&(DeadLetterReason::Oversize, 2)),
            "{counted:?}"
        );
    }
}
