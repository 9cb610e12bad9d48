//! The child processes of `weir launch` and `weir supervise` ([`crate::launch`],
//! [`crate::supervise`]): started together, each in a process group of its own (so a Ctrl-C
//! in the terminal reaches only the launcher, which forwards exactly one signal), their output
//! lines prefixed with the process's label (`[p0] …`) or passed through, signalled together
//! and reaped as they exit.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use rustix::process::{kill_process_group, Pid, Signal};

/// One child: its label (`p0`), the process and the threads copying its output.
struct Member {
    label: String,
    child: Child,
    exited: Option<ExitStatus>,
    pumps: Vec<JoinHandle<()>>,
}

/// Children started together.
pub struct ProcessGroup {
    members: Vec<Member>,
}

/// How output reaches the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Every line prefixed with `[label] ` (several processes on one terminal).
    Prefixed,
    /// The child writes to this process's stdout and stderr itself.
    Inherited,
}

impl ProcessGroup {
    /// Starts `commands` (label, command); on a failure, kills those already started.
    pub fn spawn(commands: Vec<(String, Command)>, output: Output) -> Result<ProcessGroup> {
        let mut group = ProcessGroup {
            members: Vec::with_capacity(commands.len()),
        };
        for (label, mut command) in commands {
            command.process_group(0).stdin(Stdio::null());
            if output == Output::Prefixed {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
            let spawned = command
                .spawn()
                .with_context(|| format!("cannot start {label}: {command:?}"));
            let mut child = match spawned {
                Ok(child) => child,
                Err(error) => {
                    group.signal(Signal::KILL);
                    group.wait_all();
                    return Err(error);
                }
            };
            let mut pumps = Vec::new();
            if let Some(out) = child.stdout.take() {
                pumps.push(pump(&label, out, std::io::stdout)?);
            }
            if let Some(err) = child.stderr.take() {
                pumps.push(pump(&label, err, std::io::stderr)?);
            }
            tracing::info!("started {label} (pid {})", child.id());
            group.members.push(Member {
                label,
                child,
                exited: None,
                pumps,
            });
        }
        Ok(group)
    }

    /// Sends `signal` to the process group of every child still running.
    pub fn signal(&self, signal: Signal) {
        for member in self.members.iter().filter(|m| m.exited.is_none()) {
            let pid = i32::try_from(member.child.id())
                .ok()
                .and_then(Pid::from_raw);
            if let Some(pid) = pid {
                // ESRCH: it exited since the last poll; nothing to do.
                let _ = kill_process_group(pid, signal);
            }
        }
    }

    /// The children that exited since the last call: (label, status).
    pub fn reap(&mut self) -> Result<Vec<(String, ExitStatus)>> {
        let mut exited = Vec::new();
        for member in self.members.iter_mut().filter(|m| m.exited.is_none()) {
            let status = member
                .child
                .try_wait()
                .with_context(|| format!("cannot wait for {}", member.label))?;
            if let Some(status) = status {
                member.exited = Some(status);
                // The pumps end at the pipes' end: its last lines are out before we report.
                for pump in member.pumps.drain(..) {
                    let _ = pump.join();
                }
                exited.push((member.label.clone(), status));
            }
        }
        Ok(exited)
    }

    /// Labels of the children still running.
    pub fn running(&self) -> Vec<&str> {
        self.members
            .iter()
            .filter(|m| m.exited.is_none())
            .map(|m| m.label.as_str())
            .collect()
    }

    /// Kills every child still running and waits for all of them.
    pub fn kill_and_wait(&mut self) {
        self.signal(Signal::KILL);
        self.wait_all();
    }

    fn wait_all(&mut self) {
        for member in self.members.iter_mut().filter(|m| m.exited.is_none()) {
            member.exited = member.child.wait().ok();
            for pump in member.pumps.drain(..) {
                let _ = pump.join();
            }
        }
    }
}

impl Drop for ProcessGroup {
    /// No child outlives the launcher's own exit paths (a panic included).
    fn drop(&mut self) {
        self.kill_and_wait();
    }
}

/// Copies `from` line by line to `to()`, each line prefixed with `[label] `.
fn pump<R, W, T>(label: &str, from: R, to: T) -> Result<JoinHandle<()>>
where
    R: Read + Send + 'static,
    W: Write,
    T: Fn() -> W + Send + 'static,
{
    let prefix = format!("[{label}] ");
    std::thread::Builder::new()
        .name(format!("weir-log-{label}"))
        .spawn(move || {
            let mut from = BufReader::new(from);
            let mut line = Vec::new();
            while matches!(from.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                // One write per line, so lines of different processes do not interleave.
                let mut out = Vec::with_capacity(prefix.len() + line.len());
                out.extend_from_slice(prefix.as_bytes());
                out.extend_from_slice(&line);
                let _ = to().write_all(&out);
                line.clear();
            }
        })
        .context("cannot start a log thread")
}

/// A child's exit as one number: its exit status, or 128 + the signal that killed it (as a
/// shell reports it).
pub fn status_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// `exit status 4` or `killed by signal 9 (SIGKILL)`.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => {
            // rustix's Debug spells `Signal::KILL`.
            let name = Signal::from_named_raw(signal)
                .map(|s| {
                    format!(
                        " ({})",
                        format!("{s:?}").replace("Signal::", "SIG").replace('"', "")
                    )
                })
                .unwrap_or_default();
            format!("killed by signal {signal}{name}")
        }
        _ => format!("{status}"),
    }
}
