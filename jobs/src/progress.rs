//! `weir run`'s live progress, read from the run's metrics ([`JobMetrics`]) while the dataflow
//! runs: on a terminal one line on stderr, rewritten in place every second — events/s, consumer
//! lag, watermark delay, scores/s, the last checkpoint — and, when stderr is not a terminal (a
//! log file, a container), the same figures as an info log line every 10 s. Stopped (and the
//! terminal line cleared) when the [`Progress`] is dropped.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_features::vocab::Watermark;
use weir_operators::metrics::JobMetrics;

/// How often the terminal line is redrawn.
const TERMINAL_EVERY: Duration = Duration::from_secs(1);
/// How often a log line is written when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Whether the progress line is on the terminal now: a log line clears it first
/// ([`log_writer`]), and the next redraw puts it back below the log line.
static LINE_SHOWN: AtomicBool = AtomicBool::new(false);

/// The log's writer (`tracing_subscriber`'s `with_writer(progress::log_writer)`): stderr,
/// clearing the progress line before a log line so that the two never share a line.
pub fn log_writer() -> LogWriter {
    LogWriter
}

/// stderr for log lines; see [`log_writer`].
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut stderr = std::io::stderr().lock();
        if LINE_SHOWN.swap(false, Ordering::Relaxed) {
            stderr.write_all(b"\r\x1b[2K")?;
        }
        stderr.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The counters the line is computed from, at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// Events decoded so far.
    pub events: u64,
    /// Scores (or, in a features run, rows) written so far.
    pub outputs: u64,
    /// Records between the sources' next offsets and the partitions' high watermarks.
    pub lag: i64,
    /// The largest watermark delay behind the wall clock over the partitions, seconds.
    pub watermark_delay_s: Option<f64>,
    /// Checkpoints committed so far.
    pub checkpoints: u64,
    /// When the last one was committed (Unix ms).
    pub last_commit_ms: Option<u64>,
}

impl Reading {
    /// The metrics now.
    pub fn of(metrics: &JobMetrics) -> Reading {
        let partitions = metrics.partitions.views();
        Reading {
            events: metrics.events_in(),
            outputs: JobMetrics::get(&metrics.scores_delivered)
                + JobMetrics::get(&metrics.rows_written),
            lag: partitions.iter().map(|p| p.lag).sum(),
            watermark_delay_s: partitions
                .iter()
                // Idle partitions hold nothing back (their delay only grows while quiet).
                .filter(|p| {
                    !p.idle && p.watermark != Watermark::MIN && p.watermark != Watermark::MAX
                })
                .map(|p| p.delay_seconds)
                .reduce(f64::max),
            checkpoints: JobMetrics::get(&metrics.checkpoints.committed),
            last_commit_ms: metrics
                .checkpoints
                .recent_commits()
                .first()
                .map(|c| c.committed_ms),
        }
    }
}

/// The progress text from the reading `then` to `now`, `elapsed` apart, at wall-clock
/// `now_ms` (Unix ms).
pub fn line(then: Reading, now: Reading, elapsed: Duration, now_ms: u64) -> String {
    let per_s = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / elapsed.as_secs_f64().max(1e-3);
    let delay = now
        .watermark_delay_s
        .map_or("–".to_owned(), |d| format!("{d:.1} s"));
    let checkpoint = match now.last_commit_ms {
        Some(at) => format!(
            "#{} {} s ago",
            now.checkpoints,
            now_ms.saturating_sub(at) / 1_000
        ),
        None => "none yet".to_owned(),
    };
    format!(
        "{} events/s | lag {} | watermark delay {delay} | {} out/s | checkpoint {checkpoint}",
        rate(per_s(then.events, now.events)),
        now.lag,
        rate(per_s(then.outputs, now.outputs)),
    )
}

/// `1234.5` as `1.2 k`, `12` as `12`.
fn rate(per_s: f64) -> String {
    match per_s {
        r if r >= 1e6 => format!("{:.2} M", r / 1e6),
        r if r >= 1e3 => format!("{:.1} k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// The running progress reporter.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts reporting `metrics` (a terminal line if stderr is a terminal, else log lines).
    pub fn start(metrics: Arc<JobMetrics>) -> std::io::Result<Progress> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let terminal = std::io::stderr().is_terminal();
        let thread = std::thread::Builder::new()
            .name("weir-progress".to_owned())
            .spawn(move || report(&metrics, &stopping, terminal))?;
        Ok(Progress {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn report(metrics: &JobMetrics, stop: &AtomicBool, terminal: bool) {
    let every = if terminal { TERMINAL_EVERY } else { LOG_EVERY };
    let (mut then, mut at) = (Reading::of(metrics), Instant::now());
    while !sleep_unless_stopped(stop, every) {
        let now = Reading::of(metrics);
        let elapsed = at.elapsed();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let text = line(then, now, elapsed, now_ms);
        if terminal {
            // Clear the line, then draw it; no newline, so the next draw replaces it.
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K{text}");
            LINE_SHOWN.store(true, Ordering::Relaxed);
        } else {
            tracing::info!("progress: {text}");
        }
        (then, at) = (now, Instant::now());
    }
    if terminal && LINE_SHOWN.swap(false, Ordering::Relaxed) {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
}

/// Sleeps `total` in short steps; true as soon as `stop` is set.
fn sleep_unless_stopped(stop: &AtomicBool, total: Duration) -> bool {
    let step = Duration::from_millis(50);
    let until = Instant::now() + total;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        std::thread::sleep(step);
    }
    stop.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{line, Reading};

    #[test]
    fn the_line_shows_rates_lag_delay_and_the_last_checkpoint() {
        let then = Reading {
            events: 1_000,
            outputs: 10,
            ..Reading::default()
        };
        let now = Reading {
            events: 26_000,
            outputs: 2_010,
            lag: 340,
            watermark_delay_s: Some(2.25),
            checkpoints: 7,
            last_commit_ms: Some(1_000_000),
        };
        let text = line(then, now, Duration::from_secs(2), 1_003_400);
        assert_eq!(
            text,
            "12.5 k events/s | lag 340 | watermark delay 2.2 s | 1.0 k out/s | checkpoint #7 3 s ago"
        );
        let none_yet = Reading {
            last_commit_ms: None,
            ..now
        };
        let quiet = line(none_yet, none_yet, Duration::from_secs(1), 5);
        assert_eq!(
            quiet,
            "0 events/s | lag 340 | watermark delay 2.2 s | 0 out/s | checkpoint none yet"
        );
        let unknown = Reading {
            watermark_delay_s: None,
            ..now
        };
        assert!(line(now, unknown, Duration::from_secs(1), 0).contains("watermark delay –"));
    }
}
