//! The job's CPU budget for pinned inference threads (DESIGN.md §4).
//!
//! Part of the scoring stage's startup: the score stage runs its own inference threads
//! (one per score instance, each with `intra_threads` ONNX Runtime intra-op threads), and
//! when `[model] cores` pins them, [`plan_cores`] checks that the pinned threads and the
//! Timely workers fit the machine before anything starts: core ids the process may run on
//! (its affinity mask: `taskset -c 4-7` or a Kubernetes cpuset need not start at 0), no core
//! pinned twice, and `workers + instances × intra_threads <= usable cores` in every process
//! (fewer than the mask under a CPU quota). The check is a pure function of its inputs (the
//! [`CpuSet`] is injected), so it is tested without depending on the machine it runs on.

use std::sync::OnceLock;

use weir_operators::Placement;

use crate::error::{Result, ScoreError};

/// The cores this process may run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSet {
    /// The logical core ids of its affinity mask, ascending.
    pub ids: Vec<usize>,
    /// How many of them it can keep busy at once: `ids.len()`, or fewer under a CPU quota
    /// (a cgroup limit, e.g. a Kubernetes CPU limit), as the OS reports it.
    pub capacity: usize,
}

impl CpuSet {
    /// Cores `0..n`, all usable.
    pub fn first(n: usize) -> Self {
        CpuSet {
            ids: (0..n).collect(),
            capacity: n,
        }
    }

    /// The ids as ranges, e.g. `0-3,8`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.ids.len() {
            let start = self.ids[i];
            while i + 1 < self.ids.len() && self.ids[i + 1] == self.ids[i] + 1 {
                i += 1;
            }
            parts.push(if self.ids[i] == start {
                start.to_string()
            } else {
                format!("{start}-{}", self.ids[i])
            });
            i += 1;
        }
        parts.join(",")
    }
}

/// The cores this process may run on: its affinity mask, and the parallelism the OS allows
/// (which also counts a cgroup CPU quota).
///
/// Measured once, on first use, and remembered: the mask is per thread, and once Weir pins a
/// worker or inference thread that thread's own mask would say 1. The job file check
/// (`JobFile::compile`) calls it on the main thread before anything is pinned.
pub fn cpu_set() -> &'static CpuSet {
    static CORES: OnceLock<CpuSet> = OnceLock::new();
    CORES.get_or_init(|| {
        let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut ids: Vec<usize> = core_affinity::get_core_ids()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return CpuSet::first(parallelism);
        }
        CpuSet {
            capacity: parallelism.clamp(1, ids.len()),
            ids,
        }
    })
}

/// How many cores this process can keep busy at once ([`CpuSet::capacity`]).
pub fn available_cores() -> usize {
    cpu_set().capacity
}

/// The cores of one score instance: its inference thread runs on `cores[0]`, its extra
/// ONNX Runtime intra-op threads on `cores[1..]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceCores {
    /// Logical core ids (0-based), `intra_threads` of them.
    pub cores: Vec<usize>,
}

impl InstanceCores {
    /// ONNX Runtime's `session.intra_op_thread_affinities` value for the extra intra-op
    /// threads (1-based processor ids, one thread per `;`), or `None` with one thread.
    pub fn ort_affinities(&self) -> Option<String> {
        let extra: Vec<String> = self
            .cores
            .iter()
            .skip(1)
            .map(|c| (c + 1).to_string())
            .collect();
        (!extra.is_empty()).then(|| extra.join(";"))
    }
}

/// Splits `cores` into one [`InstanceCores`] per score instance of a process, after checking
/// that process's budget.
///
/// `cores` empty means "not pinned": no check, no pinning (the OS schedules the inference
/// threads with everything else) and `None` is returned. Otherwise `cores` lists the pinned
/// cores of one process (every process of a cluster has the same shape): exactly
/// `instances × intra_threads` distinct ids of `cpus`, where `instances` is the most
/// score instances any process hosts ([`Placement::most_on_one_process`]), and the
/// placement's threads per process `+ instances × intra_threads` must not exceed
/// `cpus.capacity`, so the Timely workers keep a core each beside the pinned inference
/// threads.
/// The instance that is the k-th on its process ([`Placement::local_index`]) gets the k-th
/// chunk.
pub fn plan_cores(
    cores: &[usize],
    placement: Placement,
    parallelism: usize,
    intra_threads: usize,
    cpus: &CpuSet,
) -> Result<Option<Vec<InstanceCores>>> {
    if cores.is_empty() {
        return Ok(None);
    }
    let err = |problem: String| Err(ScoreError::CpuBudget { problem });
    if intra_threads == 0 {
        return err(
            "[model] intra_threads = 0 lets ONNX Runtime start one thread per core, which \
             cannot be pinned; set intra_threads to the number of cores per score instance"
                .into(),
        );
    }
    let (workers, processes) = (placement.threads(), placement.processes());
    let instances = placement.most_on_one_process(parallelism);
    let shape = if processes > 1 {
        format!(
            "score parallelism {parallelism} over {processes} processes = {instances} per process"
        )
    } else {
        format!("score parallelism {parallelism}")
    };
    let pinned = instances * intra_threads;
    if cores.len() != pinned {
        return err(format!(
            "[model] cores lists {} core(s) but {shape} × intra_threads {intra_threads} needs \
             exactly {pinned}",
            cores.len()
        ));
    }
    if let Some(bad) = cores.iter().find(|c| !cpus.ids.contains(c)) {
        return err(format!(
            "[model] cores contains core {bad}, which this process may not run on: its CPU \
             affinity allows cores {} ({} core(s))",
            cpus.describe(),
            cpus.ids.len()
        ));
    }
    for (i, c) in cores.iter().enumerate() {
        if let Some(j) = cores[..i].iter().position(|d| d == c) {
            return err(format!(
                "[model] cores lists core {c} twice (positions {j} and {i}); each pinned \
                 inference thread needs its own core"
            ));
        }
    }
    let available = cpus.capacity;
    if workers + pinned > available {
        let each = if processes > 1 {
            " on each process"
        } else {
            ""
        };
        let quota = if available < cpus.ids.len() {
            format!(
                " (a CPU quota: {} cores in the affinity mask)",
                cpus.ids.len()
            )
        } else {
            String::new()
        };
        return err(format!(
            "the job oversubscribes the CPU{each}: {workers} Timely worker(s) + {pinned} pinned \
             inference thread(s) ({shape} × intra_threads {intra_threads}) = {} > \
             {available} available core(s){quota}; lower [runtime] workers, score parallelism \
             or intra_threads, or drop [model] cores to run unpinned",
            workers + pinned
        ));
    }
    Ok(Some(
        cores
            .chunks(intra_threads)
            .map(|chunk| InstanceCores {
                cores: chunk.to_vec(),
            })
            .collect(),
    ))
}

/// The core for Timely worker `worker` of this process when the inference threads hold
/// `pinned`: the cores of `cpus` not pinned, in order, one per worker (the budget check
/// guarantees enough of them); `None` when nothing is pinned.
pub fn worker_core(pinned: &[usize], cpus: &CpuSet, worker: usize) -> Option<usize> {
    if pinned.is_empty() {
        return None;
    }
    let free: Vec<usize> = cpus
        .ids
        .iter()
        .copied()
        .filter(|c| !pinned.contains(c))
        .collect();
    (!free.is_empty()).then(|| free[worker % free.len()])
}

/// Pins the calling thread to `core`; returns whether the OS accepted it.
pub fn pin_current_thread(core: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: core })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `processes` processes of `workers` Timely workers each.
    fn at(workers: usize, processes: usize) -> Placement {
        Placement::new(workers * processes, processes)
    }

    fn problem(r: Result<Option<Vec<InstanceCores>>>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(plan) => format!("unexpectedly accepted: {plan:?}"),
        }
    }

    #[test]
    fn unpinned_is_never_checked() -> Result<()> {
        assert_eq!(plan_cores(&[], at(64, 1), 64, 8, &CpuSet::first(2))?, None);
        Ok(())
    }

    #[test]
    fn fitting_plan_splits_cores_per_instance() -> Result<()> {
        let plan =
            plan_cores(&[2, 3, 4, 5], at(2, 1), 2, 2, &CpuSet::first(8))?.unwrap_or_default();
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].cores, vec![2, 3]);
        assert_eq!(plan[1].cores, vec![4, 5]);
        assert_eq!(plan[1].ort_affinities().as_deref(), Some("6"));
        assert_eq!(
            plan_cores(&[1], at(1, 1), 1, 1, &CpuSet::first(2))?.map(|p| p.len()),
            Some(1)
        );
        Ok(())
    }

    #[test]
    fn workers_take_the_cores_left_over() {
        assert_eq!(worker_core(&[], &CpuSet::first(8), 0), None);
        let six = CpuSet::first(6);
        let cores: Vec<_> = (0..3).map(|w| worker_core(&[0, 2, 3], &six, w)).collect();
        assert_eq!(cores, vec![Some(1), Some(4), Some(5)]);
        assert_eq!(worker_core(&[1], &CpuSet::first(2), 0), Some(0));
    }

    #[test]
    fn oversubscription_is_refused() {
        // 2 workers + 1 × 1 pinned = 3 > 2 cores.
        let p = problem(plan_cores(&[1], at(2, 1), 1, 1, &CpuSet::first(2)));
        assert!(p.contains("oversubscribes the CPU"), "{p}");
        assert!(p.contains("3 > 2"), "{p}");
        // Exactly full is fine: 4 workers + 2 × 2 = 8.
        assert!(plan_cores(&[4, 5, 6, 7], at(4, 1), 2, 2, &CpuSet::first(8)).is_ok());
        let p = problem(plan_cores(&[4, 5, 6, 7], at(5, 1), 2, 2, &CpuSet::first(8)));
        assert!(p.contains("9 > 8"), "{p}");
    }

    #[test]
    fn out_of_range_overlapping_and_miscounted_cores_are_refused() {
        let p = problem(plan_cores(&[2], at(1, 1), 1, 1, &CpuSet::first(2)));
        assert!(
            p.contains("contains core 2, which this process may not run on")
                && p.contains("allows cores 0-1 (2 core(s))"),
            "{p}"
        );
        let p = problem(plan_cores(&[3, 3], at(1, 1), 2, 1, &CpuSet::first(8)));
        assert!(p.contains("core 3 twice"), "{p}");
        let p = problem(plan_cores(&[1, 2, 3], at(1, 1), 2, 1, &CpuSet::first(8)));
        assert!(p.contains("needs exactly 2"), "{p}");
        let p = problem(plan_cores(&[1], at(1, 1), 1, 0, &CpuSet::first(8)));
        assert!(p.contains("intra_threads = 0"), "{p}");
    }

    #[test]
    fn a_cluster_budgets_each_process() -> Result<()> {
        // 2 processes × 1 worker on 2-core hosts, 2 score instances: one per process, so
        // each process pins one core and keeps one for its worker. The same core list
        // serves every process.
        let plan = plan_cores(&[1], at(1, 2), 2, 1, &CpuSet::first(2))?.unwrap_or_default();
        assert_eq!(plan, vec![InstanceCores { cores: vec![1] }]);
        // 3 instances over 2 processes: process 0 hosts 2 of them, so 2 cores per process.
        let p = problem(plan_cores(&[1], at(1, 2), 3, 1, &CpuSet::first(4)));
        assert!(
            p.contains("score parallelism 3 over 2 processes = 2 per process × intra_threads 1 needs exactly 2"),
            "{p}"
        );
        let p = problem(plan_cores(&[1, 2], at(2, 2), 3, 1, &CpuSet::first(3)));
        assert!(p.contains("oversubscribes the CPU on each process"), "{p}");
        assert!(p.contains("2 Timely worker(s) + 2 pinned"), "{p}");
        Ok(())
    }

    /// `taskset -c 4-7,9`: five cores, none of them 0-3.
    fn masked() -> CpuSet {
        CpuSet {
            ids: vec![4, 5, 6, 7, 9],
            capacity: 5,
        }
    }

    #[test]
    fn cores_come_from_the_affinity_mask_not_from_zero() -> Result<()> {
        let cpus = masked();
        assert_eq!(cpus.describe(), "4-7,9");
        let placement = Placement::new(2, 1);
        let refused = plan_cores(&[1], placement, 1, 1, &cpus)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.contains("contains core 1, which this process may not run on")
                && refused.contains("allows cores 4-7,9"),
            "{refused}"
        );
        let plan = plan_cores(&[9], placement, 1, 1, &cpus)?.unwrap_or_default();
        assert_eq!(plan, vec![InstanceCores { cores: vec![9] }]);
        // The workers take the mask's other cores, not 0 and 1.
        let workers: Vec<_> = (0..2).map(|w| worker_core(&[9], &cpus, w)).collect();
        assert_eq!(workers, vec![Some(4), Some(5)]);
        Ok(())
    }

    #[test]
    fn a_cpu_quota_below_the_mask_is_the_budget() {
        // 8 cores in the mask, a quota of 2: 2 workers + 1 pinned thread do not fit.
        let cpus = CpuSet {
            ids: (0..8).collect(),
            capacity: 2,
        };
        let refused = plan_cores(&[7], Placement::new(2, 1), 1, 1, &cpus)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.contains("3 > 2 available core(s) (a CPU quota: 8 cores in the affinity mask)"),
            "{refused}"
        );
    }
}
