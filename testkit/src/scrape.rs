//! Scraping a `weir run` metrics server from tests and benchmarks: one HTTP/1.1 `GET` over a
//! plain TCP stream (the server is on loopback and answers a small text), the sample names
//! and metric types of an OpenMetrics exposition ([`Exposition`]), and its samples' values by
//! name and labels ([`Samples`]).

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

/// The samples of an exposition, each `(name, labels, value)`.
#[derive(Debug, Default)]
pub struct Samples(Vec<(String, BTreeMap<String, String>, f64)>);

impl Samples {
    /// Reads the sample lines of OpenMetrics (or Prometheus) text; comments are skipped.
    pub fn parse(text: &str) -> io::Result<Self> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line
                .rsplit_once(' ')
                .ok_or_else(|| invalid(format!("a sample without a value: {line}")))?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect();
            let value = value.parse().map_err(|e| invalid(format!("{line}: {e}")))?;
            samples.push((name.to_owned(), labels, value));
        }
        Ok(Samples(samples))
    }

    /// The sum of the samples of `name` whose labels include `with`.
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.matching(name, with).map(|(_, v)| v).sum()
    }

    /// The samples of `name` whose labels include `with`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        with: &'a [(&str, &str)],
    ) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
        self.0
            .iter()
            .filter(move |(n, labels, _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(v))
            })
            .map(|(_, labels, v)| (labels, *v))
    }

    /// The value of the one sample of `name` with labels `with`.
    pub fn one(&self, name: &str, with: &[(&str, &str)]) -> io::Result<f64> {
        let found: Vec<f64> = self.matching(name, with).map(|(_, v)| v).collect();
        match found[..] {
            [value] => Ok(value),
            _ => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} samples of {name} {with:?}, not one", found.len()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Exposition, Samples};

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

    #[test]
    fn samples_are_summed_by_name_and_labels() {
        let text = "# TYPE weir_records_in counter\n\
                    weir_records_in_total{operator=\"source\",instance=\"0\"} 5\n\
                    weir_records_in_total{operator=\"source\",instance=\"1\"} 7\n\
                    weir_records_in_total{operator=\"window\",instance=\"0\"} 11\n\
                    weir_checkpoint_age_seconds 2.5\n\
                    # EOF\n";
        let samples = Samples::parse(text).expect("valid samples");
        let source = [("operator", "source")];
        assert_eq!(samples.sum("weir_records_in_total", &source), 12.0);
        assert_eq!(samples.sum("weir_records_in_total", &[]), 23.0);
        assert_eq!(
            samples.one("weir_checkpoint_age_seconds", &[]).ok(),
            Some(2.5)
        );
        assert!(samples.one("weir_records_in_total", &source).is_err());
        assert!(Samples::parse("weir_x_total{a=\"b\"}").is_err());
    }
}
