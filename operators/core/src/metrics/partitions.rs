//! The sources' per-partition gauges: consumer lag against the high watermark, event-time
//! watermark and its delay behind the wall clock, and which partition holds this process's
//! watermark back. A source instance resolves its partitions' [`PartitionGauges`] once when it
//! is assigned them and sets them once per tick; [`SourcePartitions::mark_holding_back`] runs
//! before each scrape.

use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use weir_features::vocab::Watermark;

/// The `partition` label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabel {
    /// The source partition (a file source's file index).
    pub partition: i32,
}

/// One partition's gauges, kept by the source instance that reads it.
#[derive(Clone, Debug)]
pub struct PartitionGauges {
    lag: Gauge,
    watermark: Gauge<f64, std::sync::atomic::AtomicU64>,
    delay: Gauge<f64, std::sync::atomic::AtomicU64>,
    idle: Gauge,
    /// The watermark in ms (`i64::MIN`: none yet, `i64::MAX`: finished), for the holding-back
    /// choice.
    watermark_ms: Gauge,
}

impl PartitionGauges {
    /// Records the consumer lag: records between the next offset to read and the high
    /// watermark (never below 0).
    pub fn set_lag(&self, records: i64) {
        self.lag.set(records.max(0));
    }

    /// Records the partition's watermark at wall-clock `now_ms`, and whether it is idle (left
    /// out of the job's watermark).
    pub fn set_watermark(&self, watermark: Watermark, idle: bool, now_ms: u64) {
        self.watermark_ms.set(watermark.0);
        self.idle.set(i64::from(idle));
        if watermark == Watermark::MIN || watermark == Watermark::MAX {
            // No event yet, or the input is finished: no event time to show.
            self.watermark.set(f64::NAN);
            self.delay.set(0.0);
            return;
        }
        self.watermark.set(watermark.0 as f64 / 1e3);
        self.delay
            .set((now_ms as f64 - watermark.0 as f64).max(0.0) / 1e3);
    }
}

/// One partition's gauges as [`SourcePartitions::views`] reads them back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PartitionView {
    /// The source partition.
    pub partition: i32,
    /// Records behind the high watermark.
    pub lag: i64,
    /// Its watermark ([`Watermark::MIN`]: no event yet, [`Watermark::MAX`]: finished).
    pub watermark: Watermark,
    /// How far the watermark is behind the wall clock, seconds (0 without an event time).
    pub delay_seconds: f64,
    /// Whether it is idle (left out of the job's watermark).
    pub idle: bool,
}

/// Every partition's gauges in this process.
#[derive(Debug, Default)]
pub struct SourcePartitions {
    lag: Family<PartitionLabel, Gauge>,
    watermark: Family<PartitionLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    delay: Family<PartitionLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    idle: Family<PartitionLabel, Gauge>,
    holding_back: Family<PartitionLabel, Gauge>,
    seen: Mutex<Vec<(i32, PartitionGauges)>>,
}

impl SourcePartitions {
    /// The gauges of `partition` (resolve once, when the partition is assigned).
    pub fn partition(&self, partition: i32) -> PartitionGauges {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, gauges)) = seen.iter().find(|(p, _)| *p == partition) {
            return gauges.clone();
        }
        let label = PartitionLabel { partition };
        let gauges = PartitionGauges {
            lag: self.lag.get_or_create(&label).clone(),
            watermark: self.watermark.get_or_create(&label).clone(),
            delay: self.delay.get_or_create(&label).clone(),
            idle: self.idle.get_or_create(&label).clone(),
            watermark_ms: Gauge::default(),
        };
        gauges.watermark_ms.set(i64::MIN);
        seen.push((partition, gauges.clone()));
        gauges
    }

    /// Sets `weir_source_watermark_holding_back` to 1 for the partition with the lowest
    /// watermark among those neither idle nor finished (the one the job's watermark waits for
    /// in this process), 0 for the others. Returns that partition.
    pub fn mark_holding_back(&self) -> Option<i32> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let holding = seen
            .iter()
            .filter(|(_, g)| g.idle.get() == 0 && g.watermark_ms.get() != i64::MAX)
            .min_by_key(|(_, g)| g.watermark_ms.get())
            .map(|(p, _)| *p);
        for (p, _) in seen.iter() {
            let label = PartitionLabel { partition: *p };
            self.holding_back
                .get_or_create(&label)
                .set(i64::from(Some(*p) == holding));
        }
        holding
    }

    /// Every partition's lag so far, by partition.
    pub fn lags(&self) -> Vec<(i32, i64)> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut lags: Vec<_> = seen.iter().map(|(p, g)| (*p, g.lag.get())).collect();
        lags.sort_unstable();
        lags
    }

    /// Every partition's gauges as read back, by partition (the status page).
    pub fn views(&self) -> Vec<PartitionView> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut views: Vec<_> = seen
            .iter()
            .map(|(p, g)| PartitionView {
                partition: *p,
                lag: g.lag.get(),
                watermark: Watermark(g.watermark_ms.get()),
                delay_seconds: g.delay.get(),
                idle: g.idle.get() != 0,
            })
            .collect();
        views.sort_unstable_by_key(|v| v.partition);
        views
    }

    /// Registers the families.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "source_consumer_lag_records",
            "Records between a partition's next offset to read and its high watermark",
            self.lag.clone(),
        );
        registry.register_with_unit(
            "source_watermark",
            "A partition's event-time watermark (Unix time; NaN before its first event and \
             once a bounded input is read)",
            Unit::Seconds,
            self.watermark.clone(),
        );
        registry.register_with_unit(
            "source_watermark_delay",
            "How far a partition's watermark is behind the wall clock",
            Unit::Seconds,
            self.delay.clone(),
        );
        registry.register(
            "source_partition_idle",
            "1 while a partition is idle (caught up and quiet): left out of the job's watermark",
            self.idle.clone(),
        );
        registry.register(
            "source_watermark_holding_back",
            "1 for the partition whose watermark is this process's lowest among those not idle \
             (the one holding the job's watermark back)",
            self.holding_back.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use weir_features::vocab::Watermark;

    use super::SourcePartitions;

    #[test]
    fn the_lowest_watermark_not_idle_nor_finished_holds_back() {
        let partitions = SourcePartitions::default();
        let (p0, p1, p2) = (
            partitions.partition(0),
            partitions.partition(1),
            partitions.partition(2),
        );
        assert_eq!(
            partitions.mark_holding_back(),
            Some(0),
            "none seen: the first"
        );
        p0.set_watermark(Watermark(5_000), false, 10_000);
        p1.set_watermark(Watermark(2_000), true, 10_000);
        p2.set_watermark(Watermark(3_000), false, 10_000);
        assert_eq!(partitions.mark_holding_back(), Some(2), "1 is idle");
        p2.set_watermark(Watermark::MAX, false, 10_000);
        assert_eq!(partitions.mark_holding_back(), Some(0), "2 is finished");
        p0.set_lag(-3);
        p1.set_lag(7);
        assert_eq!(partitions.lags(), vec![(0, 0), (1, 7), (2, 0)]);
        let views = partitions.views();
        assert_eq!(views.len(), 3);
        assert_eq!(
            (
                views[1].partition,
                views[1].lag,
                views[1].watermark,
                views[1].idle
            ),
            (1, 7, Watermark(2_000), true)
        );
        assert_eq!(views[1].delay_seconds, 8.0);
        assert_eq!(views[2].watermark, Watermark::MAX);
        assert!(std::ptr::eq(
            partitions.partition(1).lag.inner(),
            p1.lag.inner()
        ));
    }
}
