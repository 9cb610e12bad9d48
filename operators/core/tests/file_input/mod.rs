//! The file source as the source tests configure it: JSON Lines of `{user, ts}` records and a
//! [`FileSourceConfig`] with the tests' defaults, which a test changes where it differs.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use weir_checkpoint::SourcePositions;
use weir_features::decode::JsonDecoder;
use weir_operators::backpressure::ScoreBacklog;
use weir_operators::epochs::EpochClock;
use weir_operators::file_ranges::DEFAULT_SPLIT;
use weir_operators::file_source::FileSourceConfig;
use weir_operators::metrics::JobMetrics;
use weir_operators::source::{RecordDecoder, RecordLimits};
use weir_operators::source_operator::{Pacing, SourceStage};
use weir_operators::Placement;
use weir_testkit::schema::schema;

/// `lines` records `{"user": "u<key(i)>", "ts": 1000 + i}`, one a line.
pub fn user_lines(lines: u64, key: impl Fn(u64) -> u64) -> String {
    (0..lines)
        .map(|i| format!("{{\"user\":\"u{}\",\"ts\":{}}}\n", key(i), 1_000 + i))
        .collect()
}

/// One source instance of one process reading `paths` of `{user, ts}` records as
/// `source_name`, the default range size, 10 ms ticks, 16 key groups, no out-of-orderness, batches of 64, no lag
/// bound, no checkpoints, not stopped and no backlog.
pub fn file_config(
    paths: Vec<PathBuf>,
    source_name: &str,
    metrics: &Arc<JobMetrics>,
) -> FileSourceConfig {
    FileSourceConfig {
        paths,
        split: DEFAULT_SPLIT,
        stage: SourceStage {
            parallelism: 1,
            placement: Placement::new(1, 1),
            tick_ms: 10,
            epochs: EpochClock::OFF,
            pacing: Pacing {
                stop: Arc::new(AtomicBool::new(false)),
                metrics: metrics.clone(),
                backlog: ScoreBacklog::default(),
                max_lag_ms: None,
                alignment: Default::default(),
            },
        },
        decoder: RecordDecoder {
            decoder: JsonDecoder::new(schema("user", "ts", &[])),
            key_groups: 16,
            source_name: source_name.to_owned(),
            metrics: metrics.clone(),
            // The job file's default, `[watermark] max_future = "1h"`.
            max_future_ms: Some(3_600_000),
            limits: RecordLimits::default(),
        },
        max_out_of_orderness_ms: 0,
        max_batch: 64,
        resume: SourcePositions::default(),
        claims: Default::default(),
    }
}
