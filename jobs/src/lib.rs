//! # weir
//!
//! The `weir` binary's library: job files ([`config`], their sections as serde reads them in
//! [`sections`]) compiled into per-stage plans ([`plan`]), the `[model]` section
//! ([`model_config`]), checkpointing and restore
//! selection ([`checkpointing`]), multi-process runs ([`cluster`]), the check that their
//! processes start from one point ([`start_agreement`]) and their totals at the end
//! ([`cluster_totals`]), both exchanged with [`gather`], the pipeline wiring ([`pipeline`]),
//! the checks before a run ([`preflight`]) and `weir validate`'s report of them ([`validate`]),
//! running a job ([`run`]) with its live progress ([`progress`]), its metrics server
//! ([`metrics_server`]) and status page ([`status_page`]) and its summary ([`summary`]), two model versions compared over a replay ([`replay`], [`score_compare`]),
//! batch feature computation over files
//! ([`features_cmd`]) and the clickstream event generator ([`gen`]); local clusters
//! ([`launch`]) and restarts ([`supervise`]) over child processes ([`process_group`]); the
//! process allocator ([`allocator`]).

/// The one module with `unsafe` code: a `GlobalAlloc` forwards raw pointers (and advises
/// the kernel about large blocks).
#[allow(unsafe_code)]
pub mod allocator;
pub mod checkpointing;
pub mod cluster;
pub mod cluster_totals;
pub mod config;
pub mod features_cmd;
pub mod gather;
pub mod gen;
pub mod launch;
pub mod metrics_server;
pub mod model_config;
pub mod pipeline;
pub mod plan;
pub mod preflight;
pub mod process_group;
pub mod progress;
pub mod replay;
pub mod run;
pub mod score_compare;
pub mod sections;
pub mod start_agreement;
pub mod status_page;
pub mod summary;
pub mod supervise;
pub mod validate;

pub use config::{CompiledJob, JobFile};
pub use run::{run_job, ModelActivity, RunSummary};
