//! A Kafka partition that stays quiet is still in every checkpoint (DESIGN.md §5): the
//! source records a resume position for each partition it owns from the start, not only once
//! a record arrives. Otherwise a job started at `latest` whose partition 1 is quiet checkpoints
//! no position for it, and a restore starts partition 1 at the then-latest end, skipping
//! whatever was produced there meanwhile. Needs the test broker (`scripts/test.sh` starts it).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use support::kafka::{create_topic, produce, unique_topic};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir::JobFile;
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_kafka::source::StartFrom;
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

#[test]
fn a_quiet_partition_has_a_resume_position_in_every_checkpoint() -> Result<()> {
    let dir = scratch_dir("quiet");
    let topic = unique_topic("quiet");
    create_topic(&topic, 2)?;
    // Produced before the job starts at `latest`: the busy partition's start is past them.
    let payloads: Vec<Vec<u8>> = Clickstream::new(ClickstreamConfig {
        seed: 3,
        events: 2_000,
        users: 50,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    })?
    .map(|e| e.payload)
    .collect();
    // One Kafka key: every record goes to the same partition, the other stays quiet.
    let keyed = |range: std::ops::Range<usize>| -> Vec<(String, Vec<u8>)> {
        payloads[range]
            .iter()
            .map(|p| ("one-key".to_owned(), p.clone()))
            .collect()
    };
    produce(&topic, &keyed(0..100))?;

    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.runtime.workers = 1;
    job.source.topic = topic.clone();
    job.source.start = StartFrom::Latest;
    job.source.bounded = false;
    job.use_output_file(dir.join("scores.jsonl"), Some(dir.join("dead.jsonl")));
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(
        &dir.join("ckpt"),
        "100ms",
    ))?);
    let stop = Arc::new(AtomicBool::new(false));
    let running = {
        let (compiled, stop) = (job.compile()?, stop.clone());
        std::thread::spawn(move || weir::run_job(compiled, stop))
    };
    // Keep producing to the busy partition until a checkpoint has read some of it.
    let store = LocalDirStore::open(dir.join("ckpt"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next = 100;
    let manifest = loop {
        if let Some(m) = store.latest_valid()? {
            let read = m.sources.get(&topic).into_iter().flat_map(|p| p.values());
            if read.map(|at| at.next_offset).max().unwrap_or(0) > 100 {
                break m;
            }
        }
        ensure!(
            Instant::now() < deadline && !running.is_finished(),
            "no checkpoint read the records produced after the start"
        );
        if next < payloads.len() {
            produce(&topic, &keyed(next..next + 20))?;
            next += 20;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    stop.store(true, Ordering::SeqCst);
    running
        .join()
        .map_err(|_| anyhow::anyhow!("the job panicked"))??;
    let positions = manifest
        .sources
        .get(&topic)
        .context("the topic's positions")?;
    ensure!(
        positions.len() == 2,
        "epoch {} records partitions {:?}; the quiet one is missing",
        manifest.epoch.0,
        positions.keys().collect::<Vec<_>>()
    );
    let quiet = positions.values().map(|at| at.next_offset).min();
    ensure!(
        quiet == Some(0),
        "the quiet partition resumes at {quiet:?}, not 0"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
