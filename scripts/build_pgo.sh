#!/usr/bin/env bash
# A profile-guided (PGO) release build of the `weir` binary: an instrumented build runs a
# training workload, and the release build is compiled again with the profile it recorded,
# so LLVM lays out and inlines the hot paths (JSON decoding, key routing, window updates, row
# encoding) for how they actually run. Over run F's input it takes 4–8 % of the CPU time off
# `weir features` runs against today's release builds (BENCHMARKS.md, F, after fix 86); before
# `.cargo/config.toml` raised the inline threshold (fix 86), 11–17 %, and 8 % off a scoring
# run, 5 % off a Kafka run ("A profile-guided build"). Its RUSTFLAGS below replace that
# config's list: the profile decides what to inline (the threshold on top of the profile
# measured the same, ×0.99–1.00).
#
# Usage: scripts/build_pgo.sh [OUT]   (default OUT: target/pgo/weir; deploy/Dockerfile builds
# its image's binary with it)
#        scripts/build_pgo.sh --check-training WEIR   runs the training below with the binary
#        WEIR (a path from the current directory) over 20 000 events, no build, no profile:
#        scripts/test.sh runs it with the tests' debug binary, so a changed command line or
#        job file breaks CI, not the next image build.
#
# Training (each run with the instrumented binary, on a generated clickstream of 1 M events
# over 50 000 users, as run F's input):
#   - `weir features` with run F's windows, tumbling 1 m, hopping 5 m / 1 m and session 30 s
#     (benches/windows/, over jobs/clickstream.toml's features), with 1 and 2 workers;
#   - `weir run jobs/clickstream.toml` from that file to a scores file: the job's model on
#     ONNX Runtime (WEIR_ORT_LIB, as scripts/setup.sh installs it).
# Not trained: the Kafka source and sinks (librdkafka itself is C, built without the
# profile); code no run reached is compiled as cold. A job with other features gets what the
# shared paths (decoding, routing, windows, encoding) gain.
#
# Needs `llvm-profdata` of rustc's own LLVM version: the `llvm-tools` rustup component
# (installed here when missing). Builds in target/pgo/ (two full release builds, ~14 min on
# 2 cores); the normal target/release/ is left alone.
set -euo pipefail
CALLER_DIR=$PWD
cd "$(dirname "$0")/.."
REPO_ROOT=$PWD

WORK=$REPO_ROOT/target/pgo
PROFILES=$WORK/profiles
export WEIR_ORT_LIB="${WEIR_ORT_LIB:-$REPO_ROOT/.cache/onnxruntime/libonnxruntime.so}"
# The training runs serve no /metrics (a port in use would fail them).
export WEIR_METRICS_ADDR=off

step() { printf '\n==> %s\n' "$*"; }

# jobs/clickstream.toml with its [window] table replaced by the file WINDOW's.
job_with_window() {
    local window=$1 job=$2
    awk '/^\[window\]/ { skip = 1; next } /^\[/ { skip = 0 } !skip' jobs/clickstream.toml >"$job"
    printf '\n[window]\n' >>"$job"
    cat "$window" >>"$job"
}

# train WEIR EVENTS DIR: the training workload, run by the binary WEIR over EVENTS generated
# events in the scratch directory DIR (made and removed here).
train() {
    local weir=$1 events=$2 dir=$3
    rm -rf "$dir"
    mkdir -p "$dir"
    "$weir" gen --seed 42 --events "$events" --users 50000 --out "$dir/clicks.jsonl"
    # Run F's three windows (tumbling 1 m, hopping 5 m / 1 m, session 30 s).
    local window job workers
    for window in benches/windows/*.toml; do
        job="$dir/job-$(basename "$window")"
        job_with_window "$window" "$job"
        for workers in 1 2; do
            "$weir" features "$job" --input "$dir/clicks.jsonl" \
                --output "$dir/rows.jsonl" --workers "$workers"
        done
    done
    # The job file's model path is relative to the job file: run it where it is.
    "$weir" run jobs/clickstream.toml --input-file "$dir/clicks.jsonl" \
        --output-file "$dir/scores.jsonl"
    rm -rf "$dir"
}

if [[ ! -f "$WEIR_ORT_LIB" ]]; then
    echo "no ONNX Runtime at $WEIR_ORT_LIB (the scoring run trains on it): run scripts/setup.sh or set WEIR_ORT_LIB" >&2
    exit 1
fi

if [[ "${1:-}" == --check-training ]]; then
    weir=$(cd "$CALLER_DIR" && realpath "${2:?usage: scripts/build_pgo.sh --check-training WEIR}")
    step "the training runs with $weir, 20 000 events"
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    train "$weir" 20000 "$scratch"
    step "done: the training runs pass"
    exit 0
fi

OUT=${1:-target/pgo/weir}
HOST=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA="$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata"

if [[ ! -x "$PROFDATA" ]]; then
    step "llvm-profdata (rustup component llvm-tools)"
    rustup component add llvm-tools
fi

step "instrumented build (target/pgo/generate)"
rm -rf "$PROFILES"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$PROFILES" CARGO_TARGET_DIR="$WORK/generate" \
    cargo build --release --locked -p weir --bin weir

step "training runs"
train "$WORK/generate/release/weir" 1000000 "$WORK/train"

step "merging the profiles"
"$PROFDATA" merge -o "$WORK/weir.profdata" "$PROFILES"

step "optimized build (target/pgo/use)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$WORK/weir.profdata" CARGO_TARGET_DIR="$WORK/use" \
    cargo build --release --locked -p weir --bin weir
mkdir -p "$(dirname "$OUT")"
cp "$WORK/use/release/weir" "$OUT"
step "done: $OUT"
