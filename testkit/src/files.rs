//! Scratch files of tests: a fresh directory per test, JSON Lines input files, and the
//! job-file snippets tests splice into a job (`[checkpoint]`).

use std::io::Write;
use std::path::{Path, PathBuf};

/// An empty directory `weir-<label>-<pid>` under the system temp dir (emptied if a previous
/// run left it behind); panics (failing the test) if it cannot be made.
pub fn scratch_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
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
    format!("dir = \"{}\"\ninterval = \"{interval}\"", dir.display())
}
