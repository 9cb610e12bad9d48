//! The process shape of a run (DESIGN.md §4): one process with `workers` threads, or a Timely
//! cluster of `processes` processes over TCP, each with the same number of threads, given the
//! process index and a hosts file (one `host:port` per line, process 0 first; blank lines and
//! `#` comments ignored). Every process runs the same job file and flags.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// `--processes`, `--process`, `--hosts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterArgs {
    /// Number of processes.
    pub processes: usize,
    /// This process's index.
    pub process: usize,
    /// The hosts file (required when `processes > 1`).
    pub hosts: Option<PathBuf>,
}

impl Default for ClusterArgs {
    fn default() -> Self {
        ClusterArgs {
            processes: 1,
            process: 0,
            hosts: None,
        }
    }
}

/// The Timely configuration for `threads` workers per process (the worker layout is the job's
/// `RuntimePlan::placement`, which `run` checks these arguments against).
pub fn timely_config(args: &ClusterArgs, threads: usize) -> Result<timely::Config> {
    if args.processes <= 1 {
        // `--process 1 --hosts …` without `--processes`: run alone here would be a second,
        // independent copy of the job reading every partition.
        if args.process != 0 || args.hosts.is_some() {
            bail!(
                "--process {} / --hosts describe a multi-process run, but --processes is {} ([runtime] processes): set --processes to the number of lines in the hosts file on every process",
                args.process,
                args.processes
            );
        }
        return Ok(timely::Config::process(threads));
    }
    if args.process >= args.processes {
        bail!(
            "--process {} is out of range for --processes {} (0..{})",
            args.process,
            args.processes,
            args.processes
        );
    }
    let hosts = args
        .hosts
        .as_deref()
        .context("--processes > 1 needs --hosts FILE (one host:port per process)")?;
    let addresses = read_hosts(hosts)?;
    if addresses.len() != args.processes {
        bail!(
            "{} lists {} hosts but --processes is {}",
            hosts.display(),
            addresses.len(),
            args.processes
        );
    }
    let communication = timely::CommunicationConfig::Cluster {
        threads,
        process: args.process,
        addresses,
        report: false,
        zerocopy: false,
    };
    let config = timely::Config {
        communication,
        worker: timely::WorkerConfig::default(),
    };
    Ok(config)
}

/// The `host:port` lines of a hosts file.
pub fn read_hosts(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the hosts file {}", path.display()))?;
    let hosts: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    for host in &hosts {
        if !host.contains(':') {
            bail!("{}: `{host}` is not host:port", path.display());
        }
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_index_or_hosts_file_without_processes_is_refused() {
        let alone = ClusterArgs::default();
        assert!(timely_config(&alone, 2).is_ok());
        let forgot = ClusterArgs {
            process: 1,
            ..ClusterArgs::default()
        };
        let err = timely_config(&forgot, 2).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("set --processes")));
        let hosts_only = ClusterArgs {
            hosts: Some(PathBuf::from("hosts.txt")),
            ..ClusterArgs::default()
        };
        assert!(timely_config(&hosts_only, 2).is_err());
    }
}
