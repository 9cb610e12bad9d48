//! The shape of the score records a job wrote (how many, their payloads' mean size, each
//! header's mean value size), and records of that shape for the raw-client baselines of K
//! (`kafka_job.rs`) and L (`live_latency.rs`): a baseline that sends what the job sends, headers
//! included. On the dev broker (tansu, SQLite) each header is a row of its storage and costs
//! about as much as a record, so a baseline without them would not measure the same work.

// Each benchmark that includes this module uses a part of it (L takes its record count from
// the job's summary).
#![allow(dead_code)]

use std::collections::BTreeMap;

use rdkafka::message::OwnedHeaders;
use weir_kafka::headers::headers_of;
use weir_kafka::topic_reader::TopicRecord;

/// What a job wrote to its score topic (every score record has the same header keys).
#[derive(Clone, Debug, Default)]
pub struct ScoreRecordShape {
    /// How many records.
    pub records: usize,
    /// Their payloads' mean size, bytes.
    pub payload_bytes: usize,
    /// Each header's key and mean value size, bytes.
    pub headers: Vec<(String, usize)>,
}

impl ScoreRecordShape {
    /// The shape of `records`.
    pub fn of(records: &[TopicRecord]) -> ScoreRecordShape {
        let n = records.len().max(1);
        let mut headers = BTreeMap::<String, usize>::new();
        for record in records {
            for (key, value) in &record.headers {
                *headers.entry(key.clone()).or_default() += value.len();
            }
        }
        ScoreRecordShape {
            records: records.len(),
            payload_bytes: records.iter().map(|r| r.payload.len()).sum::<usize>() / n,
            headers: headers
                .into_iter()
                .map(|(k, total)| (k, total / n))
                .collect(),
        }
    }

    /// A payload of the mean size.
    pub fn payload(&self) -> Vec<u8> {
        vec![b'x'; self.payload_bytes]
    }

    /// Header values of the mean sizes, by key: what [`Self::headers_of`] sends.
    pub fn header_values(&self) -> Vec<(&str, String)> {
        self.headers
            .iter()
            .map(|(key, len)| (key.as_str(), "x".repeat(*len)))
            .collect()
    }

    /// One record's headers, from [`Self::header_values`] (made once per run).
    pub fn headers_of(values: &[(&str, String)]) -> OwnedHeaders {
        headers_of(values.iter().map(|(key, value)| (*key, value.as_bytes())))
    }
}
