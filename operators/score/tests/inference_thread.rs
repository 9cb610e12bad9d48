//! The inference thread (`weir_score::inference_thread`):
//! - its wake-ups: after the operator is woken, further results do not wake it again until it
//!   has taken what waits (one wake per drain, not one system call per batch), and a result
//!   sent after it took them wakes it again, so no result is left waiting for a wake-up that
//!   never comes;
//! - a core it cannot pin to stops the start with the reason, instead of a warning and an
//!   inference thread running where the CPU budget did not put it;
//! - a registry whose newest version does not load starts on the newest older one that does
//!   (a bad publish cannot keep a restarting job down), counts the failure, does not retry
//!   the bad version every poll, and moves on to a good newer one; a pinned version that does
//!   not load still stops the start.

mod common;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fixture;
use support::{config, registry_source, write_control, write_version};
use weir_score::budget::{cpu_set, InstanceCores};
use weir_score::counters::ScoreCounters;
use weir_score::inference_batch::InferenceBatch;
use weir_score::inference_thread::{Done, InferenceThread, Job};
use weir_score::registry::ModelSource;
use weir_testkit::files::scratch_dir;

/// A one-row batch of the fixtures' three features.
fn job(id: u64) -> Job {
    let mut batch = Box::<InferenceBatch>::default();
    batch.push_row(&[3.0, 40.0, 1.0], None);
    Job { id, batch }
}

/// Waits until `wakes` reaches `n` (or fails after 10 s).
fn wait_for_wakes(wakes: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while wakes.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "expected {n} wake-ups");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Takes results until `n` have come (or fails after 10 s); returns their ids.
fn take(thread: &InferenceThread, n: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ids = Vec::new();
    while ids.len() < n {
        assert!(
            Instant::now() < deadline,
            "expected {n} results, got {ids:?}"
        );
        ids.extend(thread.take_results().map(|Done { id, .. }| id));
        std::thread::sleep(Duration::from_millis(1));
    }
    ids
}

#[test]
fn one_wake_per_drain_and_none_lost() -> anyhow::Result<()> {
    let config = config(ModelSource::Dir(fixture("logreg")), None);
    let wakes = Arc::new(AtomicUsize::new(0));
    let counted = wakes.clone();
    let wake = move || {
        counted.fetch_add(1, Ordering::SeqCst);
    };
    let thread = InferenceThread::spawn(config.inference_setup(0), 0, 4, wake)?;

    // One result at a time, nothing taken in between: the first wakes, the rest do not.
    for id in 0..3 {
        thread
            .submit(job(id))
            .map_err(|_| anyhow::anyhow!("queue full"))?;
        wait_for_wakes(&wakes, 1);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        wakes.load(Ordering::SeqCst),
        1,
        "woken again before a drain"
    );
    assert_eq!(take(&thread, 3), [0, 1, 2]);

    // Taken: the next result wakes the operator again.
    thread
        .submit(job(3))
        .map_err(|_| anyhow::anyhow!("queue full"))?;
    wait_for_wakes(&wakes, 2);
    assert_eq!(take(&thread, 1), [3]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(wakes.load(Ordering::SeqCst), 2);
    Ok(())
}

#[test]
fn a_core_the_thread_cannot_pin_to_stops_the_start() {
    let mut config = config(ModelSource::Dir(fixture("logreg")), None);
    // A core outside this process's affinity mask (below the 1 024 a CPU set can name; the
    // job's budget check refuses any other id before a thread starts).
    let outside = (0..1024)
        .rev()
        .find(|c| !cpu_set().ids.contains(c))
        .expect("a core outside the mask");
    config.cores = Some(vec![InstanceCores {
        cores: vec![outside],
    }]);
    let error = match InferenceThread::spawn(config.inference_setup(0), 0, 4, || {}) {
        Ok(_) => panic!("started an inference thread that could not pin"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("refusing to start")
            && error.contains(&format!("inference thread pin to core {outside}")),
        "{error}"
    );
}

#[test]
fn a_newest_version_that_does_not_load_is_passed_over_at_start() -> anyhow::Result<()> {
    let root = scratch_dir("start-fallback");
    let model_dir = root.join("pp");
    write_version("logreg", &model_dir.join("v1"), "pp", "v1")?;
    write_version("logreg", &model_dir.join("v2"), "pp", "v2")?;
    write_version("logreg", &model_dir.join("v3"), "pp", "v3")?;
    std::fs::write(model_dir.join("v3/model.onnx"), b"not an onnx graph")?;
    // v2's manifest names another version than its directory: it does not check either.
    write_version("logreg", &model_dir.join("v2"), "pp", "v2-other")?;
    let config = config(registry_source(&root), None);
    let counters = config.counters.clone();
    let thread = InferenceThread::spawn(config.inference_setup(0), 0, 4, || {})?;
    assert_eq!(thread.initial_tag().version.as_str(), "v1");
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 2);
    // Polled every 5 ms: the bad newest is not retried (nor counted) while unchanged.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(ScoreCounters::get(&counters.reload_failures), 2);
    // A good newer version is served once published.
    write_version("logreg", &model_dir.join(".incoming"), "pp", "v4")?;
    std::fs::rename(model_dir.join(".incoming"), model_dir.join("v4"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while ScoreCounters::get(&counters.reloads) == 0 {
        assert!(Instant::now() < deadline, "v4 was never loaded");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(thread);

    // Pinned to the bad version: nothing else was asked for, so the start fails.
    write_control(&model_dir, "pin v3\n")?;
    let config = self::config(registry_source(&root), None);
    let error = match InferenceThread::spawn(config.inference_setup(0), 0, 4, || {}) {
        Ok(thread) => anyhow::bail!(
            "started pinned to a bad version: {:?}",
            thread.initial_tag()
        ),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("v3"), "{error}");
    std::fs::remove_dir_all(&root)?;
    Ok(())
}
