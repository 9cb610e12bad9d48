//! The clickstream itself: a seeded iterator of keyed event payloads.
//!
//! Event time is simulated (never the wall clock): a "true" time starts at `start_ms` and
//! advances by exponential gaps with mean `mean_gap_ms`. Events are emitted in true-time order
//! and each carries `ts = true_ms − uniform{0..=max_disorder_ms}`. So for any emitted event,
//! `ts >= (max ts emitted before it) − max_disorder_ms`: a watermark with
//! `max_out_of_orderness >= max_disorder_ms` sees no late record. (`ts` may lie up to
//! `max_disorder_ms` before `start_ms`.)

use anyhow::{ensure, Result};

use super::payload::{encode, encode_malformed, Fields, MalformedKind};
use super::rng::{unit_hash, Sampler, ZipfTable};
use super::truth::{EventType, UserState, AMOUNT_MEAN, AMOUNT_SIGMA, DWELL_SIGMA};

/// Parameters of a generated clickstream; the same config gives byte-identical output.
#[derive(Debug, Clone, PartialEq)]
pub struct ClickstreamConfig {
    /// Seed of the random stream.
    pub seed: u64,
    /// Number of records to generate (valid and malformed).
    pub events: u64,
    /// Number of distinct users (`u000000` ..).
    pub users: u32,
    /// Zipf exponent of user activity (rank `k` has weight `(k + 1)^-s`).
    pub zipf_exponent: f64,
    /// Simulated event time of the first event, ms since the Unix epoch.
    pub start_ms: i64,
    /// Mean gap between consecutive events' true times, ms.
    pub mean_gap_ms: f64,
    /// Largest amount an event's `ts` lags its true time, ms.
    pub max_disorder_ms: u64,
    /// Fraction of records replaced by a malformed payload, in `[0, 1]`.
    pub malformed_fraction: f64,
}

impl Default for ClickstreamConfig {
    fn default() -> Self {
        Self {
            seed: 42,
            events: 100_000,
            users: 1000,
            zipf_exponent: 1.1,
            start_ms: 1_767_225_600_000,
            mean_gap_ms: 50.0,
            max_disorder_ms: 2000,
            malformed_fraction: 0.0,
        }
    }
}

impl ClickstreamConfig {
    /// Checks that the parameters describe a stream that can be generated.
    pub fn validate(&self) -> Result<()> {
        ensure!(self.users >= 1, "users must be at least 1");
        ensure!(
            self.zipf_exponent.is_finite() && self.zipf_exponent >= 0.0,
            "zipf exponent must be finite and >= 0, got {}",
            self.zipf_exponent
        );
        ensure!(
            self.mean_gap_ms.is_finite() && self.mean_gap_ms > 0.0,
            "mean gap must be a positive number of ms, got {}",
            self.mean_gap_ms
        );
        ensure!(
            (0.0..=1.0).contains(&self.malformed_fraction),
            "malformed fraction must be in [0, 1], got {}",
            self.malformed_fraction
        );
        ensure!(
            self.max_disorder_ms <= 1 << 40,
            "max disorder {} ms is absurd",
            self.max_disorder_ms
        );
        Ok(())
    }
}

/// One generated record.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedEvent {
    /// The Kafka key: the user id, also for malformed records.
    pub key: String,
    /// The value bytes (JSON for valid events; see [`MalformedKind`] otherwise).
    pub payload: Vec<u8>,
    /// The event's `ts` for valid events; `None` for malformed records.
    pub event_time_ms: Option<i64>,
    /// How the record is malformed, if it is.
    pub malformed: Option<MalformedKind>,
    /// The type of a valid event; `None` for malformed records.
    pub event_type: Option<EventType>,
}

/// A deterministic clickstream: an iterator of [`GeneratedEvent`]s fixed by its config.
#[derive(Debug, Clone)]
pub struct Clickstream {
    config: ClickstreamConfig,
    sampler: Sampler,
    zipf: ZipfTable,
    users: Vec<UserState>,
    id_width: usize,
    emitted: u64,
    true_time_ms: f64,
}

impl Clickstream {
    /// A stream for `config`; fails when the config is invalid.
    pub fn new(config: ClickstreamConfig) -> Result<Self> {
        config.validate()?;
        let users = (0..config.users)
            .map(|i| UserState::new(unit_hash(config.seed, u64::from(i))))
            .collect();
        Ok(Self {
            sampler: Sampler::new(config.seed),
            zipf: ZipfTable::new(config.users, config.zipf_exponent),
            users,
            id_width: (config.users - 1).to_string().len().max(6),
            emitted: 0,
            true_time_ms: config.start_ms as f64,
            config,
        })
    }

    /// The config this stream was built from.
    pub fn config(&self) -> &ClickstreamConfig {
        &self.config
    }
}

fn round_to(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

impl Iterator for Clickstream {
    type Item = GeneratedEvent;

    fn next(&mut self) -> Option<GeneratedEvent> {
        if self.emitted >= self.config.events {
            return None;
        }
        self.emitted += 1;
        let s = &mut self.sampler;
        self.true_time_ms += s.exponential(self.config.mean_gap_ms);
        let true_ms = self.true_time_ms.floor() as i64;
        let index = self.zipf.sample(s);
        let ts = true_ms - s.below(self.config.max_disorder_ms + 1) as i64;
        let key = format!("u{index:0width$}", width = self.id_width);
        let user = &mut self.users[index as usize];

        if s.bernoulli(self.config.malformed_fraction) {
            let kind = MalformedKind::ALL[s.below(MalformedKind::ALL.len() as u64) as usize];
            let event_type = if s.bernoulli(0.5) {
                EventType::Click
            } else {
                EventType::View
            };
            let dwell_ms = round_to(s.lognormal(user.dwell_mean_ms(), DWELL_SIGMA), 10.0);
            let fields = Fields {
                user: &key,
                ts,
                event_type,
                dwell_ms,
                amount: None,
            };
            let payload = encode_malformed(kind, &fields, s);
            return Some(GeneratedEvent {
                key,
                payload,
                event_time_ms: None,
                malformed: Some(kind),
                event_type: None,
            });
        }

        let event_type = if s.bernoulli(user.purchase_probability(true_ms)) {
            EventType::Purchase
        } else if s.bernoulli(user.click_probability()) {
            EventType::Click
        } else {
            EventType::View
        };
        let dwell_ms = round_to(s.lognormal(user.dwell_mean_ms(), DWELL_SIGMA), 10.0);
        let amount = (event_type == EventType::Purchase)
            .then(|| round_to(s.lognormal(AMOUNT_MEAN, AMOUNT_SIGMA), 100.0).max(0.01));
        user.observe(event_type, dwell_ms, true_ms);
        let payload = encode(&Fields {
            user: &key,
            ts,
            event_type,
            dwell_ms,
            amount,
        });
        Some(GeneratedEvent {
            key,
            payload,
            event_time_ms: Some(ts),
            malformed: None,
            event_type: Some(event_type),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.config.events - self.emitted).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}
