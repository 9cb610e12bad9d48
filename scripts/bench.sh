#!/usr/bin/env bash
# Runs the whole-job benchmarks of issue #18 and writes each one's section of BENCHMARKS.md
# (between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`; a missing section is appended),
# with the machine, the date, the commit and the load average before and after the run beside
# the figures. Every figure in a section is next to its same-run baseline and the ratio.
#
# Usage: scripts/bench.sh [NAME...]   (default: all of F, S, SP, K, L, LF, M, P)
#   F   benches/features_file.rs: features only, file -> file, against parse-only serde_json
#   S   benches/score_job.rs: file -> features -> ONNX -> file per model (WEIR_ORT_LIB set),
#       against raw ort over the same rows
#   SP  the same with production-sized models (scripts/export_model.py --large, trained
#       first with the project venv that scripts/setup.sh makes)
#   K   benches/kafka_job.rs: Kafka -> job -> Kafka on the dev broker (scripts/broker.sh start;
#       WEIR_ORT_LIB set), against raw rdkafka consume + produce
#   L   benches/live_latency.rs: live latency at 50 % / 80 % of the job's maximum rate on the
#       dev broker, against a raw producer's send -> acknowledged at the same rate
#   LF  the same at 50 % on librdkafka's mock cluster (a fast broker), with the job's defaults
#       and with the settings of JOB_FILE.md's "Tuning for latency"
#   M   benches/window_memory.rs: bytes per open (key, window) against a plain HashMap
#   P   benches/producer_cpu.rs: a sink producer's CPU and acknowledgement times against a
#       broker that answers after 1, 20 and 200 ms, against the same producer not idempotent
#
# After the runs, the section `targets` (the "targets at a glance" table) is written again
# from the sections' tables by scripts/bench_targets.py; `scripts/bench.sh targets` writes
# only that. A benchmark is a `run_NAME` function with an entry in BENCHES. A run on a
# machine that is busy with other work says so: compare load averages.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCHES=(F S SP K L LF M P)
RESULTS=target/bench-results

# A VM's CPU name ("AMD EPYC") does not tell its generation apart, and one generation ran the
# window cases ×0.67–0.76 as fast as another (BENCHMARKS.md, F, "On a slower host"): the
# family, model and L2 size per core go beside it.
machine() {
    local cpu cores mem family model l2
    # A field this host does not report is left empty (`|| true`: no exit under `set -e`).
    cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
    family=$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ' || true)
    model=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ' || true)
    l2=$(grep -lx 2 /sys/devices/system/cpu/cpu0/cache/index*/level 2>/dev/null | head -1 || true)
    l2=$(if [[ -n "$l2" ]]; then cat "$(dirname "$l2")/size"; fi)
    cores=$(nproc)
    mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
    echo "${cores} cores (${cpu:-unknown CPU}, family ${family:-?} model ${model:-?}, L2 ${l2:-?} per core), ${mem}, $(uname -sr)"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

# The line saying when, at which commit and on what a section's figures were measured, and
# the load average before and after.
provenance() {
    local started=$1 before=$2 after=$3
    echo "$started, commit \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- . ':!BENCHMARKS.md' || echo ' + uncommitted changes'), $(machine)."
    echo "Load average (1, 5, 15 min) before: $before; after: $after."
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

# Runs `cargo bench --bench BENCH` with its table going to $RESULTS/NAME.md (the benchmark's
# WEIR_BENCH_<NAME>_OUT) and writes section NAME of BENCHMARKS.md: the description read from
# standard input, the provenance lines, the table.
bench_section() {
    local name=$1 bench=$2 table=$RESULTS/$1.md body=$RESULTS/$1.section.md
    local description started before after
    description=$(cat)
    started=$(date -u '+%Y-%m-%d %H:%M UTC')
    before=$(load)
    env "WEIR_BENCH_${name}_OUT=$table" cargo bench --bench "$bench"
    after=$(load)
    {
        echo "$description"
        echo
        provenance "$started" "$before" "$after"
        echo
        cat "$table"
    } >"$body"
    write_section "$name" "$body"
}

run_F() {
    bench_section F features_file <<'TEXT'
## F: features only, file → file — `benches/features_file.rs`

Command: `scripts/bench.sh F` (`cargo bench --bench features_file`). Each case runs in
a process of its own: wall time of the run, CPU time of the whole process (all threads,
user + system), peak resident memory (VmHWM). The run ends when its output file is written
and synced; removing the file after is not timed (it was before `ca57aab`: hopping's
269 MB took ~8 % of its wall time). Per core = events / CPU seconds. The
baseline `parse_only` reads the same file line by line into structs with serde_json
on one thread, in the same run. Window kinds: `jobs/clickstream.toml`'s 8 features over
tumbling 1 m, hopping 5 m / 1 m, session 30 s; the file is split into byte ranges
(`[source] range_bytes`: 128 KiB ranges in files larger than 512 KiB since fix 84; 512 KiB
ranges since fix 62, 1 MiB since fix 27, 4 MiB before) read by every worker.

Targets (issue #18): ≥ 3 M events/s wall with 2 workers, ≥ 2.5 M events/s per core,
≥ 0.5 of parse-only.

Host steal: the share of the machine's CPU ticks (`/proc/stat`, all of a case's rounds
together) that the hypervisor took while the case ran. It slows wall time, not CPU time.

On a machine with other work (a load average above its core count) every figure is
low and noisy, the ratios less so: rerun on an idle machine before reading them as the
engine's.
TEXT
}

run_S() {
    bench_section S score_job <<'TEXT'
## S: file → features → ONNX → file, per model — `benches/score_job.rs`

Command: `scripts/bench.sh S` (`cargo bench --bench score_job`). The whole job
(`jobs/clickstream.toml`: 2 workers, tumbling 1 m, 8 features, micro-batches of 256,
1 intra-op thread per inference thread) with `[model] path` set to each model, over F's
input file, scores to a file. Baseline, same run: `raw_ort`, the job's feature rows
(written by `features`, the job without its model) scored by plain `ort` sessions on
2 threads, one per score instance, from rows already in memory. Each case runs in a
process of its own; wall time includes the job's start (model load, warm-up), and not
the removal of its output after (since `ca57aab`).

Target (issue #18): ≥ 0.9 of the raw `ort` loop for each model.
TEXT
}

# Where SP's models are trained (every run: ~20 s, seeded, so the same models each time).
LARGE_MODELS=target/bench-data/models-large

run_SP() {
    local kind models=() python=.cache/venv/bin/python
    if [ ! -x "$python" ]; then
        echo "SP trains its models with the project venv: run scripts/setup.sh first ($python is missing)" >&2
        exit 2
    fi
    cargo build --release --locked -p weir --bin weir
    for kind in xgboost lightgbm mlp; do
        "$python" scripts/export_model.py --model "$kind" --large --seed 42 \
            --events 200000 --version "large-$kind-1" --weir target/release/weir \
            --out "$LARGE_MODELS/$kind" >/dev/null
        models+=("$kind=$PWD/$LARGE_MODELS/$kind")  # absolute: a job resolves paths from its file
    done
    # score_job writes its table where WEIR_BENCH_S_OUT says; bench_section reads SP's.
    WEIR_BENCH_S_OUT="$RESULTS/SP.md" WEIR_BENCH_S_MODELS="$(IFS=,; echo "${models[*]}")" \
        bench_section SP score_job <<'TEXT'
### SP: S with production-sized models — `benches/score_job.rs`

Command: `scripts/bench.sh SP`: S's benchmark (`WEIR_BENCH_S_MODELS`) with models of the
size teams serve, trained on the clickstream by `scripts/export_model.py --large --seed 42
--events 200000`: XGBoost 500 trees of depth 6, LightGBM 500 trees of 63 leaves, an MLP
with hidden layers of 256 and 128. The committed fixtures score a row in well under a
microsecond, so S measures the features stage; here ONNX Runtime is most of the work, as
in production. Same job, input, baseline and threads as S.

Target (issue #18): ≥ 0.9 of the raw `ort` loop for each model.
TEXT
}

run_K() {
    bench_section K kafka_job <<'TEXT'
## K: Kafka → features → Kafka — `benches/kafka_job.rs`

Command: `scripts/bench.sh K` (`cargo bench --bench kafka_job`), on the dev broker
(tansu with SQLite storage, `scripts/broker.sh`). A bounded `weir run` of
`jobs/clickstream.toml` (2 workers; its tiny XGBoost model is in the path) from a
2-partition topic to a score topic, without and with checkpoints (local directory, every
second), and with one sink instance (`[parallelism] sink = 1`: one score producer instead of
one per worker); baseline, same run: raw rdkafka reading the same topic to its end, then
producing records like the job's (as many, of their mean payload size, with the same header
keys and values of their mean sizes). A second raw run produces them without headers: on
this broker a header costs about what a record does. Wall time includes the job's start
(topic checks, model load) and its end (flushing the last windows).

Target (issue #18): ≥ 0.8 of the baseline.
TEXT
}

run_L() {
    bench_section L live_latency <<'TEXT'
## L: live latency over Kafka — `benches/live_latency.rs`

Command: `scripts/bench.sh L` (`cargo bench --bench live_latency`), on the dev broker.
`jobs/clickstream.toml` with session windows (gap 2 s) and `max_out_of_orderness = 0s`,
so each user's window closes on its own as records arrive; a paced producer (not
idempotent: it is the load, and P below shows what an idempotent one costs) writes
records stamped with the wall clock at 50 % and 80 % of the maximum rate of a bounded run
of the same job in this run, while the job runs unbounded. Latencies of live scores,
from the job's HDR histograms. Baseline, same run: a raw rdkafka producer with the
sink's settings sending as many records at the job's score rate, shaped like its score
records (mean payload size, the same headers), send → acknowledged: the broker's share of
close → acknowledged.

Target (issue #18): p99 ≤ 5 ms at 50 % load; p99.9 reported.
TEXT
}

# L on librdkafka's mock cluster, twice: the job's defaults, then tuned for latency. More
# users than L's 20 000, so that sessions fall silent for their gap at this broker's rates.
run_LF() {
    local table=$RESULTS/LF.md body=$RESULTS/LF.section.md part=$RESULTS/LF.part.md
    local started before after settings
    started=$(date -u '+%Y-%m-%d %H:%M UTC')
    before=$(load)
    : >"$table"
    for settings in "" \
        "WEIR_BENCH_L_SOURCE=fetch.wait.max.ms=5 WEIR_BENCH_L_TICK_MS=2 WEIR_BENCH_L_SINK=linger.ms=1"; do
        # shellcheck disable=SC2086 # the settings are words on purpose
        env WEIR_BENCH_L_BROKER=mock WEIR_BENCH_L_USERS=400000 WEIR_BENCH_L_SHARES=0.5 \
            WEIR_BENCH_L_SECONDS=20 "WEIR_BENCH_L_OUT=$part" $settings \
            cargo bench --bench live_latency
        {
            if [ -n "$settings" ]; then
                echo "Settings: $settings."
            else
                echo "Settings: none (the job file's defaults)."
            fi
            echo
            cat "$part"
            echo
        } >>"$table"
    done
    after=$(load)
    {
        cat <<'TEXT'
### LF: live latency on a fast broker — `benches/live_latency.rs`

Command: `scripts/bench.sh LF`: L's benchmark with `WEIR_BENCH_L_BROKER=mock` (every topic
on librdkafka's mock cluster, in the benchmark's process: a broker that is not the
bottleneck), `WEIR_BENCH_L_USERS=400000`, 50 % of the maximum rate, 20 s; once with the
job's defaults, once tuned for latency (JOB_FILE.md, "Tuning for latency").
TEXT
        echo
        provenance "$started" "$before" "$after"
        echo
        cat "$table"
    } >"$body"
    write_section LF "$body"
}

run_P() {
    bench_section P producer_cpu <<'TEXT'
## P: a sink producer's CPU while the broker is slow to answer — `benches/producer_cpu.rs`

Command: `scripts/bench.sh P` (`cargo bench --bench producer_cpu`). A producer with the
Kafka sink's settings (`acks=all`, `linger.ms=5`, idempotence) sends 500-byte records at a
steady rate to librdkafka's mock cluster (in the process) whose one broker answers after a
set round trip; measured: the CPU of the producer's own threads and send → acknowledged.
Baseline, same run: the same producer without idempotence. librdkafka's idempotent
producer has one produce request of a partition in flight at a time (at most 5 records in
flight per partition). As published (2.12.1), while it waited it polled without sleeping
once the records queued behind it were past `linger.ms`, so its cost grew with the broker's
answer time, not the rate. Since `a79a766` Weir builds a patched copy that sleeps
(`vendor/README.md`).
TEXT
}

run_M() {
    bench_section M window_memory <<'TEXT'
## M: memory per open (key, window) — `benches/window_memory.rs`

Command: `scripts/bench.sh M` (`cargo bench --bench window_memory`). Bytes the
window state allocates (counted by a wrapper around jemalloc: requested sizes) per open
slot, one event per key in one window, count/sum/max of one field; baseline, same run: a
`HashMap<Key, [f64; 3]>` of the same keys. A hopping window's five windows share a key's
panes: one slot per (key, pane), in five open windows here (each key's one event is in five
windows, none fired), so the last column divides the same bytes by five times as many open
(key, window)s. Resident memory of run F: F's table.

Target (issue #18): ≤ 100 bytes per open (key, window); run F resident ≤ 40 MB.
TEXT
}

# `targets`: no benchmark, only the summary written after the loop.
run_targets() { :; }

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
# The summary table at the top of BENCHMARKS.md, from the sections just written.
python3 scripts/bench_targets.py >"$RESULTS/targets.md"
write_section targets "$RESULTS/targets.md"
