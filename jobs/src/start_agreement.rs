//! The first thing a multi-process run does once its Timely cluster is connected, before any
//! worker builds the job's dataflow (DESIGN.md §4, §5): every worker tells every other where it
//! is about to start — the checkpoint epoch it chose to restore (or none), the job's topology
//! hash and its process shape — and the run goes on only if they all say the same.
//!
//! Each process picks its checkpoint on its own (`checkpointing::prepare`). They agree when the
//! checkpoint directory is one shared mount and nothing commits while they start; a directory
//! that is local to each host, an epoch committed or pruned between two starts, a different
//! `--restore` or job file on one host would otherwise restore different states in different
//! processes: keys and offsets from two points in the stream, silently wrong output. Every
//! worker sees the same set of start points, so on a disagreement every process stops with the
//! same message.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use timely::worker::Worker;

use crate::gather::all_gather;

/// Where one process is about to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartPoint {
    /// The process (`--process`).
    pub process: usize,
    /// Worker threads in the process (`[runtime] workers`).
    pub workers: usize,
    /// The checkpoint epoch it restores; `None` for a fresh start or no checkpoints.
    pub restore: Option<u64>,
    /// Whether it writes checkpoints at all.
    pub checkpoints: bool,
    /// `checkpointing::topology_hash` of its job file: the features, windows and schema.
    pub topology: u64,
}

impl StartPoint {
    /// What must be equal across processes (everything but the process index).
    fn agreed_part(&self) -> (usize, Option<u64>, bool, u64) {
        (self.workers, self.restore, self.checkpoints, self.topology)
    }

    fn describe(&self) -> String {
        let restore = match self.restore {
            Some(epoch) => format!("restores checkpoint {epoch}"),
            None if self.checkpoints => "starts fresh (no checkpoint chosen)".to_owned(),
            None => "starts fresh without checkpoints".to_owned(),
        };
        format!(
            "process {} ({} workers, topology {:016x}) {restore}",
            self.process, self.workers, self.topology
        )
    }
}

/// Exchanges `mine` with every worker of the cluster and waits for all of theirs. Returns an
/// explanation when the processes disagree. Must be called by every worker, before any other
/// dataflow is built (dataflows are matched across workers by the order they are built in).
pub fn agree(worker: &mut Worker, mine: StartPoint) -> Result<(), String> {
    let points = all_gather(worker, vec![mine]);
    compare(&points, worker.peers())
}

/// The verdict on every worker's start point (one per worker, `peers` in all).
fn compare(points: &[StartPoint], peers: usize) -> Result<(), String> {
    if points.len() != peers {
        return Err(format!(
            "expected a start point from each of {peers} workers, got {}",
            points.len()
        ));
    }
    let first = points[0].agreed_part();
    if points.iter().all(|p| p.agreed_part() == first) {
        return Ok(());
    }
    // One line per process: its workers agree with each other (they share one plan).
    let by_process: BTreeMap<usize, StartPoint> = points.iter().map(|p| (p.process, *p)).collect();
    let lines: Vec<String> = by_process.values().map(|p| p.describe()).collect();
    Err(format!(
        "the processes of this run would start from different points:\n  {}\nevery process \
         must run the same job file and flags and see the same checkpoint directory (one mount \
         shared by all hosts); pass the same --restore EPOCH to every process to pick one",
        lines.join("\n  ")
    ))
}

#[cfg(test)]
mod tests {
    use super::{compare, StartPoint};

    fn point(process: usize, restore: Option<u64>) -> StartPoint {
        StartPoint {
            process,
            workers: 2,
            restore,
            checkpoints: true,
            topology: 7,
        }
    }

    #[test]
    fn equal_start_points_agree() {
        let points = [point(0, Some(4)), point(0, Some(4)), point(1, Some(4))];
        assert_eq!(compare(&points, 3), Ok(()));
    }

    #[test]
    fn a_process_with_another_checkpoint_is_named() {
        let points = [point(0, Some(4)), point(1, None)];
        let err = compare(&points, 2).expect_err("they disagree");
        assert!(
            err.contains("process 0 (2 workers, topology 0000000000000007) restores checkpoint 4"),
            "{err}"
        );
        assert!(err.contains("process 1 (2 workers, topology 0000000000000007) starts fresh (no checkpoint chosen)"), "{err}");
    }

    #[test]
    fn another_job_or_shape_disagrees() {
        let other_job = StartPoint {
            topology: 8,
            ..point(1, Some(4))
        };
        assert!(compare(&[point(0, Some(4)), other_job], 2).is_err());
        let other_shape = StartPoint {
            workers: 1,
            ..point(1, Some(4))
        };
        assert!(compare(&[point(0, Some(4)), other_shape], 2).is_err());
        assert!(compare(&[point(0, Some(4))], 2).is_err());
    }
}
