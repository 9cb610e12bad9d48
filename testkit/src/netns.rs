//! Two hosts as Linux network namespaces, for cluster tests that need separate network stacks
//! (iproute2 as root; addresses in the loopback range only): one veth pair between them,
//! `127.200.0.1/24` in the first and `127.200.0.2/24` in the second. A 127.x address on a
//! non-loopback device needs `net.ipv4.conf.{all,eth0}.route_localnet = 1` in each namespace,
//! or the kernel drops the packets as martians (checked: the connection times out without
//! it); and the namespace's `lo` keeps only `127.0.0.1/32`, since its usual `127.0.0.0/8`
//! local route would swallow the peer's address. Nothing changes in the root namespace.
//!
//! The servers a test runs in the root namespace (moto, a broker) stay on its 127.0.0.1;
//! [`NetnsPair::forward`] makes one reachable at the same `127.0.0.1:<port>` inside a
//! namespace: a thread that entered the namespace (setns) listens there, and every
//! connection is relayed to the server by a socket made in the root namespace.
//!
//! Dropping the pair kills whatever still runs in the namespaces and deletes them (with
//! their veth ends), also when the test failed.

use std::fs::File;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

/// The hosts' addresses, first and second.
pub const ADDRESSES: [&str; 2] = ["127.200.0.1", "127.200.0.2"];

/// Why namespaces cannot be used here, when they cannot (not root); `None` when they can.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not running as root: `ip netns add` needs CAP_SYS_ADMIN".to_owned());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("iproute2's `ip` is not installed (scripts/setup.sh installs it)".to_owned()),
    }
}

/// Two network namespaces joined by a veth pair; deleted on drop.
#[derive(Debug)]
pub struct NetnsPair {
    names: [String; 2],
}

/// Runs `ip <args>`; an error with its stderr unless it succeeds.
fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

impl NetnsPair {
    /// Creates the namespaces `weir-<pid>-<n>-{0,1}` and their link.
    pub fn create() -> io::Result<NetnsPair> {
        static PAIRS: AtomicU64 = AtomicU64::new(0);
        let n = PAIRS.fetch_add(1, Ordering::Relaxed);
        let base = format!("weir-{}-{n}", std::process::id());
        let pair = NetnsPair {
            names: [format!("{base}-0"), format!("{base}-1")],
        };
        let mut created = Vec::new();
        for name in &pair.names {
            ip(&["netns", "add", name])?;
            created.push(name);
        }
        let [first, second] = &pair.names;
        ip(&[
            "link", "add", "eth0", "netns", first, "type", "veth", "peer", "name", "eth0", "netns",
            second,
        ])?;
        for (name, address) in pair.names.iter().zip(ADDRESSES) {
            let inside = |args: &[&str]| ip(&[&["-n", name][..], args].concat());
            inside(&["link", "set", "lo", "up"])?;
            inside(&["addr", "del", "127.0.0.1/8", "dev", "lo"])?;
            inside(&["addr", "add", "127.0.0.1/32", "dev", "lo"])?;
            inside(&["addr", "add", &format!("{address}/24"), "dev", "eth0"])?;
            for sysctl in [
                "net.ipv4.conf.all.route_localnet=1",
                "net.ipv4.conf.eth0.route_localnet=1",
            ] {
                ip(&["netns", "exec", name, "sysctl", "-qw", sysctl])?;
            }
            inside(&["link", "set", "eth0", "up"])?;
        }
        Ok(pair)
    }

    /// The namespace of host `host` (0 or 1).
    pub fn name(&self, host: usize) -> &str {
        &self.names[host]
    }

    /// Takes `host`'s link to the other host down (`up = false`: a partition; no connection
    /// is closed, packets just stop) or back up.
    pub fn set_link(&self, host: usize, up: bool) -> io::Result<()> {
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.names[host], "link", "set", "eth0", state])
    }

    /// `ip netns exec <host's namespace> <program>`: a command to run on that host.
    pub fn command(&self, host: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.names[host]])
            .arg(program);
        command
    }

    /// Makes the root namespace's server at `127.0.0.1:<port>` reachable inside `host`'s
    /// namespace at its `127.0.0.1:<port>`, for as long as the test process lives.
    pub fn forward(&self, host: usize, port: u16) -> io::Result<()> {
        let path = format!("/var/run/netns/{}", self.names[host]);
        let namespace = File::open(&path)?;
        let listener = std::thread::spawn(move || -> io::Result<TcpListener> {
            move_into_link_name_space(namespace.as_fd(), Some(LinkNameSpaceType::Network))?;
            TcpListener::bind(("127.0.0.1", port))
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))??;
        std::thread::Builder::new()
            .name(format!("netns-forward-{port}"))
            .spawn(move || {
                for client in listener.incoming().flatten() {
                    // Made on this thread, which is in the root namespace.
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", port)) {
                        relay(client, server);
                    }
                }
            })?;
        Ok(())
    }
}

/// Copies both ways between `a` and `b` until each side closes.
fn relay(a: TcpStream, b: TcpStream) {
    let pairs = [
        (a.try_clone(), b.try_clone()),
        (b.try_clone(), a.try_clone()),
    ];
    for pair in pairs {
        if let (Ok(mut from), Ok(mut to)) = pair {
            std::thread::spawn(move || {
                let _ = io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Write);
            });
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for name in &self.names {
            // `ip netns pids` lists the processes still in it (a supervisor, a weir run).
            if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", pid]).status();
                }
            }
            if let Err(error) = ip(&["netns", "del", name]) {
                eprintln!("cannot delete network namespace {name}: {error}");
            }
        }
    }
}
