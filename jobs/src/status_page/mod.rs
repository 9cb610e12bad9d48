//! The status page of `weir run` (issue #16 item 2), on the metrics server's port beside
//! `/metrics`: `/` is the whole page, [`LIVE_PATH`] its live part, which the page's script
//! fetches every second and swaps in place. Server-rendered HTML read straight from the run's
//! metric structs (not from the text exposition): the dataflow's stages with their
//! parallelism and records per second, the source partitions with lag and watermark (the one
//! holding the watermark back marked), the last checkpoints, and each model version with who
//! serves it, its live score histogram against the manifest's baseline and its PSI drift.
//!
//! [`snapshot`] reads the values, [`rates`] turns counters into rates, [`render`] writes
//! the HTML; `jobs/src/metrics_server.rs` merges [`router`] into its routes.

mod rates;
mod render;
mod snapshot;

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;

use weir_operators::clock::unix_ms;
use weir_operators::metrics::JobMetrics;
use weir_operators::serving::ServingModels;
use weir_score::counters::ScoreCounters;

use crate::config::CompiledJob;

pub use snapshot::{ModelView, StageView, StatusSnapshot, StatusSources};

/// Where the page's script fetches the live part.
pub const LIVE_PATH: &str = "/status/live";

/// The status page of one process of a run.
#[derive(Debug)]
pub struct StatusPage {
    sources: StatusSources,
}

impl StatusPage {
    /// The page of process `process` of a run of `job`, reading the run's metric structs.
    pub fn new(
        job: &CompiledJob,
        process: usize,
        metrics: Arc<JobMetrics>,
        scores: Arc<ScoreCounters>,
        serving: Arc<ServingModels>,
    ) -> Self {
        let stages = StatusSources::stages_of(&job.parallelism, job.score.is_some());
        StatusPage {
            sources: StatusSources {
                job: job.name.clone(),
                process: (process, job.runtime.processes),
                rates: rates::RateMeter::new(stages.len(), unix_ms()),
                stages,
                metrics,
                scores,
                serving,
            },
        }
    }

    /// The values on the page now.
    pub fn snapshot(&self) -> StatusSnapshot {
        self.sources.snapshot(unix_ms())
    }
}

/// `/` and [`LIVE_PATH`].
pub fn router(page: Arc<StatusPage>) -> Router {
    Router::new()
        .route("/", get(whole_page))
        .route(LIVE_PATH, get(live_part))
        .with_state(page)
}

async fn whole_page(State(page): State<Arc<StatusPage>>) -> impl IntoResponse {
    no_store(render::page(&page.snapshot()))
}

async fn live_part(State(page): State<Arc<StatusPage>>) -> impl IntoResponse {
    no_store(render::live(&page.snapshot()))
}

/// HTML that the browser must fetch again each time (it is live).
fn no_store(html: String) -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(html))
}
