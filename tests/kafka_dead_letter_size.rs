//! A bad record as large as the input topic allows still reaches the dead-letter topic, and
//! checkpoints go on (DESIGN.md §7: bad input never disappears). Its dead letter adds headers
//! to the original bytes, which pushes it over the producer's `message.max.bytes`; sent as is,
//! librdkafka refuses it, the letter is lost, and no later checkpoint can be committed. The sink
//! cuts it to fit and names its original length in a header. Needs the test broker
//! (`scripts/test.sh` starts it).

mod support;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};

use support::kafka::{create_topic, produce, read_all, unique_topic};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir::JobFile;
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_kafka::dead_letter_fit::{DEFAULT_MESSAGE_MAX_BYTES, PAYLOAD_TRUNCATED_HEADER};
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

#[test]
fn a_dead_letter_over_the_size_limit_is_cut_and_checkpoints_go_on() -> Result<()> {
    let dir = scratch_dir("dlq-size");
    let (input, scores, dlq) = (
        unique_topic("big-clicks"),
        unique_topic("big-scores"),
        unique_topic("big-dlq"),
    );
    create_topic(&input, 1)?;
    create_topic(&scores, 1)?;
    create_topic(&dlq, 1)?;
    let mut records: Vec<(String, Vec<u8>)> = Clickstream::new(ClickstreamConfig {
        seed: 5,
        events: 400,
        users: 20,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect();
    // Malformed JSON that the test's producer can just send (its own limit is the default),
    // so the dead letter, with its headers, is over that limit.
    let big: Vec<u8> = std::iter::once(b'{')
        .chain(std::iter::repeat_n(b'x', DEFAULT_MESSAGE_MAX_BYTES - 200))
        .collect();
    records.insert(200, ("big-key".to_owned(), big.clone()));
    produce(&input, &records)?;

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.runtime.workers = 1;
    job.source.topic = input.clone();
    job.source.bounded = true;
    job.sink.topic = scores;
    job.sink.dead_letter_topic = dlq.clone();
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(
        &dir.join("ckpt"),
        "100ms",
    ))?);
    let summary = weir::run_job(job.compile()?, Arc::new(AtomicBool::new(false)))?;
    eprintln!("{}", summary.render());
    ensure!(
        summary.delivery_failures == 0,
        "{} records could not be delivered",
        summary.delivery_failures
    );

    let letters = read_all(&dlq)?;
    ensure!(
        letters.len() == 1,
        "{} dead letters, expected the big record's",
        letters.len()
    );
    let letter = &letters[0];
    ensure!(
        letter.headers.get(PAYLOAD_TRUNCATED_HEADER) == Some(&big.len().to_string()),
        "the dead letter does not name the original length: {:?}",
        letter.headers
    );
    ensure!(
        letter.payload.len() > big.len() - 2_000 && big.starts_with(&letter.payload),
        "the dead letter's {} bytes are not the start of the original",
        letter.payload.len()
    );
    ensure!(
        letter.headers.get("weir.dlq.offset") == Some(&"200".to_owned())
            && letter.key.as_deref() == Some(&b"big-key"[..]),
        "the dead letter lost its position or key: {:?}",
        letter.headers
    );

    // The last checkpoint covers the whole input: nothing stopped the commits.
    let manifest = LocalDirStore::open(dir.join("ckpt"))?
        .latest_valid()?
        .context("no checkpoint committed")?;
    let next = manifest
        .sources
        .get(&input)
        .and_then(|partitions| partitions.get(&0))
        .map(|at| at.next_offset);
    ensure!(
        next == Some(records.len() as i64),
        "the newest checkpoint (epoch {}) resumes at {next:?}, not after all {} records",
        manifest.epoch.0,
        records.len()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
