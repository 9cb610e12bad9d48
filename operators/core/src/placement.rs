//! Where operator instances run (DESIGN.md §4). Every operator exists on every Timely worker;
//! a stage with parallelism `p` runs its `p` instances on chosen workers, spread across
//! processes first, and exchange routes send each record to its instance's worker: by key
//! group ([`Placement::key_group_route`]) or by source partition
//! ([`Placement::partition_route`]). Which instance owns what is
//! [`weir_features::ownership`]'s rule, shared with the checkpoint ranges.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use weir_features::ownership::{instance_for_key_group, instance_for_partition};
use weir_features::vocab::KeyGroup;

use crate::error::{OperatorError, Result};

/// The shape of a Timely computation: `processes × threads_per_process` workers, numbered
/// process-major (worker = process * threads + thread), as Timely numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    processes: usize,
    threads: usize,
}

impl Placement {
    /// A placement for `peers` workers over `processes` processes (`peers % processes == 0`).
    pub fn new(peers: usize, processes: usize) -> Placement {
        let processes = processes.max(1);
        Placement {
            processes,
            threads: (peers / processes).max(1),
        }
    }

    /// Total number of workers.
    pub fn workers(&self) -> usize {
        self.processes * self.threads
    }

    /// The worker that hosts instance `instance` of a stage (`instance < workers()`):
    /// instance i goes to process `i % processes`, thread `i / processes`.
    pub fn worker_of(&self, instance: usize) -> usize {
        let process = instance % self.processes;
        let thread = (instance / self.processes) % self.threads;
        process * self.threads + thread
    }

    /// The exchange route of a keyed stage with parallelism `parallelism`: the worker of the
    /// instance that owns `key_group` among `key_groups` ([`instance_for_key_group`]).
    pub fn key_group_route(&self, key_group: KeyGroup, key_groups: u32, parallelism: usize) -> u64 {
        self.worker_of(instance_for_key_group(key_group, key_groups, parallelism)) as u64
    }

    /// The exchange route by source partition: the worker of the instance of a stage with
    /// parallelism `parallelism` that `partition` goes to, by the sources' own rule
    /// ([`instance_for_partition`]).
    pub fn partition_route(&self, partition: i32, parallelism: usize) -> u64 {
        self.worker_of(instance_for_partition(partition, parallelism)) as u64
    }

    /// Number of processes.
    pub fn processes(&self) -> usize {
        self.processes
    }

    /// Worker threads per process.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The most instances of a stage with parallelism `parallelism` that one process hosts
    /// (instances go to processes in turn, [`Placement::worker_of`]).
    pub fn most_on_one_process(&self, parallelism: usize) -> usize {
        parallelism.div_ceil(self.processes)
    }

    /// Which of its process's instances of a stage `instance` is (0 for the first instance a
    /// process hosts): the thread it runs on, `i / processes`.
    pub fn local_index(&self, instance: usize) -> usize {
        (instance / self.processes) % self.threads
    }

    /// The instance of a stage with parallelism `parallelism` hosted by `worker`, if any.
    pub fn instance_on(&self, worker: usize, parallelism: usize) -> Option<usize> {
        let process = worker / self.threads;
        let thread = worker % self.threads;
        let instance = thread * self.processes + process;
        (instance < parallelism).then_some(instance)
    }
}

/// The worker of each key group of a keyed stage ([`Placement::key_group_route`]), looked up
/// in a table instead of computed per record: the rule takes a division for the instance and
/// two more for its worker, ~1 % of a 2-worker features run in the exchange's loop over its
/// events (BENCHMARKS.md, F, fix 85). The table holds a `u16` per key group (8 KiB for the
/// default 4 096); past [`KeyGroupRoutes::MOST_LOOKED_UP`] groups, or past `u16::MAX` workers,
/// routes are computed as before.
#[derive(Clone, Debug)]
pub struct KeyGroupRoutes {
    by_group: Arc<[u16]>,
    placement: Placement,
    key_groups: u32,
    parallelism: usize,
}

impl KeyGroupRoutes {
    /// The most key groups whose routes are kept in a table (128 KiB of them).
    pub const MOST_LOOKED_UP: u32 = 1 << 16;

    /// The routes of a stage with parallelism `parallelism` over `key_groups` key groups.
    pub fn new(placement: Placement, key_groups: u32, parallelism: usize) -> KeyGroupRoutes {
        let route = |g| placement.key_group_route(KeyGroup(g), key_groups, parallelism);
        let by_group = if key_groups <= Self::MOST_LOOKED_UP {
            (0..key_groups)
                .map(|g| u16::try_from(route(g)))
                .collect::<std::result::Result<_, _>>()
                .unwrap_or_default()
        } else {
            Arc::default()
        };
        KeyGroupRoutes {
            by_group,
            placement,
            key_groups,
            parallelism,
        }
    }

    /// The worker of `key_group`'s instance.
    #[inline]
    pub fn route(&self, key_group: KeyGroup) -> u64 {
        match self.by_group.get(key_group.0 as usize) {
            Some(&worker) => u64::from(worker),
            None => self
                .placement
                .key_group_route(key_group, self.key_groups, self.parallelism),
        }
    }
}

/// Per-stage parallelism of a job (DESIGN.md §4). Each value is `1..=workers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageParallelism {
    /// Kafka (or file) source instances.
    pub source: usize,
    /// Keyed window-feature instances.
    pub window: usize,
    /// Scoring instances.
    pub score: usize,
    /// Sink instances.
    pub sink: usize,
}

impl StageParallelism {
    /// Every stage on every worker.
    pub fn uniform(workers: usize) -> Self {
        StageParallelism {
            source: workers,
            window: workers,
            score: workers,
            sink: workers,
        }
    }

    /// Checks `1 <= p <= workers` for each stage, naming the offending stage.
    pub fn validate(&self, workers: usize) -> Result<()> {
        for (stage, parallelism) in [
            ("source", self.source),
            ("window", self.window),
            ("score", self.score),
            ("sink", self.sink),
        ] {
            if parallelism == 0 || parallelism > workers {
                return Err(OperatorError::Parallelism {
                    stage,
                    parallelism,
                    workers,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_past_the_table_are_routed_by_the_rule() {
        let placement = Placement::new(6, 2);
        let key_groups = KeyGroupRoutes::MOST_LOOKED_UP * 2 + 3;
        let routes = KeyGroupRoutes::new(placement, key_groups, 5);
        for g in (0..key_groups).step_by(997).chain([key_groups - 1]) {
            let rule = placement.key_group_route(KeyGroup(g), key_groups, 5);
            assert_eq!(routes.route(KeyGroup(g)), rule, "key group {g}");
        }
        assert!(routes.by_group.is_empty(), "computed, not looked up");
    }

    #[test]
    fn instances_spread_over_processes_and_invert() {
        let placement = Placement::new(6, 2);
        let workers: Vec<usize> = (0..6).map(|i| placement.worker_of(i)).collect();
        assert_eq!(workers, vec![0, 3, 1, 4, 2, 5]);
        for p in 1..=6 {
            for i in 0..p {
                assert_eq!(placement.instance_on(placement.worker_of(i), p), Some(i));
            }
            let hosting = (0..6)
                .filter(|w| placement.instance_on(*w, p).is_some())
                .count();
            assert_eq!(hosting, p);
        }
    }

    #[test]
    fn local_index_counts_a_process_own_instances() {
        // 2 processes × 3 threads: instances 0, 2, 4 on process 0 and 1, 3, 5 on process 1.
        let placement = Placement::new(6, 2);
        let local: Vec<usize> = (0..6).map(|i| placement.local_index(i)).collect();
        assert_eq!(local, vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(placement.most_on_one_process(3), 2);
        assert_eq!(placement.most_on_one_process(6), 3);
        // One process: the instance itself.
        let single = Placement::new(4, 1);
        assert_eq!(
            (0..4).map(|i| single.local_index(i)).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn key_group_ranges_are_contiguous_and_cover_all_instances() {
        let mut last = 0;
        for kg in 0..4096 {
            let i = instance_for_key_group(KeyGroup(kg), 4096, 3);
            assert!(i >= last && i < 3);
            last = i;
        }
        assert_eq!(last, 2);
    }
}
