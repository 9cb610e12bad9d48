//! Weir on secured Kafka clusters (issue #15 item 1), end to end against the real broker:
//! each test starts a tansu broker of its own ([`secured_broker`]) that requires TLS with a
//! certificate of the test's own CA, SASL/SCRAM, or both, and runs the `weir` binary with the
//! security settings in the job file's `[kafka]` properties, which pass through to librdkafka
//! unchanged. A job that has the right settings reads the whole input and scores every user;
//! a wrong password or a client without the CA stops `weir run` at its start-up topic check,
//! non-zero, with a message naming authentication or TLS and the settings to check. The
//! compression test produces zstd and lz4 batches (never snappy: tansu 0.6 cannot read it)
//! and reads them back. Needs tansu installed by `scripts/setup.sh`.

#[path = "kafka_security/secured_broker.rs"]
mod secured_broker;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use secured_broker::{client_properties, SecuredBroker, Security, User};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir_kafka::record_producer::RecordProducer;
use weir_kafka::topic_reader::read_topic;
use weir_testkit::clickstream::{self, Topics};
use weir_testkit::files::Scratch;

const INPUT: &str = "secure-clicks";
const SCORES: &str = "secure-scores";
const DEAD_LETTERS: &str = "secure-dlq";
const TOPICS: [(&str, i32); 3] = [(INPUT, 2), (SCORES, 1), (DEAD_LETTERS, 1)];

#[test]
fn a_job_runs_against_a_tls_broker_that_its_ca_file_verifies() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("kafka-tls");
    let broker = SecuredBroker::start(&scratch.path().join("broker"), &tls_only())?;
    let ca = ca_location(&broker)?;
    let security = [
        ("security.protocol", "ssl"),
        ("ssl.ca.location", ca.as_str()),
    ];
    runs_and_scores_every_user(scratch.path(), &broker, &security)?;
    scratch.passed();
    Ok(())
}

#[test]
fn a_tls_client_without_the_ca_fails_at_start_naming_tls() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("kafka-tls-no-ca");
    let broker = SecuredBroker::start(&scratch.path().join("broker"), &tls_only())?;
    // The system's CAs do not know the test's CA.
    let run = run_job(scratch.path(), &broker, &[("security.protocol", "ssl")])?;
    fails_at_start(
        &run,
        &["the TLS connection to the Kafka brokers", "ssl.ca.location"],
    )?;
    scratch.passed();
    Ok(())
}

#[test]
fn a_job_runs_against_a_scram_sha_256_broker_over_sasl_plaintext() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("kafka-scram-256");
    let broker = SecuredBroker::start(&scratch.path().join("broker"), &scram(false))?;
    let security = [
        ("security.protocol", "sasl_plaintext"),
        ("sasl.mechanisms", "SCRAM-SHA-256"),
        ("sasl.username", "alice"),
        ("sasl.password", "alice-secret"),
    ];
    runs_and_scores_every_user(scratch.path(), &broker, &security)?;
    scratch.passed();
    Ok(())
}

#[test]
fn a_job_runs_against_a_scram_sha_512_broker_over_sasl_ssl() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("kafka-scram-512-tls");
    let broker = SecuredBroker::start(&scratch.path().join("broker"), &scram(true))?;
    let ca = ca_location(&broker)?;
    let security = [
        ("security.protocol", "sasl_ssl"),
        ("ssl.ca.location", ca.as_str()),
        ("sasl.mechanisms", "SCRAM-SHA-512"),
        ("sasl.username", "bob"),
        ("sasl.password", "bob-secret"),
    ];
    runs_and_scores_every_user(scratch.path(), &broker, &security)?;
    scratch.passed();
    Ok(())
}

#[test]
fn a_wrong_password_fails_at_start_naming_authentication() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("kafka-scram-wrong");
    let broker = SecuredBroker::start(&scratch.path().join("broker"), &scram(false))?;
    let security = [
        ("security.protocol", "sasl_plaintext"),
        ("sasl.mechanisms", "SCRAM-SHA-256"),
        ("sasl.username", "alice"),
        ("sasl.password", "not-alice-secret"),
    ];
    let run = run_job(scratch.path(), &broker, &security)?;
    fails_at_start(
        &run,
        &[
            "authentication to the Kafka brokers",
            "sasl.username, sasl.password",
        ],
    )?;
    scratch.passed();
    Ok(())
}

#[test]
fn zstd_and_lz4_batches_read_back_unchanged() -> Result<()> {
    let mut scratch = Scratch::kept_unless_passed("kafka-compression");
    let topics = [("zstd", 1), ("lz4", 1)];
    let broker = SecuredBroker::start(
        &scratch.path().join("broker"),
        &Security {
            users: &[],
            tls: false,
            topics: &topics,
        },
    )?;
    let properties = client_properties(&broker, &[]);
    // Repetitive payloads, so a batch really is compressed.
    let records: Vec<(String, Vec<u8>)> = (0..500)
        .map(|i| {
            let payload = format!(
                r#"{{"user":"u{:03}","ts":{i},"type":"view","dwell_ms":1.5}}"#,
                i % 7
            );
            (format!("u{:03}", i % 7), payload.into_bytes())
        })
        .collect();
    for (codec, _) in topics {
        let compression = [("compression.type".to_owned(), codec.to_owned())];
        let mut producer = RecordProducer::create(&broker.address, codec, &compression)?;
        for (key, payload) in &records {
            producer.send(key.as_bytes(), payload)?;
        }
        producer
            .finish()
            .with_context(|| format!("producing {codec} batches"))?;
        let read = read_topic(&properties, codec, Duration::from_secs(60))?;
        let got: Vec<(String, Vec<u8>)> = read
            .into_iter()
            .map(|r| {
                (
                    String::from_utf8_lossy(&r.key.unwrap_or_default()).into_owned(),
                    r.payload,
                )
            })
            .collect();
        ensure!(
            got == records,
            "{codec}: read back {} records, not the {} produced in order",
            got.len(),
            records.len()
        );
    }
    scratch.passed();
    Ok(())
}

fn tls_only() -> Security<'static> {
    Security {
        users: &[],
        tls: true,
        topics: &TOPICS,
    }
}

fn scram(tls: bool) -> Security<'static> {
    const USERS: [User<'static>; 2] = [
        User {
            mechanism: "scram256",
            name: "alice",
            password: "alice-secret",
        },
        User {
            mechanism: "scram512",
            name: "bob",
            password: "bob-secret",
        },
    ];
    Security {
        users: &USERS,
        tls,
        topics: &TOPICS,
    }
}

fn ca_location(broker: &SecuredBroker) -> Result<String> {
    let ca = broker.ca.as_ref().context("the broker serves no TLS")?;
    Ok(ca.display().to_string())
}

/// Produces a clickstream to the input topic and runs the job bounded over it with
/// `security`: it must exit 0 having scored every user of the input (a bounded run flushes
/// every window, and every user has at least one event).
fn runs_and_scores_every_user(
    dir: &Path,
    broker: &SecuredBroker,
    security: &[(&str, &str)],
) -> Result<()> {
    let properties = client_properties(broker, security);
    let events: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 15,
        events: 400,
        users: 25,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    let producer_security: Vec<(String, String)> = security
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let mut producer = RecordProducer::create(&broker.address, INPUT, &producer_security)?;
    for (key, payload) in &events {
        producer.send(key.as_bytes(), payload)?;
    }
    producer.finish().context("producing the input")?;

    let run = run_job(dir, broker, security)?;
    ensure!(
        run.status.success(),
        "weir run exited with {}: {}",
        run.status,
        run.stderr
    );
    let mut reader = properties;
    reader.insert("group.id".to_owned(), "secure-reader".to_owned());
    let scores = read_topic(&reader, SCORES, Duration::from_secs(60))?;
    let users: BTreeSet<&str> = events.iter().map(|(key, _)| key.as_str()).collect();
    let mut scored = BTreeSet::new();
    for record in &scores {
        let value: serde_json::Value = serde_json::from_slice(&record.payload)?;
        ensure!(
            value["score"].is_f64(),
            "a score record without a score: {value}"
        );
        scored.insert(
            String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned(),
        );
    }
    let scored: BTreeSet<&str> = scored.iter().map(String::as_str).collect();
    ensure!(
        scored == users,
        "{} users in the input, {} scored ({} score records)",
        users.len(),
        scored.len(),
        scores.len()
    );
    Ok(())
}

/// A finished `weir run`.
struct Run {
    status: ExitStatus,
    stderr: String,
    took: Duration,
}

/// Runs the clickstream job, bounded, on `broker`'s topics with `security` in `[kafka]`.
fn run_job(dir: &Path, broker: &SecuredBroker, security: &[(&str, &str)]) -> Result<Run> {
    let topics = Topics {
        input: INPUT,
        scores: SCORES,
        dead_letters: DEAD_LETTERS,
    };
    let text = clickstream::kafka_job_text(&broker.address, &topics);
    let servers = format!("\"bootstrap.servers\" = \"{}\"\n", broker.address);
    ensure!(text.contains(&servers), "the job text has no {servers}");
    let settings: String = security
        .iter()
        .map(|(key, value)| format!("\"{key}\" = \"{value}\"\n"))
        .collect();
    let job = dir.join("job.toml");
    fs::write(
        &job,
        text.replace(&servers, &format!("{servers}{settings}")),
    )?;
    let stderr = dir.join("weir.log");
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&job)
        .arg("--bounded")
        .env("RUST_LOG", "info,librdkafka=warn")
        .stdout(fs::File::create(dir.join("weir.out"))?)
        .stderr(fs::File::create(&stderr)?)
        .spawn()
        .context("cannot start weir")?;
    let deadline = start + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            anyhow::bail!("weir run did not finish in 180 s: {}", stderr.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Run {
        status,
        stderr: fs::read_to_string(&stderr)?,
        took: start.elapsed(),
    })
}

/// The run failed, non-zero, saying each of `says`, at its start-up topic check (the first
/// request to the brokers) and without waiting out the 35 s that check gives a broker that
/// does not answer: a refusal is not retried.
fn fails_at_start(run: &Run, says: &[&str]) -> Result<()> {
    let error = run
        .stderr
        .lines()
        .rev()
        .find(|line| line.starts_with("error:"));
    eprintln!(
        "weir run failed ({}) after {:?}: {}",
        run.status,
        run.took,
        error.unwrap_or("no error line")
    );
    ensure!(!run.status.success(), "weir run succeeded: {}", run.stderr);
    for words in says {
        ensure!(
            run.stderr.contains(words),
            "the error does not say `{words}`: {}",
            run.stderr
        );
    }
    ensure!(
        run.took < Duration::from_secs(30),
        "the failure took {:?}, as long as waiting for a broker that is down",
        run.took
    );
    Ok(())
}
