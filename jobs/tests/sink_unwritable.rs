//! A dead-letter topic that cannot be written stops the job (DESIGN.md §7, issue #15 item 3):
//! it is the one output failure a dead letter cannot absorb. The job exits non-zero with a
//! message naming the topic, and commits no checkpoint after the last one that is complete, so
//! a restart resumes from it. The refusal is the broker's own: the test runs a tansu broker of
//! its own with a schema registry (`--schema-registry`) whose schema for the dead-letter topic
//! no dead letter matches, so tansu answers every produce to it with `INVALID_RECORD`. A bad
//! record's dead letter is refused, cut and resent once as `undeliverable`, refused again, and
//! the job stops. (Deleting the topic is not a way: tansu 0.6's topic delete drops every
//! topic of the broker.) The same broker refusing score records shows the other side: a score
//! the broker refuses in its delivery report (not in librdkafka's own checks, as in
//! `tests/kafka_undeliverable.rs`) is an `undeliverable` dead letter and the job goes on.
//! Needs tansu installed by `scripts/setup.sh`.

#[path = "../../tests/support/kafka.rs"]
#[allow(dead_code)]
mod kafka;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use kafka::{create_topic, produce, unique_topic};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_kafka::SINK_FAILED_EXIT;
use weir_testkit::clickstream::{self, Topics};
use weir_testkit::cluster::free_port;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

/// The tests each start a broker and point the Kafka helpers at it (`WEIR_TEST_BROKERS`).
static ONE_BROKER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_dead_letter_topic_that_cannot_be_written_stops_the_job_at_its_last_checkpoint() -> Result<()> {
    let _one = ONE_BROKER_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = scratch_dir("dlq-unwritable");
    let (input, scores, dlq) = (
        unique_topic("unwritable-clicks"),
        unique_topic("unwritable-scores"),
        unique_topic("unwritable-dlq"),
    );
    // No dead letter is a JSON object with this field (most are not JSON at all).
    let schemas = dir.join("broker/schemas");
    fs::create_dir_all(&schemas)?;
    fs::write(
        schemas.join(format!("{dlq}.json")),
        r#"{"type": "object", "properties": {"value": {"type": "object", "required": ["no_dead_letter_has_this"]}}}"#,
    )?;
    let _broker = SchemaBroker::start(&dir.join("broker"))?;
    for topic in [&input, &scores, &dlq] {
        create_topic(topic, 1)?;
    }
    let events: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 3,
        events: 300,
        users: 20,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    produce(&input, &events)?;
    let topics = Topics {
        input: &input,
        scores: &scores,
        dead_letters: &dlq,
    };
    let ckpt = dir.join("ckpt");
    let text = format!(
        "{}\n[checkpoint]\n{}\n",
        clickstream::kafka_job_text(&kafka::brokers(), &topics),
        checkpoint_toml(&ckpt, "200ms")
    );
    let job = dir.join("job.toml");
    fs::write(&job, text)?;
    let stderr = dir.join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&job)
        .env("RUST_LOG", "info,librdkafka=warn")
        .stdout(fs::File::create(dir.join("stdout.log"))?)
        .stderr(fs::File::create(&stderr)?)
        .spawn()
        .context("cannot start weir")?;
    let result = (|| {
        // Running, and committing checkpoints over the good input.
        let deadline = Instant::now() + Duration::from_secs(60);
        while fs::read_to_string(&stderr)?
            .matches("checkpoint committed")
            .count()
            < 3
        {
            ensure!(
                Instant::now() < deadline && child.try_wait()?.is_none(),
                "the job did not commit checkpoints: {}",
                stderr.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // A malformed record: its dead letter cannot be written.
        let bad_offset = events.len() as i64;
        produce(&input, &[("bad".to_owned(), b"{not json".to_vec())])?;

        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            ensure!(
                Instant::now() < deadline,
                "the job kept running without its dead-letter topic: {}",
                stderr.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = fs::read_to_string(&stderr)?;
        ensure!(
            status.code() == Some(SINK_FAILED_EXIT),
            "weir exited with {status}, not {SINK_FAILED_EXIT}: {}",
            stderr.display()
        );
        ensure!(
            log.contains(&format!("error: cannot write to Kafka topic `{dlq}`"))
                && log.contains("was refused too")
                && log.contains("InvalidRecord"),
            "the exit does not name the dead-letter topic and the broker's refusal: {}",
            stderr.display()
        );

        // The newest checkpoint is complete and stops before the bad record: a restart reads
        // it again.
        let manifest = LocalDirStore::open(&ckpt)?
            .latest_valid()?
            .context("no valid checkpoint left")?;
        let next = manifest
            .sources
            .get(&input)
            .and_then(|partitions| partitions.get(&0))
            .map(|at| at.next_offset)
            .unwrap_or(0);
        ensure!(
            next <= bad_offset,
            "checkpoint {} resumes at {next}, past the bad record at {bad_offset} whose dead \
             letter was never written",
            manifest.epoch.0
        );
        Ok(())
    })();
    if child.try_wait()?.is_none() {
        child.kill()?;
        child.wait()?;
    }
    result?;
    fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn a_score_the_broker_refuses_in_its_report_is_an_undeliverable_dead_letter() -> Result<()> {
    let _one = ONE_BROKER_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = scratch_dir("score-refused");
    let (input, scores, dlq) = (
        unique_topic("refused-clicks"),
        unique_topic("refused-scores"),
        unique_topic("refused-dlq"),
    );
    // No score record has this field: the broker refuses every one with INVALID_RECORD.
    let schemas = dir.join("broker/schemas");
    fs::create_dir_all(&schemas)?;
    fs::write(
        schemas.join(format!("{scores}.json")),
        r#"{"type": "object", "properties": {"value": {"type": "object", "required": ["no_score_has_this"]}}}"#,
    )?;
    // tansu answers UNKNOWN to the letters on a topic without a schema while the registry is
    // on: the dead-letter topic gets one that takes anything.
    fs::write(schemas.join(format!("{dlq}.json")), "{}")?;
    let _broker = SchemaBroker::start(&dir.join("broker"))?;
    for topic in [&input, &scores, &dlq] {
        create_topic(topic, 1)?;
    }
    let events: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 4,
        events: 200,
        users: 5,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    produce(&input, &events)?;
    let topics = Topics {
        input: &input,
        scores: &scores,
        dead_letters: &dlq,
    };
    let ckpt = dir.join("ckpt");
    let text = format!(
        "{}\n[checkpoint]\n{}\n",
        clickstream::kafka_job_text(&kafka::brokers(), &topics)
            .replace("bounded = false", "bounded = true")
            // tansu 0.6 with a schema registry panics in its SQLite storage ("more or less
            // than one row", lite.rs:503) when an idempotent producer writes a second topic.
            + "\n[sink.kafka]\n\"enable.idempotence\" = \"false\"\n",
        checkpoint_toml(&ckpt, "200ms")
    );
    let job = dir.join("job.toml");
    fs::write(&job, text)?;
    let stderr = dir.join("stderr.log");
    let status = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&job)
        .env("RUST_LOG", "info,librdkafka=warn")
        .stdout(fs::File::create(dir.join("stdout.log"))?)
        .stderr(fs::File::create(&stderr)?)
        .status()
        .context("cannot run weir")?;
    ensure!(
        status.success(),
        "weir exited with {status}: {}",
        stderr.display()
    );
    let summary = fs::read_to_string(dir.join("stdout.log"))?;
    let letters = kafka::read_all(&dlq)?;
    ensure!(
        !letters.is_empty()
            && letters.iter().all(|l| {
                l.headers.get("weir.dlq.reason").map(String::as_str) == Some("undeliverable")
                    && l.headers
                        .get("weir.dlq.error")
                        .is_some_and(|e| e.contains(&scores) && e.contains("InvalidRecord"))
                    && l.payload.starts_with(b"{")
            }),
        "the refused scores are not undeliverable dead letters with the broker's error: {:?}",
        letters.iter().map(|l| &l.headers).collect::<Vec<_>>()
    );
    ensure!(
        summary.contains(&format!("undeliverable={}", letters.len())),
        "the summary does not count {} undeliverable letters: {summary}",
        letters.len()
    );
    ensure!(
        kafka::read_all(&scores)?.is_empty(),
        "a refused score is on the score topic"
    );
    fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A tansu broker of this test's own with a schema registry, killed on drop.
struct SchemaBroker {
    process: Child,
}

impl SchemaBroker {
    /// Starts tansu in `data`, with the schemas of `data/schemas`.
    fn start(data: &Path) -> Result<SchemaBroker> {
        let tansu = std::env::var_os("WEIR_TANSU_BIN").map_or_else(
            || {
                let home = std::env::var_os("HOME").unwrap_or_default();
                PathBuf::from(home).join(".cache/weir/tansu-0.6.0/bin/tansu")
            },
            PathBuf::from,
        );
        let port = free_port()?;
        let url = format!("tcp://127.0.0.1:{port}");
        let process = Command::new(&tansu)
            .arg("broker")
            .args(["--cluster-id", "weir-schema"])
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            // tansu resolves the registry's path against its working directory.
            .args(["--schema-registry", "file://./schemas"])
            .current_dir(data)
            .env_remove("LISTENER_URL")
            .env_remove("ADVERTISED_LISTENER_URL")
            .env_remove("STORAGE_ENGINE")
            .env_remove("SCHEMA_REGISTRY")
            .stdout(Stdio::null())
            .stderr(fs::File::create(data.join("tansu.log"))?)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot start {} (scripts/setup.sh installs it)",
                    tansu.display()
                )
            })?;
        let broker = SchemaBroker { process };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(Instant::now() < deadline, "tansu did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The Kafka helpers and the job file read the broker address from here.
        std::env::set_var("WEIR_TEST_BROKERS", format!("127.0.0.1:{port}"));
        Ok(broker)
    }
}

impl Drop for SchemaBroker {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
