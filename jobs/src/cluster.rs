//! The process shape of a run (DESIGN.md §4): one process with `workers` threads, or a Timely
//! cluster of `processes` processes over TCP, each with the same number of threads, given the
//! process index and a hosts file (one `host:port` per line, process 0 first; blank lines and
//! `#` comments ignored). Every process runs the same job file and flags.
//!
//! A lost peer: Timely's TCP threads (one `timely:send-<p>` and one `timely:recv-<p>` thread
//! per peer process `p`) panic with `timely communication error: …` when the connection to
//! `p` closes without Timely's clean-shutdown message (the peer was killed or crashed) or a
//! read or write on it fails. Left alone, that panic poisons the worker's queues and the
//! workers panic too (exit 101, indistinguishable from a bug in a worker). [`exit_on_lost_peer`]
//! turns it into an exit with [`PEER_LOST_EXIT`] and a message naming the peer, at the moment
//! the connection breaks, so a supervisor (`weir supervise`, Kubernetes) restarts this process
//! as well. A peer that vanishes without closing its connections (a host powered off, a
//! network partition) sends no FIN: [`connect`] makes the sockets itself (Timely's own
//! `create_sockets`) and sets TCP_USER_TIMEOUT and keepalive on them, so such a connection
//! breaks after [`PEER_SILENCE_LIMIT`] instead of never.

use std::any::Any;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rustix::net::sockopt;
use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
use timely::communication::allocator::ProcessBuilder;
use timely::communication::{AllocatorBuilder, Hooks};

/// Exit status of a cluster process whose connection to a peer process broke
/// (docs/ARCHITECTURE.md lists every exit status).
pub const PEER_LOST_EXIT: i32 = 4;

/// How long a peer's kernel may leave this process's data unacknowledged, or stay silent on
/// an idle connection, before the connection counts as broken (the peer's host is gone or
/// cut off). A live process's kernel acknowledges even while the process is stalled.
pub const PEER_SILENCE_LIMIT: Duration = Duration::from_secs(30);

/// Keepalive probes of an idle connection: the first after [`PEER_SILENCE_LIMIT`] / (this + 1)
/// of silence, then as often, so the last one goes unanswered at the limit.
const KEEPALIVE_PROBES: u32 = 3;

/// What Timely's TCP threads panic with when a connection breaks (timely_communication 0.32,
/// `allocator/zero_copy/tcp.rs`, which promises to keep the wording).
const TIMELY_COMMUNICATION_ERROR: &str = "timely communication error:";

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

/// Timely's communication for `config` (from [`timely_config`]): for a cluster, connects to
/// every peer (blocking until all are connected, like `timely::execute`) on sockets that
/// break after [`PEER_SILENCE_LIMIT`] of silence. The allocators and the guard of the
/// network threads, for `timely::execute::execute_from`.
pub fn connect(
    config: timely::CommunicationConfig,
) -> Result<(Vec<AllocatorBuilder>, Box<dyn Any + Send>)> {
    let timely::CommunicationConfig::Cluster {
        threads,
        process,
        addresses,
        report,
        ..
    } = config
    else {
        return config
            .try_build()
            .map_err(|e| anyhow!("cannot start Timely's communication: {e}"));
    };
    let sockets = timely::communication::networking::create_sockets(addresses, process, report)
        .context("cannot connect to the cluster's other processes")?;
    for socket in sockets.iter().flatten() {
        limit_silence(socket).context("cannot set TCP timeouts on a cluster connection")?;
    }
    let hooks = Hooks::default();
    let allocators =
        ProcessBuilder::new_typed_vector(threads, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) =
        initialize_networking_from_sockets(allocators, sockets, process, threads, hooks)
            .context("cannot start Timely's network threads")?;
    let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
    Ok((builders, Box::new(guard)))
}

/// TCP_USER_TIMEOUT (unacknowledged data) and keepalive (idle connections) on a peer socket.
fn limit_silence(socket: &TcpStream) -> std::io::Result<()> {
    let limit_ms = u32::try_from(PEER_SILENCE_LIMIT.as_millis()).unwrap_or(u32::MAX);
    sockopt::set_tcp_user_timeout(socket, limit_ms)?;
    sockopt::set_socket_keepalive(socket, true)?;
    let probe_every = PEER_SILENCE_LIMIT / (KEEPALIVE_PROBES + 1);
    sockopt::set_tcp_keepidle(socket, probe_every)?;
    sockopt::set_tcp_keepintvl(socket, probe_every)?;
    sockopt::set_tcp_keepcnt(socket, KEEPALIVE_PROBES)?;
    Ok(())
}

/// Installs a panic hook that exits with [`PEER_LOST_EXIT`] when a Timely TCP thread panics
/// because its connection to a peer broke, naming the peer (`process 2 at 10.0.0.3:2101`).
/// Other panics go to the hook that was installed before. Call before `timely::execute`, only
/// for a multi-process run.
pub fn exit_on_lost_peer(args: &ClusterArgs) -> Result<()> {
    let hosts = args
        .hosts
        .as_deref()
        .context("--processes > 1 needs --hosts FILE (one host:port per process)")?;
    let addresses = read_hosts(hosts)?;
    let me = args.process;
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = panic_message(info.payload());
        let thread = std::thread::current();
        let peer = thread.name().and_then(timely_peer_of_thread);
        if let (Some(peer), Some(cause)) = (peer, message.strip_prefix(TIMELY_COMMUNICATION_ERROR))
        {
            // The connections to the other peers break too as this process exits: one message.
            static REPORTED: AtomicBool = AtomicBool::new(false);
            if REPORTED.swap(true, Ordering::SeqCst) {
                std::process::exit(PEER_LOST_EXIT);
            }
            let address = addresses.get(peer).map_or("?", String::as_str);
            let message = format!(
                "lost peer process {peer} at {address} (the connection from process {me} broke:{cause}); the cluster cannot go on without it, exiting with status {PEER_LOST_EXIT} so that a supervisor restarts every process from the last checkpoint"
            );
            tracing::error!("{message}");
            eprintln!("error: {message}");
            std::process::exit(PEER_LOST_EXIT);
        }
        previous(info);
    }));
    Ok(())
}

/// The peer process index of a Timely TCP thread (`timely:send-2`, `timely:recv-2`).
fn timely_peer_of_thread(name: &str) -> Option<usize> {
    let peer = name
        .strip_prefix("timely:send-")
        .or_else(|| name.strip_prefix("timely:recv-"))?;
    peer.parse().ok()
}

/// A panic's message, when it is a string.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
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

    #[test]
    fn timely_tcp_threads_name_their_peer() {
        assert_eq!(timely_peer_of_thread("timely:recv-2"), Some(2));
        assert_eq!(timely_peer_of_thread("timely:send-10"), Some(10));
        assert_eq!(timely_peer_of_thread("timely:work-0"), None);
        assert_eq!(timely_peer_of_thread("main"), None);
    }
}
