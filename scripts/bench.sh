#!/usr/bin/env bash
# Runs the whole-job benchmarks of issue #18 and writes each one's section of BENCHMARKS.md
# (between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`; a missing section is appended),
# with the machine, the date, the commit and the load average before and after the run beside
# the figures. Every figure in a section is next to its same-run baseline and the ratio.
#
# Usage: scripts/bench.sh [NAME...]   (default: all; today: F, K, M)
#   F   benches/features_file.rs: features only, file -> file, against parse-only serde_json
#   K   benches/kafka_job.rs: Kafka -> job -> Kafka on the dev broker (scripts/broker.sh start;
#       WEIR_ORT_LIB set), against raw rdkafka consume + produce
#   M   benches/window_memory.rs: bytes per open (key, window) against a plain HashMap
#
# Other benchmarks (S, L) are added here as `run_NAME` functions with an entry in
# BENCHES. A run on a machine that is busy with other work says so: compare load averages.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCHES=(F K M)
RESULTS=target/bench-results

machine() {
    local cpu cores mem
    cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
    cores=$(nproc)
    mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
    echo "${cores} cores (${cpu:-unknown CPU}), ${mem}, $(uname -sr)"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

# Replaces (or appends) the section NAME of BENCHMARKS.md with the file BODY.
write_section() {
    local name=$1 body=$2
    python3 - "$name" "$body" <<'PY'
import re, sys
name, body_path = sys.argv[1], sys.argv[2]
body = open(body_path).read().rstrip() + "\n"
begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
text = open("BENCHMARKS.md").read()
block = f"{begin}\n{body}{end}\n"
if begin in text and end in text:
    text = re.sub(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", lambda _: block, text, flags=re.S)
else:
    text = text.rstrip() + "\n\n" + block
open("BENCHMARKS.md", "w").write(text)
PY
}

run_F() {
    local table=$RESULTS/F.md before after started body
    started=$(date -u '+%Y-%m-%d %H:%M UTC')
    before=$(load)
    WEIR_BENCH_F_OUT=$table cargo bench --bench features_file
    after=$(load)
    body=$RESULTS/F.section.md
    {
        echo "## F: features only, file → file — \`benches/features_file.rs\`"
        echo
        echo "Command: \`scripts/bench.sh F\` (\`cargo bench --bench features_file\`). Each case runs in"
        echo "a process of its own: wall time of the run, CPU time of the whole process (all threads,"
        echo "user + system), peak resident memory (VmHWM). Per core = events / CPU seconds. The"
        echo "baseline \`parse_only\` reads the same file line by line into structs with serde_json"
        echo "on one thread, in the same run. Window kinds: \`jobs/clickstream.toml\`'s 8 features over"
        echo "tumbling 1 m, hopping 5 m / 1 m, session 30 s; the file is split into byte ranges"
        echo "(\`[source] range_bytes\`, 4 MiB) read by every worker."
        echo
        echo "Targets (issue #18): ≥ 3 M events/s wall with 2 workers, ≥ 2.5 M events/s per core,"
        echo "≥ 0.5 of parse-only."
        echo
        echo "$started, commit \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- . || echo ' + uncommitted changes'), $(machine)."
        echo "Load average (1, 5, 15 min) before: $before; after: $after. On a machine with other"
        echo "work (a load average above its core count) every figure is low and noisy, the"
        echo "ratios less so: rerun on an idle machine before reading them as the engine's."
        echo
        cat "$table"
    } >"$body"
    write_section F "$body"
}

run_K() {
    local table=$RESULTS/K.md before after started body
    started=$(date -u '+%Y-%m-%d %H:%M UTC')
    before=$(load)
    WEIR_BENCH_K_OUT=$table cargo bench --bench kafka_job
    after=$(load)
    body=$RESULTS/K.section.md
    {
        echo "## K: Kafka → features → Kafka — \`benches/kafka_job.rs\`"
        echo
        echo "Command: \`scripts/bench.sh K\` (\`cargo bench --bench kafka_job\`), on the dev broker"
        echo "(tansu with SQLite storage, \`scripts/broker.sh\`). A bounded \`weir run\` of"
        echo "\`jobs/clickstream.toml\` (2 workers; its tiny XGBoost model is in the path) from a"
        echo "2-partition topic to a score topic, without and with checkpoints (local directory, every"
        echo "second); baseline, same run: raw rdkafka reading the same topic to its end, then producing"
        echo "as many records as the job wrote, of their mean size. Wall time includes the job's start"
        echo "(topic checks, model load) and its end (flushing the last windows)."
        echo
        echo "Target (issue #18): ≥ 0.8 of the baseline."
        echo
        echo "$started, commit \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- . || echo ' + uncommitted changes'), $(machine)."
        echo "Load average (1, 5, 15 min) before: $before; after: $after."
        echo
        cat "$table"
    } >"$body"
    write_section K "$body"
}

run_M() {
    local table=$RESULTS/M.md started body
    started=$(date -u '+%Y-%m-%d %H:%M UTC')
    WEIR_BENCH_M_OUT=$table cargo bench --bench window_memory
    body=$RESULTS/M.section.md
    {
        echo "## M: memory per open (key, window) — \`benches/window_memory.rs\`"
        echo
        echo "Command: \`scripts/bench.sh M\` (\`cargo bench --bench window_memory\`). Bytes the"
        echo "window state allocates (counted by a wrapper around jemalloc: requested sizes) per open"
        echo "slot, one event per key in one window, count/sum/max of one field; baseline, same run: a"
        echo "\`HashMap<Key, [f64; 3]>\` of the same keys. A hopping window's five windows share a key's"
        echo "panes: one slot per (key, pane). Resident memory of run F: F's table."
        echo
        echo "Target (issue #18): ≤ 100 bytes per open (key, window); run F resident ≤ 40 MB."
        echo
        echo "$started, commit \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- . || echo ' + uncommitted changes'), $(machine)."
        echo
        cat "$table"
    } >"$body"
    write_section M "$body"
}

mkdir -p "$RESULTS"
selected=("$@")
[ ${#selected[@]} -eq 0 ] && selected=("${BENCHES[@]}")
for name in "${selected[@]}"; do
    if ! declare -F "run_$name" >/dev/null; then
        echo "unknown benchmark $name (known: ${BENCHES[*]})" >&2
        exit 2
    fi
    "run_$name"
done
