//! The first thing a multi-process run does once its Timely cluster is connected, before any
//! worker builds the job's dataflow (DESIGN.md §4, §5): every worker tells every other where it
//! is about to start and what it is about to run — the checkpoint epoch it chose to restore (or
//! none), its binary (version and executable hash), the job file's content hash, the job's
//! topology hash, its process shape and the settings the flags can change (key groups,
//! per-stage parallelism, tick, checkpoint interval, bounded, Kafka start) — and the run goes
//! on only if they all say the same. Otherwise every process exits 2 naming each difference
//! with every process's value.
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

use crate::config::CompiledJob;
use crate::gather::all_gather;
use crate::plan::SourceInput;

/// Where one process is about to start, and what it is about to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The binary: its version and a hash of its executable ([`binary_identity`]).
    pub binary: String,
    /// xxh3 of the job file's bytes (`JobFile::text_hash`).
    pub job_file: u64,
    /// Everything else the processes must share, as run (the job file with the flags
    /// applied): key groups, per-stage parallelism, tick, checkpoint interval, bounded,
    /// the Kafka start position.
    pub settings: Vec<(String, String)>,
}

impl StartPoint {
    /// Process `process`'s start point for `job`, restoring `restore`.
    pub fn of(job: &CompiledJob, process: usize, restore: Option<u64>) -> StartPoint {
        let p = &job.parallelism;
        let mut settings = vec![
            ("key groups", job.runtime.key_groups.to_string()),
            (
                "parallelism",
                format!(
                    "source={},window={},score={},sink={}",
                    p.source, p.window, p.score, p.sink
                ),
            ),
            ("processes", job.runtime.processes.to_string()),
            ("tick", format!("{:?}", job.runtime.tick)),
            (
                "checkpoint interval",
                job.checkpoints
                    .as_ref()
                    .map_or("none".to_owned(), |c| format!("{:?}", c.interval)),
            ),
            ("bounded", job.source.bounded.to_string()),
        ];
        if let SourceInput::Kafka(kafka) = &job.source.input {
            settings.push(("source start", format!("{:?}", kafka.start)));
        }
        StartPoint {
            process,
            workers: job.runtime.workers,
            restore,
            checkpoints: job.checkpoints.is_some(),
            topology: job.topology_hash,
            binary: binary_identity().to_owned(),
            job_file: job.job_file_hash,
            settings: settings
                .into_iter()
                .map(|(name, value)| (name.to_owned(), value))
                .collect(),
        }
    }

    /// What must be equal across processes, by name (everything but the process index).
    fn facts(&self) -> Vec<(String, String)> {
        let mut facts = vec![
            ("weir binary".to_owned(), self.binary.clone()),
            (
                "job file".to_owned(),
                format!("content hash {:016x}", self.job_file),
            ),
            ("workers".to_owned(), self.workers.to_string()),
            ("topology".to_owned(), format!("{:016x}", self.topology)),
        ];
        facts.extend(self.settings.iter().cloned());
        facts
    }

    /// Where it starts, for the disagreement message.
    fn restore_part(&self) -> (Option<u64>, bool) {
        (self.restore, self.checkpoints)
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

/// This binary, as processes compare it: `weir <version>, executable xxh3 <hash>`. Two hosts
/// running builds of one version from different commits, or one with local changes, differ
/// in the hash (a container image deployed everywhere, or `weir launch`, never does). Computed
/// once; an executable that cannot be read counts as its version alone.
pub fn binary_identity() -> &'static str {
    static IDENTITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IDENTITY.get_or_init(|| {
        let version = env!("CARGO_PKG_VERSION");
        let executable = std::env::current_exe().and_then(std::fs::read);
        match executable {
            Ok(bytes) => format!(
                "weir {version}, executable xxh3 {:016x}",
                xxhash_rust::xxh3::xxh3_64(&bytes)
            ),
            Err(_) => format!("weir {version}, executable unreadable"),
        }
    })
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
    // One per process: its workers agree with each other (they share one plan).
    let by_process: BTreeMap<usize, &StartPoint> = points.iter().map(|p| (p.process, p)).collect();
    let differences = differing_facts(&by_process);
    let first = points[0].restore_part();
    let same_start = points.iter().all(|p| p.restore_part() == first);
    if differences.is_empty() && same_start {
        return Ok(());
    }
    let mut message = String::from("the processes of this run would start from different points:");
    for point in by_process.values() {
        message.push_str("\n  ");
        message.push_str(&point.describe());
    }
    for difference in &differences {
        message.push_str("\n  they differ in ");
        message.push_str(difference);
    }
    message.push_str(
        "\nevery process must run the same binary, job file and flags and see the same \
         checkpoint directory (one mount shared by all hosts, or one s3:// prefix); pass the \
         same --restore EPOCH to every process to pick one checkpoint",
    );
    Err(message)
}

/// `<fact>: process 0 has …, process 1 has …` for every fact not equal in every process (a
/// fact some process lacks counts as `(not set)` there).
fn differing_facts(by_process: &BTreeMap<usize, &StartPoint>) -> Vec<String> {
    let facts: Vec<(usize, Vec<(String, String)>)> = by_process
        .iter()
        .map(|(p, point)| (*p, point.facts()))
        .collect();
    // Every fact name, in the order the processes list them.
    let mut names: Vec<&String> = Vec::new();
    for (name, _) in facts.iter().flat_map(|(_, f)| f) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut differences = Vec::new();
    for name in names {
        let value_of = |facts: &[(String, String)]| {
            facts
                .iter()
                .find(|(n, _)| n == name)
                .map_or("(not set)".to_owned(), |(_, v)| v.clone())
        };
        let values: Vec<(usize, String)> = facts.iter().map(|(p, f)| (*p, value_of(f))).collect();
        if values.iter().all(|(_, v)| *v == values[0].1) {
            continue;
        }
        let each: Vec<String> = values
            .iter()
            .map(|(process, value)| format!("process {process} has {value}"))
            .collect();
        differences.push(format!("{name}: {}", each.join(", ")));
    }
    differences
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
            binary: "weir 0.1.0, executable xxh3 00000000000000aa".to_owned(),
            job_file: 0x1234,
            settings: vec![
                ("key groups".to_owned(), "4096".to_owned()),
                (
                    "parallelism".to_owned(),
                    "source=2,window=2,score=2,sink=2".to_owned(),
                ),
            ],
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
        assert!(
            !err.contains("they differ in"),
            "only the checkpoint differs: {err}"
        );
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

    #[test]
    fn each_difference_is_named_with_every_process_value() {
        let mut other = point(1, Some(4));
        other.binary = "weir 0.1.0, executable xxh3 00000000000000bb".to_owned();
        other.job_file = 0x5678;
        other.settings[1].1 = "source=1,window=2,score=2,sink=2".to_owned();
        let err = compare(&[point(0, Some(4)), point(0, Some(4)), other], 3).expect_err("differ");
        for expected in [
            "they differ in weir binary: process 0 has weir 0.1.0, executable xxh3 00000000000000aa, process 1 has weir 0.1.0, executable xxh3 00000000000000bb",
            "they differ in job file: process 0 has content hash 0000000000001234, process 1 has content hash 0000000000005678",
            "they differ in parallelism: process 0 has source=2,window=2,score=2,sink=2, process 1 has source=1,window=2,score=2,sink=2",
        ] {
            assert!(err.contains(expected), "lacks `{expected}`:\n{err}");
        }
        assert!(
            !err.contains("key groups:"),
            "equal facts are not listed: {err}"
        );
    }

    #[test]
    fn a_setting_only_a_later_process_has_is_a_difference() {
        let mut other = point(1, Some(4));
        other
            .settings
            .push(("source start".to_owned(), "Earliest".to_owned()));
        let err = compare(&[point(0, Some(4)), other], 2).expect_err("differ");
        assert!(
            err.contains("source start: process 0 has (not set), process 1 has Earliest"),
            "{err}"
        );
    }

    #[test]
    fn a_setting_only_one_process_has_is_a_difference() {
        let mut other = point(1, Some(4));
        other
            .settings
            .push(("source start".to_owned(), "Earliest".to_owned()));
        let mut first = point(0, Some(4));
        first
            .settings
            .push(("source start".to_owned(), "Latest".to_owned()));
        let err = compare(&[first, other], 2).expect_err("differ");
        assert!(
            err.contains("source start: process 0 has Latest, process 1 has Earliest"),
            "{err}"
        );
    }
}
