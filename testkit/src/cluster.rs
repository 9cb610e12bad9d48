//! A Timely cluster of test processes on localhost: free TCP ports (also for the metrics
//! servers of test runs) and the hosts file `weir run --hosts` reads, one `127.0.0.1:<port>`
//! line a process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// An address on 127.0.0.1 whose port was free when asked ([`weir_ports`] picks it).
pub fn free_addr() -> std::io::Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], free_port()?)))
}

/// A TCP port on 127.0.0.1 that was free when asked ([`weir_ports`] picks it, outside the
/// ephemeral range, so that no connection of a test running beside takes it first).
pub fn free_port() -> std::io::Result<u16> {
    weir_ports::free_local_port()
}

/// Writes `dir/hosts.txt` naming `processes` distinct free localhost ports and returns its
/// path.
pub fn hosts_file(dir: &Path, processes: usize) -> std::io::Result<PathBuf> {
    let hosts = dir.join("hosts.txt");
    let lines: String = weir_ports::free_local_ports(processes)?
        .into_iter()
        .map(|port| format!("127.0.0.1:{port}\n"))
        .collect();
    std::fs::write(&hosts, lines)?;
    Ok(hosts)
}
