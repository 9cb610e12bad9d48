//! The fuzz targets' checks (`fuzz/oracles/`) over their committed seeds (`fuzz/seeds/`), on
//! the stable toolchain, in every test run. The seeds are the hand-written inputs plus each
//! target's corpus from `scripts/fuzz.sh`, minimized to the inputs that reach a code edge no
//! other does (`cargo fuzz run <target> -- -merge=1 -use_counters=0`): hundreds of malformed,
//! truncated, escaped and out-of-range inputs that the decoder's hand-written fast path and
//! the timestamp parsers must keep answering as serde_json and the RFC's grammar do, whatever
//! is changed in them later. Fuzzing itself needs nightly and minutes, so it is not in CI.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/oracles/json_decoder.rs"]
mod json_decoder;

#[path = "../../fuzz/oracles/timestamps.rs"]
mod timestamps;

/// Every seed of fuzz target `target`: its path and bytes, in name order.
fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("a seed");
            (path, bytes)
        })
        .collect()
}

/// Runs `check` on every seed of `target` (at least `at_least` of them) and names each seed
/// that fails it.
fn replay(target: &str, at_least: usize, check: fn(&[u8])) {
    let seeds = seeds(target);
    assert!(
        seeds.len() >= at_least,
        "{} seeds for {target}, expected the minimized corpus ({at_least} or more)",
        seeds.len()
    );
    let failed: Vec<String> = seeds
        .iter()
        .filter(|(_, bytes)| std::panic::catch_unwind(|| check(bytes)).is_err())
        .map(|(path, bytes)| format!("{}: {:?}", path.display(), String::from_utf8_lossy(bytes)))
        .collect();
    assert!(
        failed.is_empty(),
        "seeds failing {target}'s check:\n{}",
        failed.join("\n")
    );
}

#[test]
fn the_json_decoder_agrees_with_serde_json_on_every_seed() {
    replay("json_decoder", 700, json_decoder::check);
}

#[test]
fn the_timestamp_parsers_keep_their_definitions_on_every_seed() {
    replay("timestamps", 100, timestamps::check);
}
