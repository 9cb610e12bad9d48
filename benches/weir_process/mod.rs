//! The release `weir` binary as a child process, for the benchmarks that run whole jobs
//! (`cluster_exchange`, `metrics_scrape`): finding it beside the benchmark's directory, the
//! generated JSON Lines inputs it reads, and the CPU time of the children waited for.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The release `weir` binary beside this benchmark's directory (`target/release/weir`).
pub fn weir_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .map(|release| release.join("weir"))
        .unwrap_or_else(|| panic!("no target directory above {}", exe.display()));
    assert!(
        binary.is_file(),
        "{} is missing: run `cargo build --release -p weir` first (scripts/bench.sh does)",
        binary.display()
    );
    binary
}

/// The CPU time (user + system) of this process's children that have been waited for:
/// `cutime` and `cstime` of `/proc/self/stat`, in clock ticks.
pub fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_else(|e| panic!("{e}"));
    // Fields after the command name (which may hold spaces) start at field 3 (`state`).
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // cutime and cstime are fields 16 and 17 of stat(5): indices 13 and 14 from `state`.
    let ticks = fields[13] + fields[14];
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// Two input files in `dir` of `events / 2` clickstream events each (`weir gen`, 50 k users,
/// seeds 7 and 8): two partitions, one per source instance of a 2-worker job.
pub fn generated_inputs(weir: &Path, dir: &Path, events: usize) -> [PathBuf; 2] {
    [0, 1].map(|i| {
        let path = dir.join(format!("events-{i}.jsonl"));
        let status = Command::new(weir)
            .args(["gen", "--seed", &(7 + i).to_string()])
            .args(["--events", &(events / 2).to_string(), "--users", "50000"])
            .args(["--mean-gap", "1ms", "--out"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success(), "weir gen failed");
        path
    })
}

/// The median of `samples`.
pub fn median<T: Ord + Copy>(mut samples: Vec<T>) -> T {
    samples.sort();
    samples[samples.len() / 2]
}
