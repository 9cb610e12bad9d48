//! Scripted sources for Timely tests of the window operator: a [`SourceReader`] that releases
//! one step of a shared script per poll and reports progress from [`PartitionWatermarks`]
//! driven by an injected fake clock, plus a harness that runs the source → `window_features`
//! dataflow and captures rows and late records with the step that produced them.
//!
//! Determinism: the source operator advances Timely ticks by the wall clock, so each step is
//! released in its own tick (strictly after the tick of the previous step) and only after
//! every source instance has polled once. A source instance's report for tick `t` is computed
//! after its own steps of ticks `<= t` and before its steps of later ticks, and the window
//! operator fires on tick `t` after folding tick `t`'s reports. So what fires, and after which
//! step, depends only on the script, never on how many wall-clock ticks a step took. Readers
//! ignore the wall-clock `now_ms` that `build_source` passes them (except to pace steps): their
//! watermarks see only their fake clock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use timely::dataflow::operators::Inspect;

use weir_checkpoint::SourcePositions;
use weir_features::aggregate::AggKind::{Count, Sum};
use weir_features::dead_letter::DeadLetter;
use weir_features::feature::FeatureSet;
use weir_features::job_features::JobFeatures;
use weir_features::record::{Event, Value};
use weir_features::row::FeatureRow;
use weir_features::schema::RecordSchema;
use weir_features::vocab::{EventTime, Tick};
use weir_features::watermark::{PartitionWatermarks, SourceProgress};
use weir_features::window::WindowSpec;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::epochs::{EpochClock, OperatorCheckpoints};
use weir_operators::metrics::JobMetrics;
use weir_operators::source_operator::{build_source, Pacing, SourceReader};
use weir_operators::window_instance::WindowLogic;
use weir_operators::{Placement, WindowConfig, WindowFeatures};
use weir_testkit::event::event;
use weir_testkit::schema::F64;
use weir_testkit::spec::spec;

/// Wall-clock tick length of the test dataflows.
const TICK_MS: u64 = 2;
/// A script that has not finished by then is stuck: the readers stop and the run fails.
const DEADLINE: Duration = Duration::from_secs(20);
/// Key groups of the test jobs.
pub const KEY_GROUPS: u32 = 64;
/// Tumbling window size of the test jobs.
pub const WINDOW_MS: i64 = 1_000;

/// One record to release: partition, key, event time, `x`.
#[derive(Clone, Debug)]
pub struct Rec {
    partition: i32,
    key: &'static str,
    ts: EventTime,
    x: f64,
}

/// A record on `partition` with key `key`, event time `ts` and field `x`.
pub fn rec(partition: i32, key: &'static str, ts: EventTime, x: f64) -> Rec {
    Rec {
        partition,
        key,
        ts,
        x,
    }
}

/// One step of a script, executed by one source instance in one poll.
#[derive(Clone, Debug, Default)]
pub struct Step {
    instance: u32,
    clock_ms: Option<u64>,
    records: Vec<Rec>,
    caught_up: Vec<(i32, bool)>,
    end_of_input: bool,
}

impl Step {
    /// A step for source instance `instance`.
    pub fn on(instance: u32) -> Step {
        Step {
            instance,
            ..Step::default()
        }
    }

    /// First sets the instance's fake clock to `ms`.
    pub fn at(mut self, ms: u64) -> Step {
        self.clock_ms = Some(ms);
        self
    }

    /// Releases these records (offsets are numbered per partition from 0, in release order);
    /// like a Kafka record, each one marks its partition as not caught up.
    pub fn records(mut self, records: impl IntoIterator<Item = Rec>) -> Step {
        self.records.extend(records);
        self
    }

    /// After the records, marks `partition` as caught up (or lagging).
    pub fn caught_up(mut self, partition: i32, caught_up: bool) -> Step {
        self.caught_up.push((partition, caught_up));
        self
    }

    /// After everything else, finishes all the instance's partitions (bounded input read).
    pub fn end_of_input(mut self) -> Step {
        self.end_of_input = true;
        self
    }
}

/// A test job: its sources, watermark settings and script.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Timely workers; also the source and window parallelism.
    pub workers: usize,
    /// Partitions; partition `p` belongs to source instance `p % workers`.
    pub partitions: Vec<i32>,
    /// Partitions caught up from the start.
    pub caught_up: Vec<i32>,
    /// Every instance's fake clock at start (partitions are assigned at fake time 0).
    pub start_clock_ms: u64,
    /// Bounded out-of-orderness of the partition watermarks.
    pub max_out_of_orderness_ms: i64,
    /// Idle timeout of the partition watermarks, in fake-clock ms.
    pub idle_timeout_ms: u64,
    /// Allowed lateness of the window operator.
    pub allowed_lateness_ms: i64,
    /// The script, released in order.
    pub steps: Vec<Step>,
}

/// A row together with the last script step released before it fired.
#[derive(Clone, Debug)]
pub struct Fired<T> {
    /// Index of the step after which it was emitted (`None`: before the first step).
    pub step: Option<usize>,
    /// What was emitted.
    pub item: T,
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    /// Feature rows, sorted by (step, window end, key, revision).
    pub rows: Vec<Fired<FeatureRow>>,
    /// Late records, sorted by (step, partition, offset).
    pub late: Vec<Fired<DeadLetter>>,
    /// The job's counters.
    pub metrics: Arc<JobMetrics>,
}

impl Outcome {
    /// `(key, window_start, revision, [count, sum])` of every row, in order.
    pub fn row_summary(&self) -> Vec<(String, i64, u32, Vec<f64>)> {
        self.rows
            .iter()
            .map(|f| {
                let r = &f.item;
                (
                    r.key.to_string(),
                    r.window_start,
                    r.revision,
                    r.values.to_vec(),
                )
            })
            .collect()
    }
}

/// Locks a mutex, recovering its data if a panicking thread poisoned it (the panic itself
/// fails the test).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The input schema: `k` (key), `ts` (event time), `x` (number).
pub fn schema() -> RecordSchema {
    weir_testkit::schema::schema("k", "ts", &[("x", F64)])
}

/// Features `n = count()` and `x_sum = sum(x)`, in that order.
pub fn features(schema: &RecordSchema) -> Result<FeatureSet, String> {
    let specs = [
        spec("n", Count, None, None),
        spec("x_sum", Sum, Some("x"), None),
    ];
    FeatureSet::compile(&specs, schema).map_err(|e| format!("test features: {e}"))
}

/// The script shared by all source instances.
struct Shared {
    steps: Vec<Step>,
    next: usize,
    /// Wall-clock tick at which each released step was released.
    released: Vec<Tick>,
    /// Which instances have polled at least once.
    polled: Vec<bool>,
    started: Instant,
    timed_out: bool,
}

impl Shared {
    fn last_tick(&self) -> Option<Tick> {
        self.released.last().copied()
    }

    /// Index of the last step released at or before `tick`.
    fn step_of(&self, tick: Tick) -> Option<usize> {
        self.released
            .iter()
            .filter(|t| **t <= tick)
            .count()
            .checked_sub(1)
    }
}

/// A source instance that plays its part of the script.
struct ScriptedReader {
    instance: u32,
    script: Arc<Mutex<Shared>>,
    schema: RecordSchema,
    /// The injected clock: the only "now" the watermarks ever see.
    clock: Arc<AtomicU64>,
    watermarks: PartitionWatermarks,
    partitions: Vec<i32>,
    offsets: BTreeMap<i32, i64>,
    ended: bool,
    stop: Arc<AtomicBool>,
}

impl ScriptedReader {
    fn apply(&mut self, step: Step, events: &mut Vec<Event>) {
        if let Some(ms) = step.clock_ms {
            self.clock.store(ms, Ordering::SeqCst);
        }
        let now = self.clock.load(Ordering::SeqCst);
        for r in step.records {
            let offset = self.offsets.get(&r.partition).copied().unwrap_or(0);
            self.offsets.insert(r.partition, offset + 1);
            events.push(self.event(&r, offset));
            self.watermarks.observe(r.partition, r.ts, now);
            // As the Kafka source does: a record clears the partition-EOF flag.
            self.watermarks.set_caught_up(r.partition, false);
        }
        for (partition, caught_up) in step.caught_up {
            self.watermarks.set_caught_up(partition, caught_up);
        }
        if step.end_of_input {
            for p in &self.partitions {
                self.watermarks.finish(*p);
            }
            self.ended = true;
        }
    }

    fn event(&self, r: &Rec, offset: i64) -> Event {
        let x = |name: &str| {
            if name == "x" {
                Value::Num(r.x)
            } else {
                Value::Missing
            }
        };
        event(r.key, r.ts)
            .by_name(&self.schema, x)
            .key_groups(KEY_GROUPS)
            .partition(r.partition)
            .offset(offset)
            .build()
    }
}

impl SourceReader for ScriptedReader {
    fn instance(&self) -> u32 {
        self.instance
    }

    fn source_name(&self) -> &str {
        "scripted"
    }

    /// Checkpoints are off in these tests.
    fn positions(&mut self) -> SourcePositions {
        SourcePositions::default()
    }

    /// Releases the next step if it is this instance's, every instance has polled, and the
    /// wall clock is past the tick of the previous step; stops the source once the script is
    /// done and this instance has reported its final state. Returns 0 so the operator paces
    /// itself by the wall clock.
    fn poll(&mut self, now_ms: u64, events: &mut Vec<Event>, _dead: &mut Vec<DeadLetter>) -> usize {
        let tick = now_ms / TICK_MS;
        let mut script = lock(&self.script);
        if let Some(polled) = script.polled.get_mut(self.instance as usize) {
            *polled = true;
        }
        if script.started.elapsed() > DEADLINE {
            script.timed_out = true;
            self.stop.store(true, Ordering::SeqCst);
            return 0;
        }
        let due = script.polled.iter().all(|p| *p) && script.last_tick().is_none_or(|t| tick > t);
        let mine = script
            .steps
            .get(script.next)
            .is_some_and(|s| s.instance == self.instance);
        if due && mine {
            let step = script.steps[script.next].clone();
            script.next += 1;
            script.released.push(tick);
            drop(script);
            self.apply(step, events);
            return 0;
        }
        // Script done and every step's tick is over: this instance's report of its final state
        // went out when it entered the current tick.
        if script.next == script.steps.len() && script.last_tick().is_none_or(|t| tick > t) {
            self.stop.store(true, Ordering::SeqCst);
        }
        0
    }

    fn exclude_paused(&mut self, _paused_ms: u64, _wall_clock_ms: u64) {
        // Scripts never pause the source, and their watermarks run on the injected clock.
    }

    fn progress(&self, _wall_clock_ms: u64) -> SourceProgress {
        self.watermarks.progress(self.clock.load(Ordering::SeqCst))
    }

    fn finished(&self) -> bool {
        self.ended
    }
}

/// Runs `scenario` through `build_source` → `window_features` on `scenario.workers` workers.
pub fn run(scenario: Scenario) -> Result<Outcome, String> {
    let workers = scenario.workers.max(1);
    let schema = schema();
    let metrics = Arc::new(JobMetrics::default());
    let config = WindowConfig {
        logic: WindowLogic {
            features: JobFeatures::single(
                WindowSpec::Tumbling { size: WINDOW_MS },
                features(&schema)?,
            ),
            schema: schema.clone(),
            allowed_lateness_ms: scenario.allowed_lateness_ms,
            source_name: "scripted".to_owned(),
            state_ttl_ms: None,
        },
        key_groups: KEY_GROUPS,
        parallelism: workers,
        sources: workers,
        placement: Placement::new(workers, 1),
        checkpoints: OperatorCheckpoints::off(),
        metrics: metrics.clone(),
    };
    let script = Arc::new(Mutex::new(Shared {
        steps: scenario.steps.clone(),
        next: 0,
        released: Vec::new(),
        polled: vec![false; workers],
        started: Instant::now(),
        timed_out: false,
    }));
    let rows: Arc<Mutex<Vec<(Tick, FeatureRow)>>> = Arc::default();
    let late: Arc<Mutex<Vec<(Tick, DeadLetter)>>> = Arc::default();
    let (script_w, rows_w, late_w) = (script.clone(), rows.clone(), late.clone());
    let source_metrics = metrics.clone();
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let instance = worker.index() as u32;
        let partitions: Vec<i32> = scenario
            .partitions
            .iter()
            .copied()
            .filter(|p| p.rem_euclid(workers as i32) as u32 == instance)
            .collect();
        let mut watermarks =
            PartitionWatermarks::new(scenario.max_out_of_orderness_ms, scenario.idle_timeout_ms);
        for p in &partitions {
            watermarks.assign(*p, 0);
            if scenario.caught_up.contains(p) {
                watermarks.set_caught_up(*p, true);
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let source_metrics = source_metrics.clone();
        let reader = ScriptedReader {
            instance,
            script: script_w.clone(),
            schema: schema.clone(),
            clock: Arc::new(AtomicU64::new(scenario.start_clock_ms)),
            watermarks,
            partitions,
            offsets: BTreeMap::new(),
            ended: false,
            stop: stop.clone(),
        };
        let (rows, late) = (rows_w.clone(), late_w.clone());
        let config = config.clone();
        worker.dataflow::<Tick, _, _>(move |scope| {
            let source = build_source(
                scope,
                "ScriptedSource",
                Some(reader),
                TICK_MS,
                EpochClock::OFF,
                Pacing {
                    stop,
                    metrics: source_metrics,
                    backlog: ScoreBacklog::default(),
                    max_lag_ms: None,
                    alignment: Default::default(),
                },
            );
            let windows = source
                .events
                .window_features(source.reports, config)
                .expect("no checkpoint to restore, so building cannot fail");
            windows.rows.inspect_core(move |event| {
                if let Ok((stamp, data)) = event {
                    let tick = stamp.elements().first().copied().unwrap_or_default();
                    lock(&rows).extend(data.iter().map(|r| (tick, r.clone())));
                }
            });
            windows.late.inspect_core(move |event| {
                if let Ok((stamp, data)) = event {
                    let tick = stamp.elements().first().copied().unwrap_or_default();
                    lock(&late).extend(data.iter().map(|d| (tick, d.clone())));
                }
            });
        });
    })?;
    for result in guards.join() {
        result?;
    }
    let script = lock(&script);
    if script.timed_out {
        return Err(format!(
            "script stuck after {} of {} steps",
            script.next,
            script.steps.len()
        ));
    }
    let mut rows: Vec<Fired<FeatureRow>> = lock(&rows)
        .drain(..)
        .map(|(tick, item)| Fired {
            step: script.step_of(tick),
            item,
        })
        .collect();
    rows.sort_by(|a, b| {
        (a.step, a.item.window_end, &a.item.key, a.item.revision).cmp(&(
            b.step,
            b.item.window_end,
            &b.item.key,
            b.item.revision,
        ))
    });
    let mut late: Vec<Fired<DeadLetter>> = lock(&late)
        .drain(..)
        .map(|(tick, item)| Fired {
            step: script.step_of(tick),
            item,
        })
        .collect();
    late.sort_by_key(|f| (f.step, f.item.position.partition, f.item.position.offset));
    Ok(Outcome {
        rows,
        late,
        metrics,
    })
}
