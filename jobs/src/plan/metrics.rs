//! Where `weir run` serves `/metrics`, `/healthz` and `/readyz` (`[metrics] listen`,
//! `--metrics-addr`; `crate::metrics_server`).

use std::net::SocketAddr;

use anyhow::{bail, Result};

/// The default `[metrics] listen`: loopback, Prometheus' registered port for exporters
/// of this kind.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

/// Where the metrics server listens (`None`: `"off"`, no server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsPlan {
    /// The address to bind.
    pub listen: Option<SocketAddr>,
}

impl MetricsPlan {
    /// Parses `[metrics] listen` or `--metrics-addr`: `host:port` (an IP address) or `off`.
    pub fn parse(text: &str, what: &str) -> Result<MetricsPlan> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(MetricsPlan { listen: None });
        }
        match text.parse::<SocketAddr>() {
            Ok(listen) => Ok(MetricsPlan {
                listen: Some(listen),
            }),
            Err(_) => bail!(
                "{what} = \"{text}\" is not an address: give an IP and port, e.g. \
                 \"127.0.0.1:9464\" (this host only) or \"0.0.0.0:9464\" (every interface), \
                 or \"off\""
            ),
        }
    }

    /// The address process `process` of `processes` serves on: `flag` (`--metrics-addr`, per
    /// process) as given, else `[metrics] listen` with its port raised by the process index in
    /// a multi-process run, so processes sharing a host and a job file do not collide (port 0,
    /// any free port, stays 0).
    pub fn for_process(
        &self,
        flag: Option<&str>,
        process: usize,
        processes: usize,
    ) -> Result<Option<SocketAddr>> {
        if let Some(flag) = flag {
            return Ok(MetricsPlan::parse(flag, "--metrics-addr")?.listen);
        }
        let Some(mut addr) = self.listen else {
            return Ok(None);
        };
        if processes > 1 && addr.port() != 0 {
            let port = u16::try_from(usize::from(addr.port()) + process).map_err(|_| {
                anyhow::anyhow!(
                    "[metrics] listen port {} + process {process} is over 65535: choose a lower port",
                    addr.port()
                )
            })?;
            addr.set_port(port);
        }
        Ok(Some(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::MetricsPlan;

    #[test]
    fn listen_is_an_address_or_off() {
        let plan = MetricsPlan::parse("0.0.0.0:9464", "--metrics-addr").ok();
        assert_eq!(
            plan.and_then(|p| p.listen).map(|a| a.to_string()),
            Some("0.0.0.0:9464".to_owned())
        );
        let off = MetricsPlan::parse("off", "[metrics] listen").ok();
        assert_eq!(off, Some(MetricsPlan { listen: None }));
        let bad = MetricsPlan::parse("localhost", "[metrics] listen")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            bad.starts_with("[metrics] listen = \"localhost\" is not an address"),
            "{bad}"
        );
    }

    #[test]
    fn processes_of_a_cluster_get_their_own_port_unless_the_flag_says() {
        let plan = MetricsPlan::parse("127.0.0.1:9464", "[metrics] listen").ok();
        let addr = |flag, process, processes| {
            plan.and_then(|p| p.for_process(flag, process, processes).ok())
                .flatten()
                .map(|a| a.to_string())
        };
        assert_eq!(addr(None, 0, 1).as_deref(), Some("127.0.0.1:9464"));
        assert_eq!(addr(None, 2, 3).as_deref(), Some("127.0.0.1:9466"));
        assert_eq!(
            addr(Some("0.0.0.0:9464"), 2, 3).as_deref(),
            Some("0.0.0.0:9464")
        );
        assert_eq!(addr(Some("off"), 0, 1), None);
    }
}
