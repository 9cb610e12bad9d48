//! The metrics server of `weir run` (`[metrics] listen`, `--metrics-addr`): `/metrics` (the
//! job's Prometheus registry in OpenMetrics text), `/healthz` (the process is alive) and
//! `/readyz` (the dataflow is built on every worker of this process, the models of this
//! process's score instances are loaded and warm, and the broker answers). Each process of a
//! multi-process run serves its own registry: Prometheus scrapes every process and sums.
//!
//! axum on a one-thread tokio runtime of its own, off the Timely workers; the socket is bound
//! before the job starts, so an address in use fails the run at once. The status page
//! (`/`, [`crate::status_page`]) is merged into [`router`].

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::sync::oneshot;

use weir_kafka::admin::TopicMetadata;
use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;
use weir_operators::serving::ServingModels;
use weir_score::counters::ScoreCounters;

use crate::config::CompiledJob;
use crate::status_page::{self, StatusPage};

/// The content type of OpenMetrics text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What `/readyz` checks, set by the run as it starts.
#[derive(Debug, Default)]
pub struct Readiness {
    /// Workers of this process whose dataflow is built.
    pub workers_built: AtomicUsize,
    /// Workers of this process.
    pub workers: usize,
    /// Score instances in this process (their inference threads load and warm their models
    /// before the dataflow is built).
    pub score_instances: usize,
    /// Whether the broker answered the last metadata request (true for jobs without Kafka).
    pub broker_reachable: AtomicBool,
}

impl Readiness {
    /// What is not ready, in words (empty: ready).
    fn missing(&self, serving: &ServingModels) -> Vec<String> {
        let mut missing = Vec::new();
        let built = self.workers_built.load(Ordering::Acquire);
        if built < self.workers {
            missing.push(format!(
                "dataflow: {built} of {} workers built",
                self.workers
            ));
        }
        let warm = serving.by_instance().len();
        if warm < self.score_instances {
            missing.push(format!(
                "model: {warm} of {} score instances loaded and warm",
                self.score_instances
            ));
        }
        if !self.broker_reachable.load(Ordering::Acquire) {
            missing.push("broker: not reachable".to_owned());
        }
        missing
    }
}

/// What the handlers read.
#[derive(Clone)]
struct Served {
    registry: Arc<Registry>,
    metrics: Arc<JobMetrics>,
    serving: Arc<ServingModels>,
    readiness: Arc<Readiness>,
}

/// A running metrics server; stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    /// The address it listens on (the port chosen when `:0` was asked for).
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    broker_watch: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some((stop, watch)) = self.broker_watch.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = watch.join();
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The routes.
fn router(served: Served, status: Arc<StatusPage>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(served)
        .merge(status_page::router(status))
}

async fn scrape(State(served): State<Served>) -> impl IntoResponse {
    served.metrics.refresh(&served.serving, unix_ms());
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &served.registry) {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], text),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            format!("cannot encode the metrics: {error}\n"),
        ),
    }
}

async fn ready(State(served): State<Served>) -> impl IntoResponse {
    let missing = served.readiness.missing(&served.serving);
    if missing.is_empty() {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", missing.join("; ")),
        )
    }
}

/// Binds `addr` and serves `registry` and `status` on a thread of its own.
pub fn start(
    addr: SocketAddr,
    registry: Registry,
    metrics: Arc<JobMetrics>,
    status: Arc<StatusPage>,
    serving: Arc<ServingModels>,
    readiness: Arc<Readiness>,
) -> Result<MetricsServer> {
    let listener = TcpListener::bind(addr).map_err(|error| {
        let hint = if error.kind() == std::io::ErrorKind::AddrInUse {
            "; another process (maybe another weir) listens there: give this process its own \
             address with --metrics-addr HOST:PORT, or turn the server off with --metrics-addr \
             off"
        } else {
            ""
        };
        anyhow!("cannot serve metrics on {addr}: {error}{hint}")
    })?;
    let addr = listener.local_addr().context("metrics server address")?;
    listener
        .set_nonblocking(true)
        .context("metrics server socket")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("cannot start the metrics server's runtime")?;
    let served = Served {
        registry: Arc::new(registry),
        metrics,
        serving,
        readiness,
    };
    let (shutdown, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("weir-metrics".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(error) => {
                        tracing::error!(%error, "metrics server stopped");
                        return;
                    }
                };
                let serving =
                    axum::serve(listener, router(served, status)).with_graceful_shutdown(async {
                        let _ = stopped.await;
                    });
                if let Err(error) = serving.await {
                    tracing::error!(%error, "metrics server stopped");
                }
            });
        })
        .context("cannot start the metrics server's thread")?;
    tracing::info!(%addr, "serving the status page (/), /metrics, /healthz and /readyz");
    Ok(MetricsServer {
        addr,
        shutdown: Some(shutdown),
        thread: Some(thread),
        broker_watch: None,
    })
}

/// How often `/readyz`'s broker check asks the broker for metadata.
const BROKER_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Serves the metrics and the status page of a run of `job` as process `process` on `addr`:
/// registers the job's and the scoring stage's metrics, binds the socket (an error names an address in use) and,
/// for a Kafka job, checks the broker every few seconds. Returns the server and the readiness
/// the run updates as its workers build.
pub fn serve_run(
    addr: SocketAddr,
    job: &CompiledJob,
    process: usize,
    (metrics, score_counters): (&Arc<JobMetrics>, &Arc<ScoreCounters>),
    serving: &Arc<ServingModels>,
) -> Result<(MetricsServer, Arc<Readiness>)> {
    let mut registry = Registry::with_prefix("weir");
    metrics.register(&mut registry);
    score_counters.register(&mut registry);
    let workers = job.runtime.workers;
    let first = process * workers;
    let score_instances = (first..first + workers)
        .filter(|w| {
            job.runtime
                .placement
                .instance_on(*w, job.parallelism.score)
                .is_some()
        })
        .count();
    let readiness = Arc::new(Readiness {
        workers_built: AtomicUsize::new(0),
        workers,
        score_instances,
        broker_reachable: AtomicBool::new(job.topic_check.is_none()),
    });
    let status = StatusPage::new(
        job,
        process,
        metrics.clone(),
        score_counters.clone(),
        serving.clone(),
    );
    let mut server = start(
        addr,
        registry,
        metrics.clone(),
        Arc::new(status),
        serving.clone(),
        readiness.clone(),
    )?;
    if let Some(check) = &job.topic_check {
        let (properties, topic) = (check.properties.clone(), check.topics.first().cloned());
        let stop = Arc::new(AtomicBool::new(false));
        // One metadata client for the run, made at the first check (on the check's thread).
        let mut client = None;
        let watch = watch_broker(
            readiness.clone(),
            BROKER_CHECK_EVERY,
            stop.clone(),
            move || {
                if client.is_none() {
                    client = TopicMetadata::connect(&properties).ok();
                }
                client.as_ref().is_some_and(|client: &TopicMetadata| {
                    topic.as_ref().is_none_or(|t| client.partitions(t).is_ok())
                })
            },
        )?;
        server.broker_watch = Some((stop, watch));
    }
    Ok((server, readiness))
}

/// Checks every `every` whether the broker answers (a metadata request through `check`),
/// setting [`Readiness::broker_reachable`], until `stop` is set.
pub fn watch_broker(
    readiness: Arc<Readiness>,
    every: Duration,
    stop: Arc<AtomicBool>,
    mut check: impl FnMut() -> bool + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("weir-broker-check".to_owned())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let reachable = check();
                let was = readiness.broker_reachable.swap(reachable, Ordering::AcqRel);
                if was && !reachable {
                    tracing::warn!(
                        "the broker does not answer metadata requests: /readyz reports not ready"
                    );
                }
                let mut waited = Duration::ZERO;
                while waited < every && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    waited += Duration::from_millis(100);
                }
            }
        })
        .context("cannot start the broker check")
}
