//! Partitions added to the input topic are read (DESIGN.md §2: nothing is lost). While the
//! job runs, partition discovery finds them and the source instance that owns each one starts
//! it at its earliest offset; when they are added while the job is down, the restored run
//! starts them at their earliest offset too (a checkpoint without a partition predates it),
//! even with `start = "latest"`. Before, both were skipped silently. Needs the test broker
//! (`scripts/test.sh` starts it); tansu has no CreatePartitions request, so the test grows the
//! topic with `scripts/broker.sh add-partitions`.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use support::kafka::{create_topic, produce_to, unique_topic};
use weir::gen::{Clickstream, ClickstreamConfig};
use weir::JobFile;
use weir_checkpoint::{LocalDirStore, SnapshotStore};
use weir_kafka::source::StartFrom;
use weir_testkit::clickstream;
use weir_testkit::files::{checkpoint_toml, scratch_dir};

/// Records produced to each partition per step.
const PER_PARTITION: usize = 50;

fn payloads(seed: u64) -> Result<Vec<(String, Vec<u8>)>> {
    Ok(Clickstream::new(ClickstreamConfig {
        seed,
        events: PER_PARTITION as u64,
        users: 10,
        malformed_fraction: 0.0,
        ..ClickstreamConfig::default()
    })?
    .map(|e| (e.key, e.payload))
    .collect())
}

fn add_partitions(topic: &str, count: usize) -> Result<()> {
    let status = std::process::Command::new("bash")
        .args([
            "scripts/broker.sh",
            "add-partitions",
            topic,
            &count.to_string(),
        ])
        .status()?;
    ensure!(status.success(), "scripts/broker.sh add-partitions failed");
    Ok(())
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<weir::RunSummary>>,
}

fn start(job: &JobFile) -> Result<Running> {
    let stop = Arc::new(AtomicBool::new(false));
    let compiled = job.clone().compile()?;
    let flag = stop.clone();
    let thread = std::thread::spawn(move || weir::run_job(compiled, flag));
    Ok(Running { stop, thread })
}

impl Running {
    /// Stops the job; returns the number of records it read.
    fn finish(self) -> Result<u64> {
        self.stop.store(true, Ordering::SeqCst);
        let summary = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the job panicked"))??;
        Ok(summary.records_in)
    }
}

/// Waits until a committed checkpoint has read `PER_PARTITION` records of every partition in
/// `partitions` (all that were produced there).
fn wait_read(store: &LocalDirStore, topic: &str, partitions: &[i32], job: &Running) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let manifest = store.latest_valid()?;
        let positions = manifest
            .as_ref()
            .and_then(|m| m.sources.get(topic))
            .cloned()
            .unwrap_or_default();
        let read = |p: &i32| positions.get(p).map(|at| at.next_offset);
        if partitions
            .iter()
            .all(|p| read(p) == Some(PER_PARTITION as i64))
        {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline && !job.thread.is_finished(),
            "partitions {partitions:?} were not all read: the newest checkpoint has {:?}",
            positions
                .iter()
                .map(|(p, at)| (*p, at.next_offset))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Dead letters of the run with reason `late`.
fn late_letters(path: &Path) -> Result<usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    Ok(text
        .lines()
        .filter(|l| l.contains("\"reason\":\"late\""))
        .count())
}

#[test]
fn partitions_added_while_running_or_stopped_are_read_from_their_start() -> Result<()> {
    let dir = scratch_dir("new-partitions");
    let topic = unique_topic("growing");
    create_topic(&topic, 1)?;
    produce_to(&topic, 0, &payloads(0)?)?;

    // Two source instances and one partition: instance 1 owns nothing until the topic grows.
    let mut job = JobFile::load(&clickstream::job_path())?;
    job.kafka = support::kafka::properties();
    job.runtime.workers = 2;
    job.source.topic = topic.clone();
    job.source.bounded = false;
    job.source.partition_discovery = 300;
    job.watermark.idle_timeout = 300;
    let dead = dir.join("dead.jsonl");
    job.use_output_file(dir.join("scores.jsonl"), Some(dead.clone()));
    job.checkpoint = Some(toml::from_str(&checkpoint_toml(
        &dir.join("ckpt"),
        "100ms",
    ))?);
    let store = LocalDirStore::open(dir.join("ckpt"))?;

    // Grown while running, after partition 0 went idle: the instance that had no partition
    // must not have ended event time meanwhile, or the new partitions' records (as old as
    // partition 0's) would all be late.
    let running = start(&job)?;
    wait_read(&store, &topic, &[0], &running)?;
    std::thread::sleep(Duration::from_millis(1_000));
    add_partitions(&topic, 3)?;
    for partition in 1..3 {
        produce_to(&topic, partition, &payloads(partition as u64)?)?;
    }
    wait_read(&store, &topic, &[0, 1, 2], &running).context("grown while running")?;
    let read = running.finish()?;
    ensure!(
        read == 3 * PER_PARTITION as u64,
        "the run read {read} records, not the {} of 3 partitions",
        3 * PER_PARTITION
    );
    let late = late_letters(&dead)?;
    ensure!(
        late == 0,
        "{late} records of the new partitions were judged late: the watermark ran ahead"
    );

    // Grown while stopped: the restored run reads the new partitions from their first
    // record, although it would start a fresh partition at the end (`latest`) and discovery
    // is off.
    add_partitions(&topic, 5)?;
    for partition in 3..5 {
        produce_to(&topic, partition, &payloads(partition as u64)?)?;
    }
    job.source.start = StartFrom::Latest;
    job.source.partition_discovery = 0;
    let restored = start(&job)?;
    wait_read(&store, &topic, &[0, 1, 2, 3, 4], &restored).context("grown while stopped")?;
    // Only the new partitions' records: `latest` would have skipped them (their checkpointed
    // position would still be at their end).
    let read = restored.finish()?;
    ensure!(
        read == 2 * PER_PARTITION as u64,
        "the restored run read {read} records, not the {} of the 2 new partitions",
        2 * PER_PARTITION
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
