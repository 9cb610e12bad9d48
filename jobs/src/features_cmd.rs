//! `weir features`: runs a job's dataflow over JSON Lines files in features-only mode — the
//! same file source, decoder, watermarks and window operator as production, no scoring — and
//! writes one JSON line per fired (key, window, revision). Training sets and replays get
//! exactly the online features (no training/serving skew). Inputs may be gzip or zstd
//! compressed; a plain file larger than 512 KiB is split into byte ranges that every worker's
//! source instance reads (`[source] range_bytes`, `weir_operators::file_ranges`), so
//! `--workers 2` reads with two threads.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;

use crate::config::JobFile;
use crate::pipeline::Mode;
use crate::run::{run_job_in, RunSummary};

/// The longest tick of a features run (ms); a job whose `[runtime] tick` is longer runs at
/// this one. A bounded run has no live latency to trade for fewer ticks, and a window
/// instance fires only when a tick completes: a run reading a million records a second
/// holds every window a tick's records close open until the tick ends, then fires them in
/// one burst. Run F (BENCHMARKS.md): at the clickstream job's 100 ms, tumbling 1 m on one
/// worker takes a third more time and more than twice the memory that it takes at 2 ms.
pub const FEATURES_TICK_MS: i64 = 2;

/// Computes `job`'s features over `inputs` into `output` (dead letters go to `dead_letters`,
/// default `<output>.dead-letters.jsonl`). Output lines:
/// `{"key", "window_start", "window_end", "revision", "closed_by_timeout", "features": [...]}`
/// with values in the job's feature order and `null` for missing values; line order is not
/// specified (several workers write). The run ticks at most every [`FEATURES_TICK_MS`].
pub fn compute_features(
    mut job: JobFile,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    dead_letters: Option<PathBuf>,
) -> Result<RunSummary> {
    job.use_input_files(inputs);
    job.use_output_file(output, dead_letters);
    // A replay over files is its own run: it must neither restore the production job's
    // checkpoints nor write (and prune) epochs in their directory, and it runs in this
    // process alone.
    job.checkpoint = None;
    job.runtime.processes = 1;
    job.runtime.tick = job.runtime.tick.min(FEATURES_TICK_MS);
    run_job_in(
        job.compile()?,
        Mode::FeaturesOnly,
        Arc::new(AtomicBool::new(false)),
    )
}
