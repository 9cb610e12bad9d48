//! What the whole-job benchmarks that run each case in a process of their own (F, S) share:
//! the generated clickstream input, the child process that runs one case (this benchmark
//! binary again, told which case by an environment variable) and the figures it prints: wall
//! time, CPU time of the whole process, peak resident memory, and the CPU time the host took
//! from this virtual machine while the case ran (steal).

#![allow(dead_code)]

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rustix::time::{clock_gettime, ClockId};

/// One case's figures, as a child prints them.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// What the case counts: events read, rows scored.
    pub items: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub peak_rss_mb: f64,
    /// The machine's CPU ticks while the case ran, all CPUs and all processes
    /// (`/proc/stat`, 10 ms each), and how many of them the hypervisor stole: time a CPU was
    /// ready to run and the host ran something else. Wall time includes it, CPU time does not.
    pub ticks: HostTicks,
}

/// Ticks of `/proc/stat`'s `cpu` line: all of them, and the stolen ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostTicks {
    pub total: u64,
    pub steal: u64,
}

impl HostTicks {
    /// The machine's ticks so far; zero where `/proc/stat` cannot be read.
    pub fn now() -> HostTicks {
        let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
        // `cpu  user nice system idle iowait irq softirq steal guest guest_nice`: guest time
        // is counted in user time already, so the first eight make the total.
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("cpu "))
            .map(|l| {
                l.split_whitespace()
                    .take(8)
                    .filter_map(|t| t.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        match ticks[..] {
            [_, _, _, _, _, _, _, steal] => HostTicks {
                total: ticks.iter().sum(),
                steal,
            },
            _ => HostTicks::default(),
        }
    }

    /// The ticks from `earlier` to `self`.
    pub fn since(self, earlier: HostTicks) -> HostTicks {
        HostTicks {
            total: self.total.saturating_sub(earlier.total),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }

    /// Stolen ticks as a percentage of all; `None` when none were counted.
    pub fn steal_percent(self) -> Option<f64> {
        (self.total > 0).then(|| 100.0 * self.steal as f64 / self.total as f64)
    }

    /// The share as a table cell: `n/a` where `/proc/stat` had nothing.
    pub fn steal_cell(self) -> String {
        self.steal_percent()
            .map_or_else(|| "n/a".to_owned(), |p| format!("{p:.1}"))
    }
}

impl Figures {
    /// Items per second of wall time, in millions.
    pub fn rate(&self) -> f64 {
        self.items as f64 / self.wall_s / 1e6
    }

    /// Items per second of CPU time, in millions.
    pub fn per_core(&self) -> f64 {
        self.items as f64 / self.cpu_s / 1e6
    }
}

/// The median of each figure over `runs` of one case (each taken apart: the median wall
/// time and the median CPU time may come from different runs), and the host ticks of all of
/// them summed (a run of a few hundred ms spans a few dozen 10 ms ticks). `None` for no runs.
pub fn median(runs: &[Figures]) -> Option<Figures> {
    let first = runs.first()?;
    let of = |figure: fn(&Figures) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(figure).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    Some(Figures {
        items: first.items,
        wall_s: of(|f| f.wall_s),
        cpu_s: of(|f| f.cpu_s),
        peak_rss_mb: of(|f| f.peak_rss_mb),
        ticks: HostTicks {
            total: runs.iter().map(|f| f.ticks.total).sum(),
            steal: runs.iter().map(|f| f.ticks.steal).sum(),
        },
    })
}

/// Runs each of `cases` `rounds` times, each in a child process ([`child`]), every case in
/// turn in each round so that a noisy minute of the machine touches every case alike;
/// `check` sees every run. Returns each case's [`median`], in the order of `cases`.
pub fn median_rounds(
    case_var: &str,
    cases: &[String],
    rounds: usize,
    check: impl Fn(&str, &Figures) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Figures>> {
    let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (case, runs) in cases.iter().zip(&mut runs) {
            let f = child(case_var, case)?;
            check(case, &f)?;
            eprintln!("{case}: {f:?}");
            runs.push(f);
        }
    }
    runs.iter()
        .map(|r| median(r))
        .collect::<Option<Vec<Figures>>>()
        .ok_or_else(|| anyhow::anyhow!("a case has no runs"))
}

/// The value of environment variable `name`, or `default` (unset or unparsable).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The clickstream input sized by `<prefix>_EVENTS` (default 1 000 000) and `<prefix>_KEYS`
/// (default 50 000): its events, keys and path ([`input`]).
pub fn input_from_env(prefix: &str) -> anyhow::Result<(u64, u64, PathBuf)> {
    let events = env_or(&format!("{prefix}_EVENTS"), 1_000_000);
    let keys = env_or(&format!("{prefix}_KEYS"), 50_000);
    Ok((events, keys, input(events, keys)?))
}

/// CPU time of the whole process so far (`CLOCK_PROCESS_CPUTIME_ID`: all threads' user +
/// system time, what getrusage reports), seconds.
pub fn process_cpu_s() -> f64 {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Peak resident memory of this process (`VmHWM` of `/proc/self/status`), MB.
pub fn peak_rss_mb() -> f64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// `weir gen`'s clickstream of `events` events over `keys` users (seed 42), written once to
/// `<target dir>/bench-data/`.
pub fn input(events: u64, keys: u64) -> anyhow::Result<PathBuf> {
    let dir = super::results::target_dir().join("bench-data");
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("clickstream-{events}-{keys}.jsonl"));
    if path.exists() {
        return Ok(path);
    }
    let config = weir::gen::ClickstreamConfig {
        events,
        users: u32::try_from(keys)?,
        ..weir::gen::ClickstreamConfig::default()
    };
    let partial = path.with_extension("partial");
    let mut out = BufWriter::new(fs::File::create(&partial)?);
    for event in weir::gen::Clickstream::new(config)? {
        out.write_all(&event.payload)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    fs::rename(&partial, &path)?;
    Ok(path)
}

/// `jobs/clickstream.toml` with its window replaced by the `[window]` body `window`, loaded
/// with its base directory.
pub fn clickstream_job(window: &str) -> anyhow::Result<weir::JobFile> {
    let job_path = weir_testkit::clickstream::job_path();
    let text = fs::read_to_string(&job_path)?;
    let default_window = "kind = \"tumbling\"\nsize = \"1m\"";
    anyhow::ensure!(
        text.contains(default_window),
        "{} has another [window]",
        job_path.display()
    );
    let mut job: weir::JobFile = toml::from_str(&text.replacen(default_window, window, 1))?;
    job.base_dir = job_path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(job)
}

/// A scratch directory for one case of this process, removed when dropped. Made before the
/// case's [`run_case`] and dropped after it: removing a run's output (269 MB of rows for run
/// F's hopping windows, the kernel dropping its pages) is not the run's work.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// [`Scratch`], created.
pub fn scratch(bench: &str, label: &str) -> Scratch {
    let dir =
        std::env::temp_dir().join(format!("weir-bench-{bench}-{label}-{}", std::process::id()));
    let _ = fs::create_dir_all(&dir);
    Scratch(dir)
}

/// Wall and CPU time from a case's start (the child side).
pub struct CaseClock {
    wall: Instant,
    cpu_s: f64,
    ticks: HostTicks,
}

impl CaseClock {
    pub fn start() -> CaseClock {
        CaseClock {
            wall: Instant::now(),
            cpu_s: process_cpu_s(),
            ticks: HostTicks::now(),
        }
    }

    /// Prints the case's figures since [`CaseClock::start`], as the parent's [`child`] reads
    /// them: `items` handled.
    pub fn report(self, items: u64) {
        let (wall_s, cpu_s) = (
            self.wall.elapsed().as_secs_f64(),
            process_cpu_s() - self.cpu_s,
        );
        let ticks = HostTicks::now().since(self.ticks);
        println!(
            "{items} {wall_s} {cpu_s} {} {} {}",
            peak_rss_mb(),
            ticks.total,
            ticks.steal
        );
    }
}

/// Runs one case's `work` in this process (the child side), timing all of it, and prints its
/// figures: `work` returns how many items it handled.
pub fn run_case(work: impl FnOnce() -> anyhow::Result<u64>) -> anyhow::Result<()> {
    let clock = CaseClock::start();
    let items = work()?;
    clock.report(items);
    Ok(())
}

/// Runs `case` in a child process (this binary with `case_var` = `case`) and reads its
/// figures.
pub fn child(case_var: &str, case: &str) -> anyhow::Result<Figures> {
    let output = Command::new(std::env::current_exe()?)
        .env(case_var, case)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "case {case} failed: {}{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    let fields: Vec<f64> = stdout
        .lines()
        .last()
        .unwrap_or_default()
        .split(' ')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let [items, wall_s, cpu_s, peak_rss_mb, total, steal] = fields[..] else {
        anyhow::bail!("case {case} printed `{stdout}`");
    };
    Ok(Figures {
        items: items as u64,
        wall_s,
        cpu_s,
        peak_rss_mb,
        ticks: HostTicks {
            total: total as u64,
            steal: steal as u64,
        },
    })
}
