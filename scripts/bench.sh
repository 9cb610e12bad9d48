#!/usr/bin/env bash
# Runs the whole-job benchmarks of issue #18 and writes each one's section of BENCHMARKS.md
# (between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`; a missing section is appended),
# with the machine, the date, the commit and the load average before and after the run beside
# the figures. Every figure in a section is next to its same-run baseline and the ratio.
#
# Usage: scripts/bench.sh [NAME...]   (default: all of F, S, K, L, M)
#   F   benches/features_file.rs: features only, file -> file, against parse-only serde_json
#   S   benches/score_job.rs: file -> features -> ONNX -> file per model (WEIR_ORT_LIB set),
#       against raw ort over the same rows
#   K   benches/kafka_job.rs: Kafka -> job -> Kafka on the dev broker (scripts/broker.sh start;
#       WEIR_ORT_LIB set), against raw rdkafka consume + produce
#   L   benches/live_latency.rs: live latency at 50 % / 80 % of the job's maximum rate on the
#       dev broker, against a raw producer's send -> acknowledged at the same rate
#   M   benches/window_memory.rs: bytes per open (key, window) against a plain HashMap
#
# A benchmark is a `run_NAME` function with an entry in BENCHES. A run on a machine that is
# busy with other work says so: compare load averages.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCHES=(F S K L M)
RESULTS=target/bench-results

machine() {
    local cpu cores mem
    cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
    cores=$(nproc)
    mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
    echo "${cores} cores (${cpu:-unknown CPU}), ${mem}, $(uname -sr)"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

# The line saying when, at which commit and on what a section's figures were measured, and
# the load average before and after (when given).
provenance() {
    local started=$1 before=$2 after=$3
    echo "$started, commit \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- . ':!BENCHMARKS.md' || echo ' + uncommitted changes'), $(machine)."
    [ -n "$before" ] && echo "Load average (1, 5, 15 min) before: $before; after: $after."
    return 0
}

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
        provenance "$started" "$before" "$after"
        echo "On a machine with other work (a load average above its core count) every figure is"
        echo "low and noisy, the ratios less so: rerun on an idle machine before reading them as the"
        echo "engine's."
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
        provenance "$started" "$before" "$after"
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
        provenance "$started" "" ""
        echo
        cat "$table"
    } >"$body"
    write_section M "$body"
}

run_S() {
    local table=$RESULTS/S.md before after started body
    started=$(date -u '+%Y-%m-%d %H:%M UTC')
    before=$(load)
    WEIR_BENCH_S_OUT=$table cargo bench --bench score_job
    after=$(load)
    body=$RESULTS/S.section.md
    {
        echo "## S: file → features → ONNX → file, per model — \`benches/score_job.rs\`"
        echo
        echo "Command: \`scripts/bench.sh S\` (\`cargo bench --bench score_job\`). The whole job"
        echo "(\`jobs/clickstream.toml\`: 2 workers, tumbling 1 m, 8 features, micro-batches of 256,"
        echo "1 intra-op thread per inference thread) with \`[model] path\` set to each model, over F's"
        echo "input file, scores to a file. Baseline, same run: \`raw_ort\`, the job's feature rows"
        echo "(written by \`features\`, the job without its model) scored by plain \`ort\` sessions on"
        echo "2 threads, one per score instance, from rows already in memory. Each case runs in a"
        echo "process of its own; wall time includes the job's start (model load, warm-up)."
        echo
        echo "Target (issue #18): ≥ 0.9 of the raw \`ort\` loop for each model."
        echo
        provenance "$started" "$before" "$after"
        echo
        cat "$table"
    } >"$body"
    write_section S "$body"
}

run_L() {
    local table=$RESULTS/L.md before after started body
    started=$(date -u '+%Y-%m-%d %H:%M UTC')
    before=$(load)
    WEIR_BENCH_L_OUT=$table cargo bench --bench live_latency
    after=$(load)
    body=$RESULTS/L.section.md
    {
        echo "## L: live latency over Kafka — \`benches/live_latency.rs\`"
        echo
        echo "Command: \`scripts/bench.sh L\` (\`cargo bench --bench live_latency\`), on the dev broker."
        echo "\`jobs/clickstream.toml\` with session windows (gap 2 s) and \`max_out_of_orderness = 0s\`,"
        echo "so each user's window closes on its own as records arrive; a paced producer writes"
        echo "records stamped with the wall clock at 50 % and 80 % of the maximum rate of a bounded run"
        echo "of the same job in this run, while the job runs unbounded. Latencies of live scores,"
        echo "from the job's HDR histograms. Baseline, same run: a raw rdkafka producer with the"
        echo "sink's settings sending as many records of the same size at the job's score rate,"
        echo "send → acknowledged: the broker's share of close → acknowledged."
        echo
        echo "Target (issue #18): p99 ≤ 5 ms at 50 % load; p99.9 reported."
        echo
        provenance "$started" "$before" "$after"
        echo
        cat "$table"
    } >"$body"
    write_section L "$body"
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
