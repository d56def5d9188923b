#!/usr/bin/env bash
# The benchmark suite, side by side in one run: toolhost against LangGraph's
# ToolNode (installed here into target/bench-venv), one process per call, the
# naive wasmtime path, a reused instance and the native function; then the
# agent loop's own overhead per turn; then key-value stores from a tool
# (embedded and Redis); then code mode (a program's 10 calls against a
# batch of 10); then MCP serving: toolhost serve over
# HTTP and stdio against the Python MCP SDK's MCPServer (from
# target/clients-venv). Prints the tables with ratios and targets, and writes
# target/bench/results.json, target/bench/mcp.json and docs/bench/latency.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build-tools.sh
cargo build --release --quiet -p native-calc

# The peers (LangGraph's ToolNode, the Python MCP server) are in
# host/benches/peers; the venv is a build product, beside the clients' venvs.
venv=target/bench-venv
requirements=host/benches/peers/requirements.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.txt"; then
    echo "bench: installing LangGraph into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.txt"
fi

tests/clients/run.sh --setup

cargo bench --quiet --workspace --bench compare
cargo bench --quiet --workspace --bench agent_turn
cargo bench --quiet --workspace --bench stores
cargo bench --quiet --workspace --bench code_mode
cargo bench --quiet --workspace --bench auth
cargo bench --quiet --workspace --bench mcp
mkdir -p docs/bench
cp target/bench/latency.svg docs/bench/latency.svg
echo "bench: chart copied to docs/bench/latency.svg"
