#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) with cargo fuzz on the nightly toolchain.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 600 s, every target)
#
# Each target starts from its committed seeds (fuzz/seeds/<target>/) plus the corpus kept
# from earlier runs (fuzz/corpus/<target>/, not committed). A finding stops the run with the
# input in fuzz/artifacts/<target>/: fix it and keep it as a regression test beside the code
# (e.g. features/tests/decode.rs). Not part of scripts/test.sh: it needs nightly and minutes.
# The checks themselves are fuzz/oracles/<target>.rs; features/tests/fuzz_seeds.rs runs them
# over fuzz/seeds/ in every test run. After a long run, refresh the seeds with the corpus
# minimized to one input per code edge:
#   cargo +nightly fuzz run <target> <empty dir> corpus/<target> -- -merge=1 -use_counters=0
# and copy the empty dir's new files into seeds/<target>/.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT/fuzz"
if [[ -d "$HOME/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

seconds="${1:-600}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "==> $target: ${seconds}s"
    cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -max_len=4096 -print_final_stats=1
done
