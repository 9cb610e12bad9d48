//! Where `weir gen` writes: a JSON Lines file (or stdout) or a Kafka topic.
//!
//! The Kafka sink keys each record by user; the producer (`weir_kafka::record_producer`) uses
//! librdkafka's `murmur2_random` partitioner, so a key lands on the partition a Java client
//! would choose, and any failed delivery fails the run with the broker's error.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use weir_kafka::record_producer::RecordProducer;

use super::clickstream::GeneratedEvent;

/// A destination for generated records.
pub(crate) trait EventSink {
    /// Writes (or enqueues) one record.
    fn send(&mut self, event: &GeneratedEvent) -> Result<()>;
    /// Flushes everything and reports any failure.
    fn finish(&mut self) -> Result<()>;
}

/// One payload per line; `-` means stdout.
pub(crate) struct JsonlSink {
    out: BufWriter<Box<dyn Write>>,
}

impl JsonlSink {
    pub(crate) fn create(path: &Path) -> Result<Self> {
        let inner: Box<dyn Write> = if path.as_os_str() == "-" {
            Box::new(io::stdout().lock())
        } else {
            Box::new(
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
            )
        };
        Ok(Self {
            out: BufWriter::with_capacity(1 << 20, inner),
        })
    }
}

impl EventSink for JsonlSink {
    fn send(&mut self, event: &GeneratedEvent) -> Result<()> {
        self.out.write_all(&event.payload)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.out.flush().context("flushing generator output")
    }
}

/// Produces keyed records to one topic (`weir_kafka::record_producer`).
pub(crate) struct KafkaSink {
    producer: RecordProducer,
}

impl KafkaSink {
    /// A producer for `topic` at `brokers`; `props` override the defaults.
    pub(crate) fn create(brokers: &str, topic: &str, props: &[(String, String)]) -> Result<Self> {
        Ok(Self {
            producer: RecordProducer::create(brokers, topic, props)?,
        })
    }
}

impl EventSink for KafkaSink {
    fn send(&mut self, event: &GeneratedEvent) -> Result<()> {
        Ok(self.producer.send(event.key.as_bytes(), &event.payload)?)
    }

    fn finish(&mut self) -> Result<()> {
        Ok(self.producer.finish()?)
    }
}
