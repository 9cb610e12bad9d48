#!/usr/bin/env bash
# The project's single test command (CI runs it through .ci/run).
#
#   scripts/test.sh [CARGO_TEST_ARGS...]
#
# 1. scripts/setup.sh (fast when everything is already installed)
# 2. starts the local broker unless one is already up (and stops it on exit
#    only if this script started it)
# 3. cargo fmt --check, cargo clippy -D warnings, the import-ring check
#    (scripts/import_rings.py), the Kubernetes manifests against the API schemas
#    (deploy/validate_k8s.py), BENCHMARKS.md's targets at a glance against its tables
#    (scripts/bench_targets.py --check), cargo test, with WEIR_TEST_BROKERS pointing at the
#    broker, then scripts/build_pgo.sh's training runs with the tests' weir binary
#
# Every check runs even when an earlier one fails, so one run shows every
# problem; the exit status is non-zero if any failed. Extra arguments go to
# `cargo test` (e.g. `scripts/test.sh -p weir-kafka -- --nocapture`).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

# Non-login shells (CI) may not have rustup's bin dir on PATH.
if [[ -d "$HOME/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

export WEIR_BROKER_PORT="${WEIR_BROKER_PORT:-9092}"
export WEIR_TEST_BROKERS="${WEIR_TEST_BROKERS:-127.0.0.1:$WEIR_BROKER_PORT}"
# weir finds the library by walking up from its executable / cwd anyway; the
# explicit path also covers test binaries run from other directories.
export WEIR_ORT_LIB="${WEIR_ORT_LIB:-$REPO_ROOT/.cache/onnxruntime/libonnxruntime.so}"
# Colour codes make CI logs hard to read.
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# This command builds every target once, from a clean clone in CI: incremental caches would
# only add ~1 GB to the target dir (see the disk note in Cargo.toml's [profile.dev]).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step() { printf '\n==> %s\n' "$*"; }

started_broker=0
test_totals=""
cleanup() {
    if ((started_broker)); then
        step "stopping the broker started by this run"
        bash scripts/broker.sh stop || true
    fi
    # The last line of the run: the total over every cargo test binary.
    if [[ -n "$test_totals" ]]; then
        echo "$test_totals"
    fi
}
trap cleanup EXIT

failed=()
summary=()

# run NAME CMD... : runs a check, records its result and duration.
run() {
    local name="$1" start=$SECONDS rc=0
    shift
    step "$name: $*"
    "$@" || rc=$?
    if ((rc == 0)); then
        summary+=("ok    $name ($((SECONDS - start))s)")
    else
        summary+=("FAIL  $name ($((SECONDS - start))s, exit $rc)")
        failed+=("$name")
    fi
}

# cargo test, with one closing line totalling every test binary (the last binary cargo runs
# is a doc-test target with 0 tests, which would otherwise close the log).
cargo_test() {
    local log rc=0
    log="$(mktemp)"
    local scope=(--workspace)
    # `scripts/test.sh -p weir-kafka` narrows the run: --workspace would override -p.
    if (($#)); then scope=(); fi
    # --no-fail-fast: a failing test binary does not hide the results of the ones after it.
    cargo test "${scope[@]}" --no-fail-fast --quiet "$@" 2>&1 | tee "$log" || rc=$?
    test_totals="$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
         END { printf "tests: %d passed, %d failed", p, f }' "$log")"
    echo "$test_totals"
    rm -f "$log"
    return "$rc"
}

main() {
    local t0=$SECONDS
    step "setup"
    bash scripts/setup.sh
    # A clean build of every test target needs ~2.5 GB; say how much there is, so a run that
    # fails for space shows why at once.
    df -h . | awk 'NR == 2 { print "[test] disk: " $4 " free on " $6 }'

    step "broker"
    # Stop the broker on exit only if this run started it: a broker that was
    # already running (ours or another checkout's) is left alone, even when
    # start fails waiting for it.
    local before after
    before="$(bash scripts/broker.sh pid || true)"
    bash scripts/broker.sh start || {
        after="$(bash scripts/broker.sh pid || true)"
        [[ -n "$after" && "$after" != "$before" ]] && started_broker=1
        return 1
    }
    after="$(bash scripts/broker.sh pid || true)"
    if [[ -n "$after" && "$after" != "$before" ]]; then
        started_broker=1
    else
        echo "[test] using the broker that was already running on $WEIR_TEST_BROKERS; leaving it running"
    fi

    run fmt cargo fmt --all --check
    run clippy cargo clippy --workspace --all-targets --quiet -- -D warnings
    run import-rings python3 scripts/import_rings.py
    run k8s-manifests .cache/venv/bin/python deploy/validate_k8s.py
    run bench-targets python3 scripts/bench_targets.py --check
    run test cargo_test "$@"
    # The deploy image's profile-guided build trains on `weir features` and `weir run`: the
    # same runs with the tests' debug binary, over a small input (a few seconds). A narrowed
    # run (`-p …`) may not have built that binary.
    if (($# == 0)); then
        run pgo-training bash scripts/build_pgo.sh --check-training target/debug/weir
    fi

    step "summary ($((SECONDS - t0))s total)"
    printf '  %s\n' "${summary[@]}"
    if ((${#failed[@]})); then
        echo "[test] FAILED: ${failed[*]}"
        return 1
    fi
    echo "[test] all checks passed"
}

main "$@"
