//! Scraping a `weir run` metrics server from tests and benchmarks: one HTTP/1.1 `GET` over a
//! plain TCP stream (the server is on loopback and answers a small text), and the sample names
//! and metric types of an OpenMetrics exposition.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET path` on `addr` with `Connection: close`: the status code and the body.
pub fn get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("an HTTP response without a body"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("an HTTP response without a status"))?;
    Ok((status, body.to_owned()))
}

/// Suffixes of the samples of a counter or histogram family (OpenMetrics).
const SAMPLE_SUFFIXES: [&str; 5] = ["_total", "_bucket", "_count", "_sum", "_created"];

/// What an exposition holds: the name of every sample line, and each family's type.
#[derive(Debug, Default)]
pub struct Exposition {
    samples: BTreeSet<String>,
    types: BTreeMap<String, String>,
}

impl Exposition {
    /// Reads OpenMetrics (or Prometheus) text.
    pub fn parse(text: &str) -> Self {
        let mut exposition = Exposition::default();
        for line in text.lines() {
            if let Some(declared) = line.strip_prefix("# TYPE ") {
                if let Some((family, kind)) = declared.split_once(' ') {
                    exposition
                        .types
                        .insert(family.to_owned(), kind.trim().to_owned());
                }
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                exposition.samples.insert(line[..end].to_owned());
            }
        }
        exposition
    }

    /// Whether a sample line of `name` (e.g. `weir_inference_seconds_bucket`) is present.
    pub fn has_sample(&self, name: &str) -> bool {
        self.samples.contains(name)
    }

    /// Every sample name, sorted.
    pub fn sample_names(&self) -> impl Iterator<Item = &str> {
        self.samples.iter().map(String::as_str)
    }

    /// The type (`counter`, `gauge`, `histogram`, …) of the family that sample `name` belongs
    /// to: its own family, or the one it is a `_total`/`_bucket`/`_count`/`_sum` of.
    pub fn type_of(&self, name: &str) -> Option<&str> {
        if let Some(kind) = self.types.get(name) {
            return Some(kind);
        }
        SAMPLE_SUFFIXES
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find_map(|family| self.types.get(family))
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::Exposition;

    #[test]
    fn samples_and_their_families_types() {
        let text = "# TYPE weir_records_in counter\n\
                    weir_records_in_total{operator=\"source\",instance=\"0\"} 5\n\
                    # TYPE weir_inference_seconds histogram\n\
                    weir_inference_seconds_bucket{le=\"0.1\"} 1\n\
                    weir_inference_seconds_sum 0.05\n\
                    # TYPE weir_checkpoint_age_seconds gauge\n\
                    weir_checkpoint_age_seconds NaN\n\
                    # EOF\n";
        let exposition = Exposition::parse(text);
        assert!(exposition.has_sample("weir_records_in_total"));
        assert!(!exposition.has_sample("weir_records_in"));
        assert!(!exposition.has_sample("weir_inference_seconds_count"));
        assert_eq!(exposition.type_of("weir_records_in_total"), Some("counter"));
        assert_eq!(
            exposition.type_of("weir_inference_seconds_bucket"),
            Some("histogram")
        );
        assert_eq!(
            exposition.type_of("weir_checkpoint_age_seconds"),
            Some("gauge")
        );
        assert_eq!(exposition.type_of("weir_nothing_total"), None);
    }
}
