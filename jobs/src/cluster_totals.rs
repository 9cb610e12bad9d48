//! The counts of a whole multi-process run, for each process's summary (DESIGN.md §4).
//!
//! Each process counts what its own operator instances did: a process may score windows whose
//! records another process read and deliver scores another process computed, so one process's
//! "scored" and "delivered" need not match. After the job's dataflow completes, every worker
//! waits for all the others ([`all_gather`] as a barrier: every process has finished, its sinks
//! flushed), then each process's first worker sends its process's counts to every worker, so
//! every process prints the same cluster totals under its own counts.

use serde::{Deserialize, Serialize};
use timely::worker::Worker;

use weir_operators::metrics::JobMetrics;

use crate::gather::all_gather;

/// What one process's operator instances counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCounts {
    /// The process (`--process`).
    pub process: usize,
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
    /// Score records delivered by the sinks.
    pub scores_delivered: u64,
    /// Dead letters of every reason.
    pub dead_letters: u64,
    /// Dead letters delivered.
    pub dead_letters_delivered: u64,
    /// Feature rows written (features-only runs).
    pub rows_written: u64,
    /// Source instances stopped by a stop signal before the end of their input.
    pub sources_stopped: u64,
}

impl ProcessCounts {
    /// The counts of process `process` so far.
    pub fn of(process: usize, m: &JobMetrics) -> Self {
        ProcessCounts {
            process,
            records_in: m.records_read(),
            events_in: m.events_in(),
            windows_fired: m.windows_fired(),
            scores: JobMetrics::get(&m.scores),
            inference_errors: JobMetrics::get(&m.inference_errors),
            scores_delivered: JobMetrics::get(&m.scores_delivered),
            dead_letters: m.dead_letters_total(),
            dead_letters_delivered: JobMetrics::get(&m.dead_letters_delivered),
            rows_written: JobMetrics::get(&m.rows_written),
            sources_stopped: JobMetrics::get(&m.sources_stopped),
        }
    }
}

/// Every process's counts, by process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterTotals {
    /// One entry per process, in process order.
    pub processes: Vec<ProcessCounts>,
}

impl ClusterTotals {
    /// The sums over every process (`process`, meaningless for a sum, is 0).
    pub fn total(&self) -> ProcessCounts {
        self.processes
            .iter()
            .fold(ProcessCounts::default(), |sum, p| ProcessCounts {
                process: 0,
                records_in: sum.records_in + p.records_in,
                events_in: sum.events_in + p.events_in,
                windows_fired: sum.windows_fired + p.windows_fired,
                scores: sum.scores + p.scores,
                inference_errors: sum.inference_errors + p.inference_errors,
                scores_delivered: sum.scores_delivered + p.scores_delivered,
                dead_letters: sum.dead_letters + p.dead_letters,
                dead_letters_delivered: sum.dead_letters_delivered + p.dead_letters_delivered,
                rows_written: sum.rows_written + p.rows_written,
                sources_stopped: sum.sources_stopped + p.sources_stopped,
            })
    }

    /// The summary lines for the whole run.
    pub fn render(&self, this_process: usize) -> String {
        let t = self.total();
        format!(
            "cluster:         {} processes; the lines above count process {this_process}'s \
             operator instances only\n\
             cluster total:   {} events in ({} records read), {} windows scored ({} inference \
             errors, {} delivered), {} dead letters ({} delivered){}{}",
            self.processes.len(),
            t.events_in,
            t.records_in,
            t.scores,
            t.inference_errors,
            t.scores_delivered,
            t.dead_letters,
            t.dead_letters_delivered,
            if t.rows_written > 0 {
                format!(", {} feature rows written", t.rows_written)
            } else {
                String::new()
            },
            if t.sources_stopped > 0 {
                format!(
                    ", {} source instances stopped before the end of their input",
                    t.sources_stopped
                )
            } else {
                String::new()
            }
        )
    }
}

/// Called by every worker once the job's dataflow has completed: waits for every worker of
/// every process, then gathers each process's counts (sent by its first worker, of
/// `threads` per process). Every worker returns the same totals.
pub fn gather(
    worker: &mut Worker,
    process: usize,
    threads: usize,
    metrics: &JobMetrics,
) -> ClusterTotals {
    // Every worker has finished the job (and its sinks flushed) once this returns: the counts
    // below are final.
    all_gather::<u8>(worker, Vec::new());
    // Timely numbers the workers process by process.
    let first_of_process = worker.index() == process * threads;
    let mine = if first_of_process {
        vec![ProcessCounts::of(process, metrics)]
    } else {
        Vec::new()
    };
    let mut processes = all_gather(worker, mine);
    processes.sort_by_key(|p| p.process);
    ClusterTotals { processes }
}

#[cfg(test)]
mod tests {
    use super::{ClusterTotals, ProcessCounts};

    #[test]
    fn totals_sum_every_process() {
        let totals = ClusterTotals {
            processes: vec![
                ProcessCounts {
                    process: 0,
                    records_in: 10,
                    events_in: 9,
                    scores: 4,
                    scores_delivered: 1,
                    dead_letters: 1,
                    ..ProcessCounts::default()
                },
                ProcessCounts {
                    process: 1,
                    records_in: 5,
                    events_in: 5,
                    scores: 2,
                    inference_errors: 1,
                    scores_delivered: 6,
                    ..ProcessCounts::default()
                },
            ],
        };
        let text = totals.render(1);
        assert!(
            text.contains("2 processes; the lines above count process 1's"),
            "{text}"
        );
        assert!(
            text.contains(
                "14 events in (15 records read), 6 windows scored (1 inference errors, 7 delivered), 1 dead letters (0 delivered)"
            ),
            "{text}"
        );
    }
}
