//! A Timely cluster of test processes on localhost: free TCP ports (also for the metrics
//! servers of test runs) and the hosts file `weir run --hosts` reads, one `127.0.0.1:<port>`
//! line a process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// An address on 127.0.0.1 whose port was free when asked (the OS picks it).
pub fn free_addr() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// A TCP port on 127.0.0.1 that was free when asked (the OS picks it).
pub fn free_port() -> std::io::Result<u16> {
    Ok(free_addr()?.port())
}

/// Writes `dir/hosts.txt` naming `processes` free localhost ports and returns its path.
pub fn hosts_file(dir: &Path, processes: usize) -> std::io::Result<PathBuf> {
    let hosts = dir.join("hosts.txt");
    let lines = (0..processes)
        .map(|_| Ok(format!("127.0.0.1:{}\n", free_port()?)))
        .collect::<std::io::Result<String>>()?;
    std::fs::write(&hosts, lines)?;
    Ok(hosts)
}
