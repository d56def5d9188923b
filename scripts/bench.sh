#!/usr/bin/env bash
# The benchmark suite, side by side in one run: toolhost against LangGraph's
# ToolNode (installed here into bench/.venv), one process per call, the
# naive wasmtime path, a reused instance and the native function; then the
# agent loop's own overhead per turn; then key-value stores from a tool
# (embedded and Redis); then MCP serving: toolhost serve over
# HTTP and stdio against the Python MCP SDK's MCPServer (from
# target/clients-venv). Prints the tables with ratios and targets, and writes
# target/bench/results.json, target/bench/mcp.json and docs/bench/latency.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build-tools.sh
cargo build --release --quiet -p native-calc

venv=bench/.venv
if [ ! -x "$venv/bin/python" ] || ! cmp -s bench/peers/requirements.txt "$venv/requirements.txt"; then
    echo "bench: installing LangGraph into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r bench/peers/requirements.txt
    cp bench/peers/requirements.txt "$venv/requirements.txt"
fi

tests/clients/run.sh --setup

cargo bench --quiet --workspace --bench compare
cargo bench --quiet --workspace --bench agent_turn
cargo bench --quiet --workspace --bench stores
cargo bench --quiet --workspace --bench mcp
mkdir -p docs/bench
cp target/bench/latency.svg docs/bench/latency.svg
echo "bench: chart copied to docs/bench/latency.svg"
