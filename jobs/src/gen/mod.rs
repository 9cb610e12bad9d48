//! `weir gen`: the deterministic clickstream generator that feeds the pipeline's source.
//!
//! It sits before the Kafka source: it writes keyed JSON events (`user`, `ts`, `type`,
//! `dwell_ms`, `amount`) to a topic or a JSON Lines file, the same records the file source
//! replays for tests and for training sets (`scripts/export_model.py`).
//!
//! - [`Clickstream`] is a plain iterator, usable without Kafka; a seed and a
//!   [`ClickstreamConfig`] fix the output bytes.
//! - Event time is simulated from `start_ms`, bounded out-of-order by `max_disorder_ms`
//!   (see [`clickstream`]): a watermark with `max_out_of_orderness >= max_disorder_ms`
//!   sees no late record.
//! - Ground truth: purchases follow a hidden per-user model of recent clicks and mean dwell
//!   (see [`truth`]), learnable from 1-minute window features.
//! - A configurable fraction of records is malformed in one of the [`MalformedKind`]s, each
//!   of which the job must send to the dead-letter topic.
//!
//! docs/GENERATOR.md describes the model, the flags and how the committed test model was made.

pub mod clickstream;
mod payload;
mod rng;
mod sink;
#[cfg(test)]
mod tests;
pub mod truth;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

pub use clickstream::{Clickstream, ClickstreamConfig, GeneratedEvent};
pub use payload::MalformedKind;
pub use truth::EventType;

use sink::{EventSink, JsonlSink, KafkaSink};

/// Flags of `weir gen`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("output").required(true).args(["out", "topic"])))]
pub struct GenArgs {
    /// Seed of the random stream (same seed and flags ⇒ byte-identical output).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Number of records to generate, malformed ones included.
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// Number of distinct users.
    #[arg(long, default_value_t = 1000)]
    pub users: u32,
    /// Zipf exponent of user activity.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Fraction of malformed records, in [0, 1].
    #[arg(long, default_value_t = 0.0)]
    pub malformed: f64,
    /// Largest lag of an event's `ts` behind its true time, e.g. "2s".
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub max_disorder: Duration,
    /// Mean simulated event-time gap between events, e.g. "50ms".
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    pub mean_gap: Duration,
    /// Simulated event time of the first event, ms since the Unix epoch.
    #[arg(long, default_value_t = 1_767_225_600_000)]
    pub start_ms: i64,
    /// Wall-clock pacing in records per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Write one payload per line to this file (`-` for stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Produce to this Kafka topic, keyed by user.
    #[arg(long, requires = "brokers")]
    pub topic: Option<String>,
    /// Kafka bootstrap servers, HOST:PORT[,HOST:PORT..].
    #[arg(long, requires = "topic")]
    pub brokers: Option<String>,
    /// Extra librdkafka producer property, KEY=VALUE (repeatable).
    #[arg(long = "producer-prop", value_parser = parse_key_value)]
    pub producer_props: Vec<(String, String)>,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got `{s}`")),
    }
}

impl GenArgs {
    /// The clickstream these flags describe.
    pub fn clickstream_config(&self) -> ClickstreamConfig {
        ClickstreamConfig {
            seed: self.seed,
            events: self.events,
            users: self.users,
            zipf_exponent: self.zipf,
            start_ms: self.start_ms,
            mean_gap_ms: self.mean_gap.as_secs_f64() * 1000.0,
            max_disorder_ms: u64::try_from(self.max_disorder.as_millis()).unwrap_or(u64::MAX),
            malformed_fraction: self.malformed,
        }
    }
}

/// What one `weir gen` run wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenSummary {
    /// Records written (valid and malformed).
    pub events: u64,
    /// Malformed records written.
    pub malformed: u64,
    /// Malformed records by [`MalformedKind::as_str`].
    pub malformed_by_kind: BTreeMap<&'static str, u64>,
    /// Valid views.
    pub views: u64,
    /// Valid clicks.
    pub clicks: u64,
    /// Valid purchases.
    pub purchases: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Wall-clock time of the run, flush included.
    pub elapsed: Duration,
}

impl GenSummary {
    /// Adds one record to the counts.
    pub fn record(&mut self, event: &GeneratedEvent) {
        self.events += 1;
        self.bytes += event.payload.len() as u64;
        if let Some(kind) = event.malformed {
            self.malformed += 1;
            *self.malformed_by_kind.entry(kind.as_str()).or_default() += 1;
        }
        match event.event_type {
            Some(EventType::View) => self.views += 1,
            Some(EventType::Click) => self.clicks += 1,
            Some(EventType::Purchase) => self.purchases += 1,
            None => {}
        }
    }

    /// Records per wall-clock second.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for GenSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "events={} views={} clicks={} purchases={} malformed={} bytes={} elapsed={:.3}s rate={:.0}/s",
            self.events,
            self.views,
            self.clicks,
            self.purchases,
            self.malformed,
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.rate()
        )?;
        for (kind, n) in &self.malformed_by_kind {
            write!(f, " {kind}={n}")?;
        }
        Ok(())
    }
}

/// Runs `weir gen`: generates, writes, flushes, prints and returns the summary.
pub fn run(args: &GenArgs) -> Result<GenSummary> {
    if let Some(rate) = args.rate {
        ensure!(
            rate.is_finite() && rate > 0.0,
            "--rate must be a positive number, got {rate}"
        );
    }
    let stream = Clickstream::new(args.clickstream_config()).context("invalid generator flags")?;
    let mut sink: Box<dyn EventSink> = match (&args.out, &args.topic, &args.brokers) {
        (Some(path), None, _) => Box::new(JsonlSink::create(path)?),
        (None, Some(topic), Some(brokers)) => {
            Box::new(KafkaSink::create(brokers, topic, &args.producer_props)?)
        }
        _ => bail!("give exactly one output: --out FILE or --topic NAME --brokers HOST:PORT"),
    };
    let started = Instant::now();
    let mut summary = GenSummary::default();
    for event in stream {
        if let Some(rate) = args.rate {
            let due = started + Duration::from_secs_f64(summary.events as f64 / rate);
            let now = Instant::now();
            if due > now + Duration::from_millis(1) {
                std::thread::sleep(due - now);
            }
        }
        sink.send(&event)?;
        summary.record(&event);
    }
    sink.finish()?;
    summary.elapsed = started.elapsed();
    let to_stdout = args.out.as_ref().is_some_and(|p| p.as_os_str() == "-");
    if to_stdout {
        eprintln!("weir gen: {summary}");
    } else {
        println!("weir gen: {summary}");
    }
    Ok(summary)
}
