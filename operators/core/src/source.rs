//! What every source stage (Kafka, files) shares: its three output streams and the decoding of
//! one raw record into an event or a dead letter. Sources differ only in how they read bytes
//! and track partitions; everything after the bytes is this code.

use std::sync::Arc;

use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::Stream;

use weir_features::dead_letter::DeadLetter;
use weir_features::dead_letter::DeadLetterReason;
use weir_features::decode::{DecodeError, JsonDecoder};
use weir_features::record::Event;
use weir_features::vocab::{EventTime, KeyGroup, SourcePosition, Tick};
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

impl RecordDecoder {
    /// Decodes `record` into `events` or `dead`; returns the event time when it decoded.
    #[inline]
    pub fn push(
        &self,
        record: RawRecord<'_>,
        events: &mut Vec<Event>,
        dead: &mut Vec<DeadLetter>,
    ) -> Option<EventTime> {
        JobMetrics::add(&self.metrics.records_in, 1);
        // A tombstone (null payload: a delete in a compacted topic) is not an event. Its dead
        // letter has an empty payload, not a null one: a null record in a compacted
        // dead-letter topic would delete the earlier letters of its key.
        let decoded = match record.payload {
            Some(payload) => self.decoder.decode(payload),
            None => Err(DecodeError {
                reason: DeadLetterReason::Malformed,
                message: TOMBSTONE.to_owned(),
            }),
        };
        match decoded {
            Ok(decoded) => {
                JobMetrics::add(&self.metrics.events_in, 1);
                let ts = decoded.ts;
                events.push(Event {
                    key_group: KeyGroup::of(decoded.key.as_bytes(), self.key_groups),
                    key: decoded.key,
                    ts,
                    values: decoded.values,
                    position: record.position,
                });
                Some(ts)
            }
            Err(error) => {
                self.metrics.dead_letter(error.reason);
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
        }
    }

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
        assert_eq!(decoder.push(record(None), &mut events, &mut dead), None);
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
        decoder().push(record(Some(b"")), &mut events, &mut dead);
        assert_eq!(dead.len(), 1);
        assert_ne!(dead[0].error, TOMBSTONE);
        let good = br#"{"user":"u1","ts":5}"#;
        assert_eq!(
            decoder().push(record(Some(good)), &mut events, &mut dead),
            Some(5)
        );
    }
}
