#!/usr/bin/env bash
# The cluster test (issue 27): Redis, three `toolhost serve` replicas and
# HAProxy (deploy/haproxy.cfg with its ports replaced), all on 127.0.0.1,
# each started and stopped by its pid; then scripts/cluster_test.py drives a
# mixed load through HAProxy with the MCP Python SDK and the HTTP API, as
# three principals with their own tokens, SIGKILLs one replica part-way, and
# checks and prints: one answer per call, no tool run twice, each principal's
# own notes, the rate limit across replicas, and the survivors' RSS.
#
#   scripts/cluster-test.sh            # with target/release/toolhost and target/tools
#   TOOLHOST_BIN=path/to/toolhost scripts/cluster-test.sh
#
# Needs the binary and the Rust tools (scripts/build-tools.sh --rust),
# redis-server and haproxy (scripts/setup.sh installs both), and the client
# venv (tests/clients/run.sh --setup, run here when it is missing). Bounded:
# the whole run ends within TOOLHOST_CLUSTER_TIMEOUT seconds (150).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=${TOOLHOST_BIN:-target/release/toolhost}
limit=${TOOLHOST_CLUSTER_TIMEOUT:-150}
python=target/clients-venv/bin/python
# Each principal's budget: the driver checks what the replicas admit
# together against burst + rate × time.
rate=50
burst=50

for tool in redis-server redis-cli haproxy; do
    command -v "$tool" >/dev/null || { echo "cluster: $tool is missing; run scripts/setup.sh" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "cluster: no $bin; build it (cargo build --release --workspace)" >&2; exit 1; }
for tool in calc notes; do
    [ -f "target/tools/$tool.wasm" ] || { echo "cluster: no target/tools/$tool.wasm; run scripts/build-tools.sh --rust" >&2; exit 1; }
done
[ -x "$python" ] || tests/clients/run.sh --setup

work=$(mktemp -d)
pids=()
# Stop everything this script started, by pid, however it ends.
cleanup() {
    local status=$?
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "$status" -ne 0 ]; then
        for log in "$work"/*.log; do
            [ -s "$log" ] && { echo "--- $log (last lines)"; tail -n 20 "$log"; }
        done
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# healthy URL: GET URL answers 200.
healthy() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for WHAT COMMAND...: run COMMAND until it succeeds, for up to 30 s.
wait_for() {
    local what=$1
    shift
    for _ in $(seq 300); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "cluster: $what did not come up" >&2
    return 1
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for "redis-server" redis-cli -p "$redis_port" ping
redis="redis://127.0.0.1:$redis_port"

token() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }
ALICE_TOKEN=$(token) BOB_TOKEN=$(token) CAROL_TOKEN=$(token) REDIS_URL=$redis
export ALICE_TOKEN BOB_TOKEN CAROL_TOKEN REDIS_URL

principal() {
    printf '[[serve.auth.token]]\nprincipal = "%s"\nenv = "%s_TOKEN"\nscopes = ["tools:*", "metrics:read"]\nclaims = { sub = "%s" }\n\n' \
        "$1" "$(echo "$1" | tr a-z A-Z)" "$1"
}
{
    cat <<EOF
[limits]
timeout = "10s"

[[tool]]
component = "$root/target/tools/calc.wasm"

[[tool]]
component = "$root/target/tools/notes.wasm"
stores = ["notes"]

# The test probe, for its sleep tool: a long call run as a task.
[[tool]]
component = "$root/target/tools/probe.wasm"

# Each principal's own notes, in the Redis every replica shares.
[store.notes]
backend = "$redis/0"
scope = "user"

[serve.auth]
context.user = "claim:sub"

EOF
    principal alice
    principal bob
    principal carol
    cat <<EOF
[serve.limits]
redis = { env = "REDIS_URL" }
per_principal = { rate = "$rate/s", burst = $burst }

[serve.sessions]
redis = { env = "REDIS_URL" }

# Tasks shared by the replicas; a dead replica's task is failed two
# seconds after its last renewal.
[serve.tasks]
redis = { env = "REDIS_URL" }
lease = "2s"
EOF
} >"$work/toolhost.toml"

replica_ports=()
replica_pids=()
for i in 1 2 3; do
    port=$(free_port)
    # HAProxy connects from 127.0.0.3 with PROXY headers (deploy/haproxy.cfg).
    RUST_LOG=warn "$bin" serve --config "$work/toolhost.toml" --listen "127.0.0.1:$port" --drain 5s \
        --proxy-protocol 127.0.0.3/32 >"$work/replica$i.log" 2>&1 &
    pids+=($!)
    replica_pids+=($!)
    replica_ports+=("$port")
done
for port in "${replica_ports[@]}"; do
    wait_for "toolhost serve on port $port" healthy "http://127.0.0.1:$port/healthz"
done

lb_port=$(free_port)
sed -e "s/127\.0\.0\.1:8080/127.0.0.1:$lb_port/" \
    -e "s/127\.0\.0\.1:8181/127.0.0.1:${replica_ports[0]}/" \
    -e "s/127\.0\.0\.1:8182/127.0.0.1:${replica_ports[1]}/" \
    -e "s/127\.0\.0\.1:8183/127.0.0.1:${replica_ports[2]}/" \
    deploy/haproxy.cfg >"$work/haproxy.cfg"
haproxy -c -q -f "$work/haproxy.cfg"
haproxy -db -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1 &
pids+=($!)
wait_for "haproxy on port $lb_port" healthy "http://127.0.0.1:$lb_port/healthz"

echo "cluster: redis :$redis_port, replicas :${replica_ports[*]} (pids ${replica_pids[*]}), haproxy :$lb_port"
started=$SECONDS
PYTHONDONTWRITEBYTECODE=1 timeout --kill-after=5 "$limit" "$python" scripts/cluster_test.py \
    --url "http://127.0.0.1:$lb_port" \
    --pids "$(IFS=,; echo "${replica_pids[*]}")" \
    --ports "$(IFS=,; echo "${replica_ports[*]}")" \
    --rate "$rate" --burst "$burst"
echo "cluster: done in $((SECONDS - started)) s"
