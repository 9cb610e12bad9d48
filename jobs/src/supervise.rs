//! Supervision (issue #17): runs the processes of a job ([`crate::process_group`]) and, when
//! one of them fails, stops the rest and starts them all again, so the job resumes from its
//! last committed checkpoint (`weir run` restores the newest valid one by default). Restarts
//! wait an exponential backoff and are counted against a limit; a run that stays up for
//! `--healthy-after` resets both. `weir launch --supervise` restarts its whole local
//! cluster this way; `weir supervise -- <command…>` restarts one process, one supervisor per
//! host (the Kubernetes model: a pod's restart policy does the same). A cluster process whose
//! peer dies exits by itself (`cluster::PEER_LOST_EXIT`), so its own supervisor restarts it
//! too.
//!
//! Exit status of both commands: 0 when every process finished with 0; else the status of
//! the process that failed first (128 + signal when a signal killed it), also after the
//! restart limit; after a stop signal, the first non-zero status of the stopped processes
//! (0 if none), or 130 after a second signal.

use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::Signal;

use crate::cluster::PEER_LOST_EXIT;
use crate::process_group::{describe, status_code, Output, ProcessGroup};

/// How often the supervisor looks at its children and its signals.
const POLL: Duration = Duration::from_millis(50);

/// Exit status after a second stop signal (as `weir run`'s).
const SECOND_SIGNAL_EXIT: i32 = 130;

/// When and how often to restart.
#[derive(clap::Args, Clone, Debug)]
pub struct RestartPolicy {
    /// Restarts allowed before giving up (counted again from 0 after a run that stayed up for
    /// --healthy-after).
    #[arg(long, default_value_t = 5)]
    pub max_restarts: u32,
    /// Wait before the first restart; doubled after each restart up to --max-backoff.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub backoff: Duration,
    /// The longest wait between restarts.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub max_backoff: Duration,
    /// A run that stays up this long resets the restart count and the backoff.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub healthy_after: Duration,
}

/// `weir supervise [opts] -- <command…>`.
#[derive(clap::Args, Debug)]
pub struct SuperviseArgs {
    /// When and how often to restart.
    #[command(flatten)]
    pub policy: RestartPolicy,
    /// The command to run and restart, after `--`, e.g. `weir run job.toml --processes 3
    /// --process 1 --hosts hosts.txt` (give it `--restore auto`, the default, so a restart
    /// resumes from the newest checkpoint).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Ctrl-C, SIGTERM and SIGHUP received by the supervisor (forwarded, not acted on by it).
pub struct StopSignals {
    received: mpsc::Receiver<()>,
    count: u32,
}

impl StopSignals {
    /// Installs the process's signal handler (once per process).
    pub fn install() -> Result<StopSignals> {
        let (sender, received) = mpsc::channel();
        ctrlc::set_handler(move || {
            let _ = sender.send(());
        })
        .context("cannot install the stop-signal handler")?;
        Ok(StopSignals { received, count: 0 })
    }

    /// Signals that never come (tests: the process's handler can be installed only once).
    #[cfg(test)]
    fn never() -> StopSignals {
        let (sender, received) = mpsc::channel();
        std::mem::forget(sender);
        StopSignals { received, count: 0 }
    }

    /// Waits up to `timeout` for a signal; true when one arrived.
    fn wait(&mut self, timeout: Duration) -> bool {
        let arrived = self.received.recv_timeout(timeout).is_ok();
        self.count += u32::from(arrived);
        arrived
    }
}

/// How one run of the processes ended.
#[derive(Debug)]
enum Ending {
    /// Every process exited with 0.
    Finished,
    /// `label` failed first (the others were stopped after it).
    Failed { label: String, status: ExitStatus },
    /// Stopped by a signal; the status to exit with.
    Stopped { status: i32 },
}

/// `weir supervise`: runs `args.command`, restarting it as `args.policy` allows; returns the
/// exit status.
pub fn supervise(args: &SuperviseArgs) -> Result<i32> {
    let Some((program, rest)) = args.command.split_first() else {
        bail!("weir supervise needs a command after `--`");
    };
    let mut signals = StopSignals::install()?;
    let start = |_restart: u32| {
        let mut command = Command::new(program);
        command.args(rest);
        ProcessGroup::spawn(vec![(program.clone(), command)], Output::Inherited)
    };
    supervise_group(start, Some(&args.policy), Duration::ZERO, &mut signals)
}

/// Runs the processes `start(restart)` starts (`restart` is 0 for the first run) until they
/// all finish, a stop signal, or — with a `policy` — the restart limit; without one the first
/// failure ends it. After a process fails the others get `grace` to exit by themselves
/// (cluster processes do when they lose a peer) before they are killed. Returns the exit
/// status (module docs).
pub fn supervise_group(
    mut start: impl FnMut(u32) -> Result<ProcessGroup>,
    policy: Option<&RestartPolicy>,
    grace: Duration,
    signals: &mut StopSignals,
) -> Result<i32> {
    let mut restarts = 0;
    let mut backoff = policy.map_or(Duration::ZERO, |p| p.backoff);
    for run in 0_u32.. {
        let started = Instant::now();
        let mut group = start(run)?;
        let ending = watch(&mut group, signals, grace)?;
        drop(group);
        let (label, status) = match ending {
            Ending::Finished => {
                tracing::info!("every process finished");
                return Ok(0);
            }
            Ending::Stopped { status } => return Ok(status),
            Ending::Failed { label, status } => (label, status),
        };
        let code = status_code(status);
        let Some(policy) = policy else {
            tracing::error!(
                "{label} failed ({}); every process is stopped (no --supervise: not restarting)",
                describe(status)
            );
            return Ok(code);
        };
        if started.elapsed() >= policy.healthy_after {
            restarts = 0;
            backoff = policy.backoff;
        }
        if restarts >= policy.max_restarts {
            tracing::error!(
                "{label} failed ({}); giving up after {restarts} restart(s) (--max-restarts {})",
                describe(status),
                policy.max_restarts
            );
            return Ok(code);
        }
        restarts += 1;
        tracing::warn!(
            "{label} failed ({}); restart {restarts} of at most {} in {} (from the last committed checkpoint)",
            describe(status),
            policy.max_restarts,
            humantime::format_duration(backoff)
        );
        if signals.wait(backoff) {
            tracing::info!("stop signal while waiting to restart: not restarting");
            return Ok(code);
        }
        backoff = (backoff * 2).min(policy.max_backoff);
    }
    bail!("more than {} runs", u32::MAX)
}

/// Waits for every process of `group` to exit, forwarding stop signals (SIGTERM; a third
/// signal kills) and killing the survivors `grace` after the first failure.
fn watch(group: &mut ProcessGroup, signals: &mut StopSignals, grace: Duration) -> Result<Ending> {
    let mut failed: Option<(String, ExitStatus, Instant)> = None;
    let mut first_nonzero = None;
    let mut killed = false;
    loop {
        if signals.wait(POLL) {
            if signals.count <= 2 {
                tracing::info!(
                    "stop signal {}: forwarding SIGTERM to {}",
                    signals.count,
                    group.running().join(", ")
                );
                group.signal(Signal::TERM);
            } else {
                tracing::warn!("stop signal {}: killing every process", signals.count);
                group.signal(Signal::KILL);
            }
        }
        let exited = group.reap()?;
        let mut failed_now: Vec<(String, ExitStatus)> = Vec::new();
        for (label, status) in exited {
            if status.success() {
                tracing::info!("{label} finished");
            } else {
                tracing::warn!("{label} exited: {}", describe(status));
                first_nonzero = first_nonzero.or(Some(status_code(status)));
                failed_now.push((label, status));
            }
        }
        if failed.is_none() && signals.count == 0 {
            // Of the processes seen exiting in one poll, the cause is rather the one that did
            // not just lose a peer.
            failed_now.sort_by_key(|(_, status)| status.code() == Some(PEER_LOST_EXIT));
            failed = failed_now
                .into_iter()
                .next()
                .map(|(label, status)| (label, status, Instant::now()));
        }
        let running = group.running();
        if running.is_empty() {
            break;
        }
        if let Some((label, _, at)) = &failed {
            if !killed && at.elapsed() >= grace {
                tracing::warn!(
                    "{} still running {} after {label} failed: killing",
                    running.join(", "),
                    humantime::format_duration(grace)
                );
                group.signal(Signal::KILL);
                killed = true;
            }
        }
    }
    Ok(match (signals.count, failed) {
        (0, None) => Ending::Finished,
        (0, Some((label, status, _))) => Ending::Failed { label, status },
        (1, _) => Ending::Stopped {
            status: first_nonzero.unwrap_or(0),
        },
        _ => Ending::Stopped {
            status: SECOND_SIGNAL_EXIT,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_restarts: u32) -> RestartPolicy {
        RestartPolicy {
            max_restarts,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
            healthy_after: Duration::from_secs(600),
        }
    }

    /// Runs `sh -c script` under `policy`; the exit status and how many times it started.
    fn supervised(script: &str, policy: Option<&RestartPolicy>) -> (i32, u32) {
        let mut starts = 0;
        let start = |_| {
            starts += 1;
            let mut command = Command::new("sh");
            command.args(["-c", script]);
            ProcessGroup::spawn(vec![("sh".to_owned(), command)], Output::Inherited)
        };
        let status = supervise_group(start, policy, Duration::ZERO, &mut StopSignals::never());
        (status.expect("the supervisor runs"), starts)
    }

    #[test]
    fn a_failing_command_is_restarted_up_to_the_limit_and_its_status_returned() {
        assert_eq!(supervised("exit 3", Some(&policy(2))), (3, 3));
        assert_eq!(supervised("exit 3", None), (3, 1));
    }

    #[test]
    fn a_signal_death_is_128_plus_the_signal() {
        assert_eq!(supervised("kill -9 $$", None), (137, 1));
    }

    #[test]
    fn a_command_that_recovers_ends_the_supervision_with_0() {
        let dir = std::env::temp_dir().join(format!("weir-supervise-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let runs = dir.join("runs");
        // Fails twice, then succeeds.
        let script = format!(
            "n=$(cat {0} 2>/dev/null || echo 0); echo $((n + 1)) > {0}; [ $n -ge 2 ]",
            runs.display()
        );
        assert_eq!(supervised(&script, Some(&policy(5))), (0, 3));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
