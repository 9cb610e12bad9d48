//! What a run did: the counters of this process (and, in a cluster, of every process) as
//! `weir run` prints them at the end, read from the job's metrics registry
//! (`weir_operators::metrics`, the same counters `/metrics` serves) once the workers are done.

use std::time::Duration;

use weir_features::dead_letter::DeadLetterReason;
use weir_operators::metrics::{JobMetrics, LatencySummary};
use weir_score::counters::ScoreCounters;

use crate::cluster_totals::ClusterTotals;

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// Records read (good and bad).
    pub records_in: u64,
    /// Records decoded into events.
    pub events_in: u64,
    /// Windows fired.
    pub windows_fired: u64,
    /// Successful scores.
    pub scores: u64,
    /// Failed inferences.
    pub inference_errors: u64,
    /// Missing feature values the scoring stage replaced by the manifest's defaults.
    pub defaults_used: u64,
    /// Score records acknowledged by Kafka.
    pub scores_delivered: u64,
    /// Dead letters by reason.
    pub dead_letters: Vec<(DeadLetterReason, u64)>,
    /// Late records per source partition.
    pub late_by_partition: Vec<(i32, u64)>,
    /// Dead letters acknowledged by Kafka.
    pub dead_letters_delivered: u64,
    /// Feature rows written (features-only runs).
    pub rows_written: u64,
    /// Records that could not be delivered.
    pub delivery_failures: u64,
    /// Times a score instance reached its in-flight bound and paused the sources.
    pub backpressure_episodes: u64,
    /// Times a source held back because the scores lagged more than `[runtime] max_lag`.
    pub lag_episodes: u64,
    /// Source instances of this process stopped by a stop signal before the end of their
    /// input (a bounded run with any did not finish).
    pub sources_stopped: u64,
    /// Checkpoint epochs committed by this process.
    pub checkpoints_committed: u64,
    /// Snapshot bytes written by this process's window instances.
    pub snapshot_bytes: u64,
    /// Time this process's window instances spent encoding and writing snapshots.
    pub snapshot_time: Duration,
    /// Part of it the window workers spent encoding changed shards (the dataflow's pause).
    pub snapshot_pause: Duration,
    /// Window close → score acknowledged latency of live scores.
    pub latency_live: LatencySummary,
    /// The same of scores acknowledged while the job caught up (a bounded replay, or a source
    /// behind its partitions' ends): time queued behind a backlog, not live latency.
    pub latency_catch_up: LatencySummary,
    /// Ingest (the source's read of a window's latest record) → score produced, of live
    /// scores.
    pub ingest_to_score_live: LatencySummary,
    /// What the scoring stage's model versions did.
    pub models: ModelActivity,
    /// Wall-clock duration of the run.
    pub elapsed: Duration,
    /// A multi-process run: this process (`--process`) and every process's counts; the
    /// fields above count this process's operator instances only.
    pub cluster: Option<(usize, ClusterTotals)>,
}

/// The scoring stage's model-version counters of this process (ScoreCounters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelActivity {
    /// Hot reloads that swapped the primary version.
    pub reloads: u64,
    /// Reload attempts that failed, of either version or of `CONTROL` (what served kept
    /// serving).
    pub reload_failures: u64,
    /// Changes of the second version (shadow/canary started, stopped, replaced, re-shared).
    pub secondary_changes: u64,
    /// Rows scored by the canary version.
    pub canary_rows: u64,
    /// Shadow-version inferences that failed.
    pub shadow_errors: u64,
    /// Micro-batches scored.
    pub batches: u64,
}

impl ModelActivity {
    pub(crate) fn of(c: &ScoreCounters) -> Self {
        ModelActivity {
            reloads: ScoreCounters::get(&c.reloads),
            reload_failures: ScoreCounters::get(&c.reload_failures),
            secondary_changes: ScoreCounters::get(&c.secondary_changes),
            canary_rows: ScoreCounters::get(&c.canary_rows),
            shadow_errors: ScoreCounters::get(&c.shadow_errors),
            batches: ScoreCounters::get(&c.batches),
        }
    }

    /// Logs the counters, batches included.
    pub(crate) fn log(&self) {
        tracing::info!(
            reloads = self.reloads,
            reload_failures = self.reload_failures,
            secondary_changes = self.secondary_changes,
            canary_rows = self.canary_rows,
            shadow_errors = self.shadow_errors,
            batches = self.batches,
            "scoring stage"
        );
    }

    /// The summary's `models:` line, when a reload, a second-version change, canary rows or
    /// shadow errors happened.
    pub(crate) fn line(&self) -> String {
        let activity = self.reloads
            + self.reload_failures
            + self.secondary_changes
            + self.canary_rows
            + self.shadow_errors;
        if activity == 0 {
            return String::new();
        }
        format!(
            "\nmodels:          {} hot reloads ({} failed), {} second-version changes (each \
             counted per score instance), {} canary rows, {} shadow errors",
            self.reloads,
            self.reload_failures,
            self.secondary_changes,
            self.canary_rows,
            self.shadow_errors
        )
    }
}

impl RunSummary {
    /// Total dead letters.
    pub fn dead_letters_total(&self) -> u64 {
        self.dead_letters.iter().map(|(_, n)| n).sum()
    }

    /// Source instances stopped before the end of their input: in every process of a
    /// cluster, else in this one.
    pub fn sources_stopped_in_run(&self) -> u64 {
        self.cluster
            .as_ref()
            .map_or(self.sources_stopped, |(_, totals)| {
                totals.total().sources_stopped
            })
    }

    /// Human-readable summary lines.
    pub fn render(&self) -> String {
        let reasons: Vec<String> = self
            .dead_letters
            .iter()
            .map(|(r, n)| format!("{}={n}", r.as_str()))
            .collect();
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        format!(
            "events in:       {} ({} records read, {:.0} records/s)\n\
             windows scored:  {} ({} inference errors, {} delivered; {} missing feature values \
             set to the model's defaults)\n\
             dead letters:    {} [{}] ({} delivered)\n\
             latency p50/p99/p99.9: {}\n\
             elapsed:         {:.2} s{}{}{}{}{}{}",
            self.events_in,
            self.records_in,
            self.records_in as f64 / secs,
            self.scores,
            self.inference_errors,
            self.scores_delivered,
            self.defaults_used,
            self.dead_letters_total(),
            reasons.join(", "),
            self.dead_letters_delivered,
            latency_line(self.latency_live, self.latency_catch_up),
            secs,
            if self.late_by_partition.is_empty() {
                String::new()
            } else {
                let parts: Vec<String> = self
                    .late_by_partition
                    .iter()
                    .map(|(p, n)| format!("{p}:{n}"))
                    .collect();
                format!("\nlate by partition: {}", parts.join(", "))
            },
            if self.backpressure_episodes > 0 || self.lag_episodes > 0 {
                format!(
                    "\nbackpressure:    scoring paused the sources {} times; lagging scores \
                     held them back {} times",
                    self.backpressure_episodes, self.lag_episodes
                )
            } else {
                String::new()
            },
            if self.checkpoints_committed > 0 || self.snapshot_bytes > 0 {
                format!(
                    "\ncheckpoints:     {} committed ({:.1} MB of changed shards written, {:.0} ms encoding and writing, of which {:.0} ms paused the workers)",
                    self.checkpoints_committed,
                    self.snapshot_bytes as f64 / 1e6,
                    self.snapshot_time.as_secs_f64() * 1e3,
                    self.snapshot_pause.as_secs_f64() * 1e3
                )
            } else {
                String::new()
            },
            self.models.line(),
            if self.delivery_failures > 0 {
                format!("\nDELIVERY FAILURES: {}", self.delivery_failures)
            } else {
                String::new()
            },
            self.cluster
                .as_ref()
                .map(|(process, totals)| format!("\n{}", totals.render(*process)))
                .unwrap_or_default(),
        )
    }
}

/// The summary of a run from its counters.
pub(crate) fn summarize(m: &JobMetrics, models: &ScoreCounters, elapsed: Duration) -> RunSummary {
    RunSummary {
        records_in: m.records_read(),
        events_in: m.events_in(),
        windows_fired: m.windows_fired(),
        scores: JobMetrics::get(&m.scores),
        inference_errors: JobMetrics::get(&m.inference_errors),
        defaults_used: JobMetrics::get(&m.defaults_used),
        scores_delivered: JobMetrics::get(&m.scores_delivered),
        dead_letters: m.dead_letters_by_reason(),
        late_by_partition: m.late_by_partition(),
        dead_letters_delivered: JobMetrics::get(&m.dead_letters_delivered),
        rows_written: JobMetrics::get(&m.rows_written),
        delivery_failures: JobMetrics::get(&m.delivery_failures),
        backpressure_episodes: JobMetrics::get(&m.backpressure_episodes),
        lag_episodes: JobMetrics::get(&m.lag_episodes),
        sources_stopped: JobMetrics::get(&m.sources_stopped),
        checkpoints_committed: JobMetrics::get(&m.checkpoints.committed),
        snapshot_bytes: JobMetrics::get(&m.checkpoints.snapshot_bytes),
        snapshot_time: Duration::from_secs_f64(m.checkpoints.snapshot_seconds.get()),
        snapshot_pause: Duration::from_secs_f64(m.checkpoints.snapshot_pause_seconds.get()),
        latency_live: m.latency.live(),
        latency_catch_up: m.latency.catch_up(),
        ingest_to_score_live: m.latency.ingest_live(),
        models: ModelActivity::of(models),
        elapsed,
        cluster: None,
    }
}

/// The latency line: live and catch-up scores apart, each with its count.
fn latency_line(live: LatencySummary, catch_up: LatencySummary) -> String {
    let ms =
        |us: Option<u64>| us.map_or("n/a".to_owned(), |us| format!("{:.2} ms", us as f64 / 1e3));
    let part = |what: &str, l: LatencySummary| match l.count {
        0 => format!("no {what} scores"),
        n => format!(
            "{what} {} / {} / {} over {n} scores",
            ms(l.p50_us),
            ms(l.p99_us),
            ms(l.p999_us)
        ),
    };
    if live.count == 0 && catch_up.count == 0 {
        return "n/a (window close → score acknowledged, measured at a Kafka score sink)"
            .to_owned();
    }
    format!(
        "{}; {} (window close → score acknowledged; catch-up: in a bounded replay or while a \
         source is behind its partitions' ends, time queued behind the backlog, not live latency)",
        part("live", live),
        part("catch-up", catch_up)
    )
}

#[cfg(test)]
mod tests {
    use weir_operators::metrics::LatencySummary;

    use super::{latency_line, ModelActivity};

    #[test]
    fn the_models_line_appears_only_when_versions_changed_or_split() {
        let quiet = ModelActivity {
            batches: 12,
            ..ModelActivity::default()
        };
        assert_eq!(quiet.line(), "");
        let busy = ModelActivity {
            reloads: 2,
            reload_failures: 1,
            canary_rows: 40,
            ..quiet
        };
        assert_eq!(
            busy.line(),
            "\nmodels:          2 hot reloads (1 failed), 0 second-version changes (each \
             counted per score instance), 40 canary rows, 0 shadow errors"
        );
        // A shadow started and stopped by CONTROL, with no row in a canary, still shows.
        let shadowed = ModelActivity {
            secondary_changes: 2,
            ..quiet
        };
        assert!(shadowed.line().contains("2 second-version changes"));
    }

    #[test]
    fn live_and_catch_up_latencies_are_reported_apart() {
        let live = LatencySummary {
            count: 40,
            p50_us: Some(3_000),
            p99_us: Some(12_500),
            p999_us: Some(20_000),
        };
        let catch_up = LatencySummary {
            count: 900,
            p50_us: Some(1_700_000),
            p99_us: Some(3_000_000),
            p999_us: Some(3_100_000),
        };
        let both = latency_line(live, catch_up);
        assert!(
            both.starts_with("live 3.00 ms / 12.50 ms / 20.00 ms over 40 scores; catch-up 1700.00 ms / 3000.00 ms / 3100.00 ms over 900 scores (window close"),
            "{both}"
        );
        let replay = latency_line(LatencySummary::default(), catch_up);
        assert!(
            replay.starts_with("no live scores; catch-up 1700.00 ms"),
            "{replay}"
        );
        let none = latency_line(LatencySummary::default(), LatencySummary::default());
        assert!(none.starts_with("n/a"), "{none}");
    }
}
