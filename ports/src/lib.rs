//! Free TCP ports on 127.0.0.1 for servers that another process binds a moment later: the
//! Timely and metrics ports of `weir launch`'s processes, and the brokers, S3 servers and
//! clusters of the tests.
//!
//! A port the OS hands out for `bind(…:0)` comes from the kernel's ephemeral range, the same
//! range every outgoing connection takes its local port from. Between the pick and the
//! server's bind, any `connect` on the machine can take it, and the server then fails with
//! "Address already in use" (seen: a launched process lost its Timely port to a test's
//! connection). So the ports here are drawn at random from below that range (Linux:
//! `/proc/sys/net/ipv4/ip_local_port_range`), where only an explicit bind can land; each is
//! bound to prove it free, and all are held until the last is found, so none is given twice.
//! A port this process handed out recently (the last [`REMEMBERED`]) is not handed out
//! again even once it is free: the tests of one binary run side by side, and a server that
//! binds late (a broker starting) would otherwise share its port with the next pick.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::ops::Range;
use std::sync::Mutex;

/// Where the kernel's ephemeral range starts when it cannot be read (IANA's dynamic ports).
const EPHEMERAL_START_DEFAULT: u16 = 49152;
/// The lowest port picked: above the registered services most machines run (8080, 9092, …).
const LOWEST: u16 = 10_000;
/// Random picks per port asked for before giving up.
const TRIES_PER_PORT: usize = 200;
/// How many of the ports this process handed out last are not handed out again.
const REMEMBERED: usize = 1024;

/// The ports this process handed out last, oldest first.
static HANDED_OUT: Mutex<VecDeque<u16>> = Mutex::new(VecDeque::new());

/// `n` distinct ports on 127.0.0.1 that were free when asked.
pub fn free_local_ports(n: usize) -> io::Result<Vec<u16>> {
    let range = pick_range(ephemeral_start());
    let mut held: Vec<TcpListener> = Vec::with_capacity(n);
    let mut random = RandomPorts::new(range.clone());
    // Held while picking, so two threads' picks cannot coincide either.
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut tries = 0;
    while held.len() < n {
        if tries == n * TRIES_PER_PORT {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "no {n} free ports on 127.0.0.1 in {}..{} after {tries} tries",
                    range.start, range.end
                ),
            ));
        }
        tries += 1;
        let port = random.next_port();
        if handed_out.contains(&port) {
            continue;
        }
        // A port we hold already fails to bind again, so the ports are distinct.
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            held.push(listener);
        }
    }
    let ports = held
        .iter()
        .map(|listener| Ok(listener.local_addr()?.port()))
        .collect::<io::Result<Vec<u16>>>()?;
    for &port in &ports {
        if handed_out.len() == REMEMBERED {
            handed_out.pop_front();
        }
        handed_out.push_back(port);
    }
    Ok(ports)
}

/// One free port on 127.0.0.1 (see [`free_local_ports`]).
pub fn free_local_port() -> io::Result<u16> {
    let ports = free_local_ports(1)?;
    Ok(ports[0])
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_START_DEFAULT)
}

/// The ports to pick from: below the ephemeral range, or, when that range starts too low to
/// leave room, the ports above [`LOWEST`] (a race is then possible, as with `bind(…:0)`).
fn pick_range(ephemeral_start: u16) -> Range<u16> {
    if ephemeral_start > LOWEST + 1000 {
        LOWEST..ephemeral_start
    } else {
        LOWEST..u16::MAX
    }
}

/// Ports drawn uniformly from a range, seeded by std's randomly keyed hasher.
struct RandomPorts {
    range: Range<u16>,
    state: u64,
}

impl RandomPorts {
    fn new(range: Range<u16>) -> Self {
        let state = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        RandomPorts { range, state }
    }

    fn next_port(&mut self) -> u16 {
        // SplitMix64: a full-period 64-bit generator, plenty for spreading picks.
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let span = u64::from(self.range.end - self.range.start);
        self.range.start + (z % span) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports = free_local_ports(50).expect("50 free ports");
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 50);
        let start = ephemeral_start();
        for port in ports {
            assert!(
                (LOWEST..start).contains(&port),
                "{port} not in {LOWEST}..{start}"
            );
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("the port is free");
        }
    }

    // The tests of this module hand out 50 + 1 + 200 + 256 ports in all, fewer than
    // REMEMBERED, so none of them sees another's picks push its own out of memory.

    #[test]
    fn a_port_held_by_a_server_is_never_picked() {
        let taken = free_local_port().expect("a free port");
        let _server = TcpListener::bind((Ipv4Addr::LOCALHOST, taken)).expect("bind it");
        for _ in 0..10 {
            assert!(!free_local_ports(20).expect("20 ports").contains(&taken));
        }
    }

    #[test]
    fn a_port_handed_out_is_not_handed_out_again_while_remembered() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..16 {
            for port in free_local_ports(16).expect("16 ports") {
                assert!(seen.insert(port), "{port} handed out twice");
            }
        }
    }

    #[test]
    fn the_range_stays_above_the_registered_ports() {
        assert_eq!(pick_range(32768), LOWEST..32768);
        assert_eq!(pick_range(1024), LOWEST..u16::MAX);
    }
}
