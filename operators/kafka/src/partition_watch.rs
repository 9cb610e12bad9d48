//! Partition discovery for the unbounded Kafka source ([`crate::source`]): partitions added to
//! the topic while the job runs are found and read, like Flink's periodic partition discovery.
//! A thread per source instance asks the broker for the topic's partition count every
//! interval, off the Timely worker (a slow broker never stalls a worker). For each new
//! partition the instance owns ([`owned_between`]), it resolves the earliest
//! offset, so every record produced since the partition was created is read; the source
//! assigns it at its next poll.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use weir_features::ownership::instance_for_partition;

use crate::admin::partition_count;
use crate::error::{KafkaEdgeError, Result};
use crate::properties::client_config;

/// A partition this instance has not read before, and the offset to start it at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewPartition {
    /// The partition.
    pub partition: i32,
    /// Its earliest retained offset when discovered.
    pub first_offset: i64,
}

/// Which partitions a source instance watches for.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// The topic.
    pub topic: String,
    /// librdkafka properties (the source's).
    pub properties: BTreeMap<String, String>,
    /// This source instance.
    pub instance: u32,
    /// Number of source instances.
    pub parallelism: usize,
    /// Partitions known when the source opened (`0..known`).
    pub known: usize,
    /// How often to ask.
    pub every: Duration,
}

/// The running watch of one source instance. Dropping it stops the thread at its next wake
/// (it is not joined: a metadata request in flight may take up to 30 s, and the worker must
/// not wait for it at shutdown).
pub struct PartitionWatch {
    found: Receiver<NewPartition>,
    /// Dropped with the watch: the thread's wait ends with `Disconnected` and it returns.
    _stop: Sender<()>,
}

impl PartitionWatch {
    /// Starts watching on a thread of its own with its own metadata client.
    pub fn start(config: WatchConfig) -> Result<PartitionWatch> {
        let consumer: BaseConsumer =
            client_config(&config.properties, &[])
                .create()
                .map_err(|source| KafkaEdgeError::Client {
                    role: "partition watch",
                    source,
                })?;
        let (found_tx, found) = mpsc::channel();
        let (stop, stop_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("weir-partitions-{}", config.instance))
            .spawn(move || watch(&consumer, &config, &stop_rx, &found_tx))
            .map_err(|source| KafkaEdgeError::Thread {
                what: "partition discovery",
                source,
            })?;
        Ok(PartitionWatch { found, _stop: stop })
    }

    /// New partitions found since the last call (never blocks).
    pub fn take(&self) -> Vec<NewPartition> {
        self.found.try_iter().collect()
    }
}

/// The partitions in `from..to` that source instance `instance` of `parallelism` owns
/// (`p % parallelism == instance`, [`instance_for_partition`]).
pub fn owned_between(from: usize, to: usize, instance: u32, parallelism: usize) -> Vec<i32> {
    (from..to)
        .map(|p| p as i32)
        .filter(|&p| instance_for_partition(p, parallelism) == instance as usize)
        .collect()
}

fn watch(
    consumer: &BaseConsumer,
    config: &WatchConfig,
    stop: &Receiver<()>,
    found: &Sender<NewPartition>,
) {
    let mut known = config.known;
    loop {
        match stop.recv_timeout(config.every) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        // Serve the client's own events (errors) so they do not pile up between wakes; it
        // is subscribed to nothing, so no message comes back.
        while let Some(event) = consumer.poll(Duration::ZERO) {
            if let Err(error) = event {
                tracing::debug!(topic = config.topic, %error, "partition discovery client event");
            }
        }
        let count = match partition_count(consumer, &config.topic) {
            Ok(count) => count,
            Err(error) => {
                tracing::warn!(topic = config.topic, %error, "partition discovery: metadata request failed; trying again next interval");
                continue;
            }
        };
        if count <= known {
            continue;
        }
        tracing::info!(
            topic = config.topic,
            before = known,
            now = count,
            "partition discovery: the topic has new partitions"
        );
        // Up to where this round found everything it owns (all of it, unless a request fails).
        let mut reached = count;
        for partition in owned_between(known, count, config.instance, config.parallelism) {
            let earliest =
                consumer.fetch_watermarks(&config.topic, partition, Duration::from_secs(10));
            match earliest {
                Ok((low, _)) => {
                    let new = NewPartition {
                        partition,
                        first_offset: low,
                    };
                    if found.send(new).is_err() {
                        return; // the source is gone
                    }
                }
                Err(error) => {
                    // Ask again next interval, from this partition on (partitions are only
                    // ever added, so `known` moving up to here loses nothing).
                    tracing::warn!(topic = config.topic, partition, %error, "partition discovery: cannot list offsets; trying again next interval");
                    reached = partition as usize;
                    break;
                }
            }
        }
        known = reached;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_owns_the_new_partitions_of_its_residue() {
        assert_eq!(owned_between(4, 8, 1, 2), vec![5, 7]);
        assert_eq!(owned_between(4, 8, 0, 2), vec![4, 6]);
        assert_eq!(owned_between(4, 6, 2, 3), vec![5]);
        assert_eq!(owned_between(4, 4, 0, 1), Vec::<i32>::new());
    }
}
