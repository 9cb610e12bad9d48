//! Backpressure across processes: a source holds back while the stage it is paced by lags
//! more than `max_lag` behind its tick, even when that stage runs in another process.
//!
//! Two Timely processes talk over TCP on localhost (two threads of this test, each with its
//! own `JobMetrics`, so nothing but Timely's progress tracking connects them). Process 0 runs
//! the file source; every event goes to a stand-in for a slow score instance on process 1,
//! which keeps a capability at the first tick it saw until the test lets it go. The source
//! must stop reading (and count a lag episode) with most of its file unread, read nothing
//! more while the stage is held, and read the whole file once it is let go. And while
//! process 1 has not built its dataflow yet (a slow model load, say), the source reads
//! nothing at all: nothing it read could get past the missing worker.

mod file_input;

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::{Operator, Probe};

use weir_features::record::Event;
use weir_operators::file_source::{file_source, FileSourceConfig};
use weir_operators::metrics::JobMetrics;
use weir_operators::Placement;
use weir_testkit::files::scratch_dir;

use file_input::{file_config, user_lines};

/// Far more lines than the source reads (one per activation) before its lag bound trips.
const LINES: u64 = 300_000;
const TICK_MS: u64 = 10;
/// The bound of the lag test: tight, so that it trips within a few lines.
const MAX_LAG_MS: u64 = 50;
/// The bound of the start test. Once both processes run, the file's 300 k lines cross TCP to
/// process 1, which on a loaded 2-core machine can fall 50 ms behind for real (a true lag
/// episode, which that test does not ask about); 5 s rules that out, and still counts the
/// start as lag if the not-yet-started worker's tick 0 were taken for lag (0 + 5 s is far
/// behind any Unix-time tick).
const START_MAX_LAG_MS: u64 = 5_000;

fn write_input(dir: &Path) -> Result<std::path::PathBuf> {
    let path = dir.join("events.jsonl");
    std::fs::write(&path, user_lines(LINES, |i| i % 1000))?;
    Ok(path)
}

fn source_config(path: &Path, metrics: Arc<JobMetrics>, max_lag_ms: u64) -> FileSourceConfig {
    let mut config = file_config(vec![path.to_path_buf()], "events", &metrics);
    config.stage.placement = Placement::new(2, 2);
    config.stage.tick_ms = TICK_MS;
    config.max_batch = 1;
    config.stage.pacing.max_lag_ms = Some(max_lag_ms);
    config
}

/// Two free localhost ports for the cluster.
fn addresses() -> Result<Vec<String>> {
    let listeners = [
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
    ];
    listeners
        .iter()
        .map(|l| Ok(format!("127.0.0.1:{}", l.local_addr()?.port())))
        .collect()
}

/// What process 0 saw: events read when the source first held back, events read after the
/// held stage had been held a while longer.
struct Seen {
    at_hold: u64,
    while_held: u64,
}

/// How the two processes behave.
#[derive(Clone)]
struct Scenario {
    /// While false, process 1's stage keeps its first tick's capability.
    release: Arc<AtomicBool>,
    /// Whether process 1 builds its dataflow only once process 0 has watched its source.
    late_start: bool,
    /// Set by process 0 when its watch is over.
    watched: Arc<AtomicBool>,
    /// The source's `max_lag`.
    max_lag_ms: u64,
}

/// Runs the two-process cluster; process 0's worker runs `watch` and returns its result.
fn run_cluster<T: Send + 'static>(
    label: &str,
    scenario: &Scenario,
    watch: fn(&mut timely::worker::Worker, &JobMetrics, &Scenario) -> Result<T>,
) -> Result<(T, Arc<JobMetrics>)> {
    let dir = scratch_dir(&format!("source-{label}"));
    let path = write_input(&dir)?;
    let addresses = addresses()?;
    let metrics: Vec<Arc<JobMetrics>> = (0..2).map(|_| Arc::new(JobMetrics::default())).collect();
    let processes: Vec<_> = (0..2)
        .map(|process| {
            let config = source_config(&path, metrics[process].clone(), scenario.max_lag_ms);
            let metrics = metrics[process].clone();
            let scenario = scenario.clone();
            let addresses = addresses.clone();
            std::thread::spawn(move || -> Result<Option<T>> {
                let timely_config = timely::Config {
                    communication: timely::CommunicationConfig::Cluster {
                        threads: 1,
                        process,
                        addresses,
                        report: false,
                        zerocopy: false,
                    },
                    worker: timely::WorkerConfig::default(),
                };
                let guards = timely::execute(timely_config, move |worker| {
                    run_worker(worker, config.clone(), &metrics, &scenario, watch)
                })
                .map_err(|e| anyhow::anyhow!("cannot start the Timely process: {e}"))?;
                let mut results = guards.join().into_iter();
                results
                    .next()
                    .context("one worker")?
                    .map_err(|e| anyhow::anyhow!("worker panicked: {e}"))?
            })
        })
        .collect();
    let mut seen = Vec::new();
    for process in processes {
        seen.push(
            process
                .join()
                .map_err(|_| anyhow::anyhow!("a process thread panicked"))??,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let seen = seen[0].take().context("process 0 reports what it saw")?;
    Ok((seen, metrics[0].clone()))
}

#[test]
fn lagging_progress_in_another_process_holds_the_source_back() -> Result<()> {
    let scenario = Scenario {
        release: Arc::new(AtomicBool::new(false)),
        late_start: false,
        watched: Arc::new(AtomicBool::new(false)),
        max_lag_ms: MAX_LAG_MS,
    };
    let (seen, metrics) = run_cluster("lag", &scenario, watch_until_held)?;
    let Seen {
        at_hold,
        while_held,
    } = seen;
    ensure!(
        at_hold < LINES / 2,
        "the source read {at_hold} of {LINES} lines before holding back"
    );
    ensure!(
        while_held == at_hold,
        "the source read {} lines while the stage was held",
        while_held - at_hold
    );
    let read = metrics.events_in();
    ensure!(
        read == LINES,
        "{read} of {LINES} lines read after the stage was let go"
    );
    ensure!(JobMetrics::get(&metrics.lag_episodes) >= 1);
    ensure!(
        JobMetrics::get(&metrics.source_pauses) == 0,
        "no score backlog is involved"
    );
    Ok(())
}

#[test]
fn a_source_reads_nothing_until_every_worker_has_started() -> Result<()> {
    let scenario = Scenario {
        release: Arc::new(AtomicBool::new(true)),
        late_start: true,
        watched: Arc::new(AtomicBool::new(false)),
        max_lag_ms: START_MAX_LAG_MS,
    };
    let (read_before, metrics) = run_cluster("start", &scenario, watch_until_built)?;
    ensure!(
        read_before == 0,
        "the source read {read_before} lines before process 1 had built its dataflow"
    );
    let read = metrics.events_in();
    ensure!(read == LINES, "{read} of {LINES} lines read in the end");
    ensure!(
        JobMetrics::get(&metrics.lag_episodes) == 0,
        "waiting for a worker to start is not a lag"
    );
    Ok(())
}

/// One worker of the two-process cluster; process 0's worker runs `watch`, then (whatever
/// it found) lets the held stage go and runs the dataflow to its end, so that a failed check
/// fails the test instead of leaving process 1 waiting for progress forever.
fn run_worker<T>(
    worker: &mut timely::worker::Worker,
    config: FileSourceConfig,
    metrics: &JobMetrics,
    scenario: &Scenario,
    watch: fn(&mut timely::worker::Worker, &JobMetrics, &Scenario) -> Result<T>,
) -> Result<Option<T>> {
    if worker.index() != 0 && scenario.late_start {
        // A slow start (a model loading, say): no dataflow here until process 0 has looked.
        while !scenario.watched.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let released = scenario.release.clone();
    worker.dataflow::<u64, _, _>(|scope| {
        let source = file_source(scope, config).expect("the input file exists");
        let progress = source.progress.clone();
        // A slow score instance on worker 1: it keeps its first tick's capability until
        // released (as a batch in flight would), and passes the events on.
        let mut kept = None;
        source
            .events
            .unary_frontier(Exchange::new(|_: &Event| 1), "HeldStage", |_, _| {
                move |(input, _frontier), output| {
                    input.for_each(|cap, data| {
                        if let Some(cap) = cap.retain_least(0) {
                            if kept.is_none() && !released.load(Ordering::SeqCst) {
                                kept = Some(cap.clone());
                            }
                            output.session(&cap).give_container(data);
                        }
                    });
                    if released.load(Ordering::SeqCst) {
                        kept = None;
                    }
                }
            })
            .probe_with(&progress);
    });
    if worker.index() != 0 {
        while worker.step_or_park(Some(Duration::from_millis(5))) {}
        return Ok(None);
    }
    let seen = watch(worker, metrics, scenario);
    scenario.watched.store(true, Ordering::SeqCst);
    scenario.release.store(true, Ordering::SeqCst);
    while worker.step_or_park(Some(Duration::from_millis(5))) {}
    seen.map(Some)
}

/// Steps process 0's worker until its source holds back, then 300 ms longer.
fn watch_until_held(
    worker: &mut timely::worker::Worker,
    metrics: &JobMetrics,
    _: &Scenario,
) -> Result<Seen> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while JobMetrics::get(&metrics.lag_episodes) == 0 {
        ensure!(
            Instant::now() < deadline && metrics.events_in() < LINES,
            "the source never held back ({} lines read)",
            metrics.events_in()
        );
        worker.step_or_park(Some(Duration::from_millis(1)));
    }
    let at_hold = metrics.events_in();
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        worker.step_or_park(Some(Duration::from_millis(5)));
    }
    Ok(Seen {
        at_hold,
        while_held: metrics.events_in(),
    })
}

/// Steps process 0's worker for 300 ms while process 1 has not built its dataflow (it
/// waits for this watch to end); returns the lines read in that time.
fn watch_until_built(
    worker: &mut timely::worker::Worker,
    metrics: &JobMetrics,
    _: &Scenario,
) -> Result<u64> {
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        worker.step_or_park(Some(Duration::from_millis(1)));
    }
    Ok(metrics.events_in())
}
