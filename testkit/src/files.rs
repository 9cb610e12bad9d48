//! Scratch files of tests: a fresh directory per test (or a [`Scratch`] guard that removes
//! it), JSON Lines input files, and the job-file snippets tests splice into a job
//! (`[checkpoint]`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A new, empty directory `weir-<label>-<pid>-<n>` under the system temp dir, unique to this
/// call (tests of one binary run in parallel in one process); panics (failing the test) if it
/// cannot be made. Left behind for a failed test to be looked at.
pub fn scratch_dir(label: &str) -> PathBuf {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let name = format!("weir-{label}-{}-{nanos}-{call}", std::process::id());
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// A [`scratch_dir`] removed when dropped; or, made with [`Scratch::kept_unless_passed`],
/// removed only once the test said it [`passed`](Scratch::passed), else kept and named on
/// stderr so a failed run's logs and data can be read afterwards.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    remove: bool,
}

impl Scratch {
    /// A fresh directory for `label`, removed on drop.
    pub fn new(label: &str) -> Scratch {
        Scratch {
            path: scratch_dir(label),
            remove: true,
        }
    }

    /// A fresh directory for `label`, kept on drop unless [`passed`](Scratch::passed) was
    /// called.
    pub fn kept_unless_passed(label: &str) -> Scratch {
        Scratch {
            path: scratch_dir(label),
            remove: false,
        }
    }

    /// The test passed: the directory goes on drop.
    pub fn passed(&mut self) {
        self.remove = true;
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        } else {
            eprintln!(
                "kept the failed test's logs and data in {}",
                self.path.display()
            );
        }
    }
}

/// Writes `lines` to `path`, one a line (JSON Lines input of the file source).
pub fn write_lines<L: AsRef<[u8]>>(
    path: &Path,
    lines: impl IntoIterator<Item = L>,
) -> std::io::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for line in lines {
        file.write_all(line.as_ref())?;
        file.write_all(b"\n")?;
    }
    file.flush()
}

/// The body of a `[checkpoint]` section: checkpoints in `dir` every `interval` (e.g. `"1s"`).
pub fn checkpoint_toml(dir: &Path, interval: &str) -> String {
    format!("{}\ninterval = \"{interval}\"", checkpoint_dir_toml(dir))
}

/// The body of a `[checkpoint]` section that sets only the directory, `dir = "<dir>"`.
pub fn checkpoint_dir_toml(dir: &Path) -> String {
    format!("dir = \"{}\"", dir.display())
}

/// The last `lines` lines of a `weir` log (ONNX Runtime's chatter left out), headed by its
/// path, for failure messages.
pub fn log_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("ort::logging"))
        .collect();
    format!(
        "{}:\n{}",
        log.display(),
        kept[kept.len().saturating_sub(lines)..].join("\n")
    )
}
