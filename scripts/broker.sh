#!/usr/bin/env bash
# Local Kafka-protocol broker (tansu) for development and tests.
#
#   scripts/broker.sh start                         start (no-op when already up), wait until ready
#   scripts/broker.sh stop                          stop the broker this checkout started
#   scripts/broker.sh restart
#   scripts/broker.sh status                        exit 0 when a broker answers on the port
#   scripts/broker.sh pid                           print the pid of the broker this checkout started
#   scripts/broker.sh create-topic NAME [PARTITIONS] create NAME (default 1 partition) if absent
#   scripts/broker.sh delete-topic NAME             delete NAME if present
#   scripts/broker.sh add-partitions NAME COUNT     grow NAME to COUNT partitions (tests)
#   scripts/broker.sh list-topics                   print "name partitions" per topic
#   scripts/broker.sh reset                         stop and delete all broker data
#
# Listens on and advertises 127.0.0.1:$WEIR_BROKER_PORT (default 9092); librdkafka
# clients reconnect to the advertised address, so both must be the same.
# Data (SQLite via tansu's libsql engine) persists in <repo>/.cache/broker/
# across restarts; the log is <repo>/.cache/broker/tansu.log.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${WEIR_BROKER_PORT:-9092}"
# One data dir per port, so brokers on different ports never share a pid file
# or a database.
if [[ "$PORT" == 9092 ]]; then
    BROKER_DIR="${WEIR_BROKER_DIR:-$REPO_ROOT/.cache/broker}"
else
    BROKER_DIR="${WEIR_BROKER_DIR:-$REPO_ROOT/.cache/broker-$PORT}"
fi
PID_FILE="$BROKER_DIR/tansu.pid"
LOG_FILE="$BROKER_DIR/tansu.log"
HOST="127.0.0.1"
BROKER_URL="tcp://$HOST:$PORT"
READY_TIMEOUT_S="${WEIR_BROKER_READY_TIMEOUT:-60}"
# libsql (SQLite, relative to BROKER_DIR) is the default because it gets the
# Kafka semantics right (high watermarks, committed offsets, headers). tansu's
# memory://tansu/ engine is ~100x faster to fetch from but reports wrong high
# watermarks and loses committed offsets: see docs/SETUP.md.
STORAGE="${WEIR_BROKER_STORAGE:-sqlite://tansu.db}"

TANSU_VERSION="0.6.0"
WEIR_MACHINE_CACHE="${WEIR_MACHINE_CACHE:-$HOME/.cache/weir}"
TANSU_BIN="${WEIR_TANSU_BIN:-$WEIR_MACHINE_CACHE/tansu-$TANSU_VERSION/bin/tansu}"

log() { printf '[broker] %s\n' "$*"; }
die() { printf '[broker] ERROR: %s\n' "$*" >&2; exit 1; }

usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

require_tansu() {
    [[ -x "$TANSU_BIN" ]] || die "tansu not found at $TANSU_BIN; run scripts/setup.sh first"
}

# Runs the tansu CLI (with a time limit: the tansu client waits forever on a
# wedged broker) from the broker dir with a clean environment for the
# settings tansu also reads from env / a .env file (LISTENER_URL, ...), so a
# stray .env or exported variable cannot redirect it.
tansu() {
    mkdir -p "$BROKER_DIR"
    (cd "$BROKER_DIR" && timeout "${TANSU_CLI_TIMEOUT:-30}" env -u LISTENER_URL -u ADVERTISED_LISTENER_URL \
        -u STORAGE_ENGINE -u CLUSTER_ID -u SCHEMA_REGISTRY "$TANSU_BIN" "$@")
}

# Pid of the broker this checkout started, if it is still running.
our_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    # Guard against pid reuse: the process must be our tansu binary.
    [[ -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "tansu" || return 1
    printf '%s\n' "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

# A Kafka Metadata request round-trip (tansu topic list) succeeds.
broker_answers() { TANSU_CLI_TIMEOUT=5 tansu topic list --broker "$BROKER_URL" >/dev/null 2>&1; }

log_tail() {
    [[ -f "$LOG_FILE" ]] || return 0
    printf '[broker] --- last lines of %s ---\n' "$LOG_FILE" >&2
    tail -n 30 "$LOG_FILE" >&2
}

wait_ready() {
    local pid="$1" deadline=$((SECONDS + READY_TIMEOUT_S))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log_tail
            die "tansu (pid $pid) exited during startup"
        fi
        if broker_answers; then
            return 0
        fi
        sleep 0.5
    done
    log_tail
    die "broker not ready on $HOST:$PORT after ${READY_TIMEOUT_S}s (pid $pid still running)"
}

# tansu 0.6's SQLite schema has no index on record headers, and every Fetch looks up each
# record's headers: once the topics hold ~10^4 records with headers (Weir's scores and dead
# letters carry them), each fetched record scans the whole table. Reads slow down ~50x and
# requests from closed connections keep the broker spinning until clients time out. The
# index below (same file, standard SQLite; tansu's queries use it unchanged) removes that.
index_headers() {
    [[ "$STORAGE" == sqlite://* ]] || return 0
    local db="$BROKER_DIR/${STORAGE#sqlite://}"
    python3 - "$db" <<'PY' || die "cannot index record headers in $db"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
db.execute("create index if not exists weir_header_record on header (topition, offset_id)")
db.commit()
PY
}

cmd_start() {
    require_tansu
    mkdir -p "$BROKER_DIR"
    local pid
    if pid="$(our_pid)"; then
        wait_ready "$pid"
        index_headers
        log "already running (pid $pid) on $HOST:$PORT"
        return
    fi
    rm -f "$PID_FILE"
    if port_open; then
        # Another checkout (or a manually started broker) owns the port. Use it
        # when it speaks Kafka; we will not stop what we did not start.
        broker_answers || die "port $PORT is in use by something that is not a Kafka broker; set WEIR_BROKER_PORT"
        log "a broker not started by this checkout already serves $HOST:$PORT; using it"
        return
    fi
    log "starting tansu $TANSU_VERSION on $HOST:$PORT (data: $BROKER_DIR, log: $LOG_FILE)"
    {
        printf '\n=== %s start: %s broker --listener-url %s --advertised-listener-url %s --storage-engine %s\n' \
            "$(date -Is)" "$TANSU_BIN" "$BROKER_URL" "$BROKER_URL" "$STORAGE"
    } >>"$LOG_FILE"
    # setsid: the broker outlives this script and is not hit by the caller's
    # Ctrl-C; RUST_LOG keeps the log small unless overridden.
    (
        cd "$BROKER_DIR"
        RUST_LOG="${WEIR_BROKER_LOG:-warn}" NO_COLOR=1 exec setsid env -u LISTENER_URL -u ADVERTISED_LISTENER_URL \
            -u STORAGE_ENGINE -u CLUSTER_ID -u SCHEMA_REGISTRY \
            "$TANSU_BIN" broker \
            --cluster-id weir \
            --listener-url "$BROKER_URL" \
            --advertised-listener-url "$BROKER_URL" \
            --storage-engine "$STORAGE" \
            </dev/null >>"$LOG_FILE" 2>&1
    ) &
    pid=$!
    printf '%s\n' "$pid" >"$PID_FILE"
    local start=$SECONDS
    wait_ready "$pid"
    index_headers
    log "ready (pid $pid) in $((SECONDS - start))s"
}

cmd_stop() {
    local pid
    if ! pid="$(our_pid)"; then
        rm -f "$PID_FILE"
        if port_open; then
            log "not started by this checkout; leaving the broker on $HOST:$PORT alone"
        else
            log "not running"
        fi
        return
    fi
    log "stopping (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "still running after 10s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

cmd_status() {
    local pid
    if pid="$(our_pid)"; then
        if broker_answers; then
            log "running (pid $pid) on $HOST:$PORT"
            return 0
        fi
        log "process $pid is up but not answering on $HOST:$PORT"
        return 1
    fi
    if port_open && [[ -x "$TANSU_BIN" ]] && broker_answers; then
        log "running on $HOST:$PORT (not started by this checkout)"
        return 0
    fi
    log "not running"
    return 1
}

# Prints "name partitions" for every topic, from a Metadata request.
topic_table() {
    local json
    json="$(tansu topic list --broker "$BROKER_URL")" || die "cannot list topics (is the broker running? scripts/broker.sh start)"
    python3 -c '
import json, sys
for t in json.loads(sys.argv[1]):
    print(t.get("name"), len(t.get("partitions") or []))
' "$json"
}

topic_partitions() { topic_table | awk -v n="$1" '$1 == n { print $2 }'; }

cmd_create_topic() {
    local name="${1:-}" partitions="${2:-1}"
    [[ -n "$name" ]] || die "usage: broker.sh create-topic NAME [PARTITIONS]"
    [[ "$partitions" =~ ^[1-9][0-9]*$ ]] || die "PARTITIONS must be a positive integer, got '$partitions'"
    require_tansu
    local existing
    existing="$(topic_partitions "$name")"
    if [[ -n "$existing" ]]; then
        if [[ "$existing" != "$partitions" ]]; then
            log "topic $name already exists with $existing partitions (asked for $partitions); leaving it"
        else
            log "topic $name already exists ($existing partitions)"
        fi
        return
    fi
    tansu topic create --broker "$BROKER_URL" --partitions "$partitions" "$name" >/dev/null \
        || die "creating topic $name failed"
    existing="$(topic_partitions "$name")"
    [[ "$existing" == "$partitions" ]] || die "topic $name has '$existing' partitions after create, expected $partitions"
    log "created topic $name ($partitions partitions)"
}

cmd_delete_topic() {
    local name="${1:-}"
    [[ -n "$name" ]] || die "usage: broker.sh delete-topic NAME"
    require_tansu
    if [[ -z "$(topic_partitions "$name")" ]]; then
        log "topic $name does not exist"
        return
    fi
    tansu topic delete --broker "$BROKER_URL" "$name" >/dev/null || die "deleting topic $name failed"
    log "deleted topic $name"
}

# tansu 0.6 does not implement CreatePartitions (Apache Kafka's kafka-topics --alter
# --partitions); tests of partition discovery grow a topic the way tansu's own create-topic
# lays partitions out in its SQLite database (a topic row's partition count, one topition and
# one watermark row per partition). Only for the broker this checkout started.
cmd_add_partitions() {
    local name="${1:-}" count="${2:-}"
    [[ -n "$name" && "$count" =~ ^[1-9][0-9]*$ ]] || die "usage: broker.sh add-partitions NAME COUNT"
    [[ "$STORAGE" == sqlite://* ]] || die "add-partitions needs the sqlite storage engine"
    our_pid >/dev/null || die "add-partitions works on the broker this checkout started (scripts/broker.sh start)"
    local before
    before="$(topic_partitions "$name")"
    [[ -n "$before" ]] || die "topic $name does not exist"
    ((count > before)) || die "topic $name already has $before partitions (asked for $count)"
    python3 - "$BROKER_DIR/${STORAGE#sqlite://}" "$name" "$before" "$count" <<'PY' || die "adding partitions to $name failed"
import sqlite3, sys
path, name, before, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
db = sqlite3.connect(path, timeout=30)
with db:
    (topic,) = db.execute("select id from topic where name = ?", (name,)).fetchone()
    for partition in range(before, count):
        db.execute("insert into topition (topic, partition) values (?, ?)", (topic, partition))
        db.execute("insert into watermark (topition) select id from topition where topic = ? and partition = ?", (topic, partition))
    db.execute("update topic set partitions = ? where id = ?", (count, topic))
PY
    [[ "$(topic_partitions "$name")" == "$count" ]] || die "topic $name does not show $count partitions after the change"
    log "topic $name now has $count partitions (was $before)"
}

cmd_reset() {
    cmd_stop
    log "deleting broker data in $BROKER_DIR"
    rm -f "$BROKER_DIR"/tansu.db "$BROKER_DIR"/tansu.db-*
}

main() {
    local cmd="${1:-}"
    (($#)) && shift
    case "$cmd" in
        start) cmd_start ;;
        stop) cmd_stop ;;
        restart) cmd_stop; cmd_start ;;
        status) cmd_status ;;
        pid) our_pid ;;
        create-topic) cmd_create_topic "$@" ;;
        delete-topic) cmd_delete_topic "$@" ;;
        add-partitions) cmd_add_partitions "$@" ;;
        list-topics) require_tansu; topic_table ;;
        reset) cmd_reset ;;
        -h | --help | help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

main "$@"
