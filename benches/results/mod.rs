//! Where the whole-job benchmarks (F, K, M) leave their markdown tables for
//! `scripts/bench.sh`: the file named by an environment variable, else
//! `<target dir>/bench-results/<name>.md`.

use std::path::{Path, PathBuf};

/// The cargo target directory (`CARGO_TARGET_DIR`, else `target/` of the workspace).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Prints `table` and writes it to `$var`, else to `<target dir>/bench-results/<name>.md`.
pub fn write_table(var: &str, name: &str, table: &str) -> std::io::Result<()> {
    print!("{table}");
    let out = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        target_dir()
            .join("bench-results")
            .join(format!("{name}.md"))
    });
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, table)
}
