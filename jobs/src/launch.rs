//! `weir launch job.toml -n N [run flags…]`: a Timely cluster of N local processes for
//! development. It writes the hosts file itself (N free 127.0.0.1 ports from [`weir_ports`],
//! in a temporary directory removed at exit), starts `weir run job.toml --processes N
//! --process i --hosts FILE [run flags…]` for every `i` with its output lines prefixed
//! `[p<i>] `, forwards Ctrl-C/SIGTERM to all of them and, when one fails, stops the others
//! (they exit by themselves on losing their peer; after `--grace` they are killed). With
//! `--supervise` it then restarts all N from the last committed checkpoint
//! ([`crate::supervise`], which also documents the exit status); without, it exits.
//!
//! A launcher killed with SIGKILL cannot stop its children (each is in a process group of its
//! own, so that a terminal's Ctrl-C reaches them only through the launcher): stop them with
//! `kill -- -<pid>` of each logged pid.
//!
//! Metrics: unless the run flags give `--metrics-addr` (e.g. `off`), every process gets its
//! own free `127.0.0.1` port for `/metrics`, logged at start, so two launches on one machine
//! (or a launch beside a `weir run`) do not collide on `[metrics] listen`'s port.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::process_group::{Output, ProcessGroup};
use crate::supervise::{supervise_group, RestartPolicy, StopSignals};

/// `weir run` flags the launcher sets itself for each process.
const CLUSTER_FLAGS: [&str; 3] = ["--processes", "--process", "--hosts"];

/// `weir launch`.
#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    /// The job file (TOML).
    pub job: PathBuf,
    /// Number of processes.
    #[arg(short = 'n', long = "processes", value_name = "N")]
    pub processes: usize,
    /// Restart every process when one fails (see the restart options); without it the first
    /// failure stops the cluster.
    #[arg(long)]
    pub supervise: bool,
    /// When and how often to restart (with --supervise).
    #[command(flatten)]
    pub policy: RestartPolicy,
    /// After a process fails, how long the others may take to exit by themselves before they
    /// are killed.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// `weir run` flags for every process, after the launcher's own options (the first flag
    /// `weir launch` does not know starts them), e.g. `--workers 2 --bounded --output-file
    /// out.jsonl` (not --process or --hosts: the launcher sets those).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "RUN FLAGS"
    )]
    pub run_flags: Vec<String>,
}

/// Runs `args`; returns the exit status.
pub fn launch(args: &LaunchArgs) -> Result<i32> {
    if args.processes == 0 {
        bail!("-n must be at least 1");
    }
    if let Some(flag) = args.run_flags.iter().find(|f| is_cluster_flag(f)) {
        bail!("{flag} is set by weir launch for each process (-n sets the number of processes); leave it out");
    }
    let binary = std::env::current_exe().context("cannot find the weir binary")?;
    // The hosts file's directory, removed when the launcher returns.
    let dir = tempfile::Builder::new()
        .prefix("weir-launch-")
        .tempdir()
        .context("cannot create the launcher's temporary directory")?;
    let mut signals = StopSignals::install()?;
    let start = |restart: u32| {
        // Fresh ports for every run: the last run's may still be held by closing sockets.
        // The cluster's and the metrics servers' ports are picked together, so no port is
        // handed out twice, and outside the ephemeral range, so that no connection made
        // before the processes bind them can take one.
        let ports = weir_ports::free_local_ports(2 * args.processes)
            .context("cannot find free localhost ports for the cluster")?;
        let (cluster_ports, metrics_ports) = ports.split_at(args.processes);
        let hosts = write_hosts(dir.path(), cluster_ports)?;
        let flags = if restart == 0 {
            args.run_flags.clone()
        } else {
            restore_newest(&args.run_flags)
        };
        // Unless the flags or the environment (`WEIR_METRICS_ADDR`) choose the address.
        let own_metrics = std::env::var_os("WEIR_METRICS_ADDR").is_none()
            && !flags
                .iter()
                .any(|f| f.split('=').next() == Some("--metrics-addr"));
        let commands = (0..args.processes)
            .map(|process| {
                let label = format!("p{process}");
                let mut command = Command::new(&binary);
                command
                    .arg("run")
                    .arg(&args.job)
                    .args(&flags)
                    .arg("--processes")
                    .arg(args.processes.to_string())
                    .arg("--process")
                    .arg(process.to_string())
                    .arg("--hosts")
                    .arg(&hosts);
                if own_metrics {
                    let metrics = format!("127.0.0.1:{}", metrics_ports[process]);
                    tracing::info!("{label} serves metrics at http://{metrics}/metrics");
                    command.arg("--metrics-addr").arg(metrics);
                }
                Ok((label, command))
            })
            .collect::<Result<_>>()?;
        ProcessGroup::spawn(commands, Output::Prefixed)
    };
    let policy = args.supervise.then_some(&args.policy);
    supervise_group(start, policy, args.grace, &mut signals)
}

/// `--processes`, `--process=1`, … .
fn is_cluster_flag(flag: &str) -> bool {
    let name = flag.split('=').next().unwrap_or(flag);
    CLUSTER_FLAGS.contains(&name)
}

/// The run flags of a restart: any `--restore` replaced by `--restore auto`, so the restart
/// resumes from the newest checkpoint (the first run's `--restore none` or an old epoch
/// would redo what the failed run had committed).
fn restore_newest(flags: &[String]) -> Vec<String> {
    let mut kept = Vec::with_capacity(flags.len() + 2);
    let mut flags = flags.iter();
    while let Some(flag) = flags.next() {
        if flag == "--restore" {
            flags.next();
        } else if !flag.starts_with("--restore=") {
            kept.push(flag.clone());
        }
    }
    kept.extend(["--restore".to_owned(), "auto".to_owned()]);
    kept
}

/// Writes `dir/hosts.txt`: one `127.0.0.1:<port>` line per port.
fn write_hosts(dir: &Path, ports: &[u16]) -> Result<PathBuf> {
    let lines: String = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}\n"))
        .collect();
    let hosts = dir.join("hosts.txt");
    std::fs::write(&hosts, lines).with_context(|| format!("cannot write {}", hosts.display()))?;
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_restores_the_newest_checkpoint_whatever_the_first_run_was_given() {
        let flags = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            restore_newest(&flags("--workers 2 --restore none --bounded")),
            flags("--workers 2 --bounded --restore auto")
        );
        assert_eq!(
            restore_newest(&flags("--restore=7 --bounded")),
            flags("--bounded --restore auto")
        );
    }

    #[test]
    fn the_cluster_flags_are_the_launchers() {
        assert!(is_cluster_flag("--hosts"));
        assert!(is_cluster_flag("--process=2"));
        assert!(!is_cluster_flag("--processes-x"));
        assert!(!is_cluster_flag("--workers"));
    }
}
