//! The CPU time of each thread of a process, from `/proc/<pid>/task/*/stat`: for the
//! benchmarks that measure what one thread or a group of threads costs (`metrics_scrape`: the
//! job's metrics server; `producer_cpu`: the threads librdkafka starts for a producer).

// Each benchmark reads the fields it needs: one by name, the other by thread id.
#![allow(dead_code)]

use std::fs;
use std::time::Duration;

/// One thread and the CPU time (user + system) it has used so far.
pub struct ThreadCpu {
    pub tid: u32,
    /// Its name (`comm`, at most 15 bytes).
    pub name: String,
    pub cpu: Duration,
}

/// Every thread of process `pid` (a number, or `self`) that could be read; none if the
/// process is gone.
pub fn threads(pid: &str) -> Vec<ThreadCpu> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let ticks_per_s = rustix::param::clock_ticks_per_second() as f64;
    tasks
        .flatten()
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(task.path().join("stat")).ok()?;
            // The name is in parentheses and may hold spaces and ')': it ends at the last ')'.
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1.to_owned();
            // utime and stime are fields 14 and 15 of stat(5): indices 11 and 12 from `state`.
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks: u64 =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            Some(ThreadCpu {
                tid,
                name,
                cpu: Duration::from_secs_f64(ticks as f64 / ticks_per_s),
            })
        })
        .collect()
}
