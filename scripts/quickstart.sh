#!/usr/bin/env bash
# First run of Weir, end to end on this machine:
#   setup -> local broker -> build weir -> topics -> generate 200k click events
#   -> run the clickstream job over them (bounded) -> scores in topic `scores`.
# The broker is left running afterwards (stop it with scripts/broker.sh stop).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

if [[ -d "$HOME/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

export WEIR_BROKER_PORT="${WEIR_BROKER_PORT:-9092}"
BROKERS="127.0.0.1:$WEIR_BROKER_PORT"
WEIR="$REPO_ROOT/target/release/weir"

step() { printf '\n==> %s\n' "$*"; }

main() {
    step "setup (first run builds the broker: ~10 min)"
    bash scripts/setup.sh

    step "broker on $BROKERS (emptied, so every quick start reads exactly its own events)"
    bash scripts/broker.sh reset
    bash scripts/broker.sh start

    step "build weir (release)"
    cargo build --release -p weir

    step "topics (Kafka Admin API)"
    # 4 partitions so the source can run with parallelism up to 4.
    "$WEIR" topics jobs/clickstream.toml --partitions 4 --brokers "$BROKERS"

    step "generate 200000 click events into clicks"
    "$WEIR" gen --seed 42 --events 200000 --malformed 0.001 --brokers "$BROKERS" --topic clicks

    step "run jobs/clickstream.toml (bounded)"
    "$WEIR" run jobs/clickstream.toml --bounded --brokers "$BROKERS"

    step "done"
    cat <<MSG
Scores are in topic 'scores', bad records in 'clicks-dlq' (broker $BROKERS).
The broker is still running:  scripts/broker.sh status | stop | reset
MSG
}

main "$@"
