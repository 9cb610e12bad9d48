//! The Kafka source's per-partition gauges (`weir_source_consumer_lag_records`, watermark,
//! delay, idle; `weir_operators::metrics::SourcePartitions`), set once per tick by each source
//! instance for the partitions it reads.
//!
//! Lag is measured against the partition's high watermark as listed when the instance was
//! assigned the partition, then as librdkafka last saw it in a fetch response (its
//! statistics, every `statistics.interval.ms`, 1 s unless the job's properties say otherwise;
//! a bounded run's end offset when higher), from the next offset the instance will emit. A partition that reported its end (partition EOF) and has had no record since
//! has lag 0.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use rdkafka::statistics::Statistics;

use weir_features::watermark::PartitionWatermarks;
use weir_operators::metrics::{JobMetrics, PartitionGauges, SourceBehind};

/// How often librdkafka reports statistics (the high watermarks) unless the job sets
/// `statistics.interval.ms`.
pub(crate) const STATISTICS_INTERVAL_MS: &str = "1000";

/// The high watermarks of one topic as the consumer's statistics last reported them.
#[derive(Debug, Default)]
pub(crate) struct HighWatermarks {
    topic: String,
    by_partition: Mutex<BTreeMap<i32, i64>>,
}

impl HighWatermarks {
    /// Watermarks of `topic`.
    pub(crate) fn of(topic: &str) -> Self {
        HighWatermarks {
            topic: topic.to_owned(),
            by_partition: Mutex::default(),
        }
    }

    /// Takes the high watermarks of a statistics report (librdkafka's poll thread).
    pub(crate) fn update(&self, statistics: &Statistics) {
        let Some(topic) = statistics.topics.get(&self.topic) else {
            return;
        };
        let mut known = self
            .by_partition
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (partition, stats) in &topic.partitions {
            // -1 is librdkafka's internal "unassigned" partition; -1001 an unknown offset.
            if *partition >= 0 && stats.hi_offset >= 0 {
                // A high watermark never goes down; an older report must not lower it.
                let high = known.entry(*partition).or_insert(stats.hi_offset);
                *high = (*high).max(stats.hi_offset);
            }
        }
    }

    /// Records a high watermark listed at start (before the first statistics report).
    pub(crate) fn listed(&self, partition: i32, high: i64) {
        let mut known = self
            .by_partition
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = known.entry(partition).or_insert(high);
        *entry = (*entry).max(high);
    }

    fn get(&self, partition: i32) -> Option<i64> {
        self.by_partition
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&partition)
            .copied()
    }
}

/// One source instance's partition gauges, and whether it counts in
/// `weir_source_instances_behind`: from its start until a tick finds none of its partitions
/// lagging more than one activation's read (`[source] max_batch` records; the lag uses the
/// high watermark of the last statistics report, up to a second old, so a live stream reads
/// as caught up and a backlog as behind).
#[derive(Debug)]
pub(crate) struct PartitionMetrics {
    gauges: BTreeMap<i32, PartitionGauges>,
    behind: SourceBehind,
    /// A partition lagging more records than this makes the instance behind.
    behind_above: i64,
}

impl PartitionMetrics {
    /// The gauges of a source instance of the job with `metrics`, counted as behind until a
    /// tick finds no partition lagging more than `behind_above` records.
    pub(crate) fn new(metrics: &JobMetrics, behind_above: usize) -> Self {
        PartitionMetrics {
            gauges: BTreeMap::new(),
            behind: metrics.latency.source_behind(),
            behind_above: i64::try_from(behind_above).unwrap_or(i64::MAX),
        }
    }

    /// Resolves the gauges of a partition the instance now reads.
    pub(crate) fn assign(&mut self, metrics: &JobMetrics, partition: i32) {
        self.gauges
            .insert(partition, metrics.partitions.partition(partition));
    }

    /// Sets every partition's lag and watermark at `now_ms`, and whether the instance is
    /// behind.
    pub(crate) fn publish(
        &self,
        high: &HighWatermarks,
        watermarks: &PartitionWatermarks,
        (next_offsets, end_offsets): (&BTreeMap<i32, i64>, &std::collections::HashMap<i32, i64>),
        now_ms: u64,
    ) {
        let mut behind = false;
        for (&partition, gauges) in &self.gauges {
            let (caught_up, idle) = watermarks
                .partition_state(partition, now_ms)
                .unwrap_or((false, false));
            // A bounded run reads to its end offset (which a `--to` stop puts before the
            // high watermark): its lag is counted against that end.
            let high = end_offsets
                .get(&partition)
                .copied()
                .or_else(|| high.get(partition));
            let lag = match (caught_up, high, next_offsets.get(&partition)) {
                (true, _, _) => 0,
                (false, Some(high), Some(next)) => high - next,
                // Nothing known yet: no fetch answered, no position.
                _ => 0,
            };
            gauges.set_lag(lag);
            behind |= lag > self.behind_above;
            if let Some(watermark) = watermarks.partition_watermark(partition) {
                gauges.set_watermark(watermark, idle, now_ms);
            }
        }
        self.behind.set(behind);
    }
}
