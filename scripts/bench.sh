#!/usr/bin/env bash
# The benchmark suite, side by side in one run: toolhost against LangGraph's
# ToolNode (installed here into target/bench-venv), one process per call, the
# naive wasmtime path, a reused instance and the native function; then the
# agent loop's own overhead per turn; then key-value stores from a tool
# (embedded and Redis); then code mode (a program's 10 calls against a
# batch of 10); then MCP serving: toolhost serve over
# HTTP and stdio against the Python MCP SDK's MCPServer (from
# target/clients-venv) and against hyper-mcp, the WebAssembly MCP peer
# (crates.io, installed here into target/bench-peers). Prints the tables with
# ratios and targets, and writes target/bench/results.json,
# target/bench/mcp.json and docs/bench/latency.svg.
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

# The WebAssembly peer: hyper-mcp, pinned, with toolhost's calc as an Extism
# plugin (host/benches/peers/extism-calc, a wasm32-wasip1 module as
# hyper-mcp's plugins are). Both are build products in target/bench-peers,
# apart from toolhost's own build, and hyper-mcp's install is skipped when
# the pinned version is there.
HYPER_MCP=0.8.3
peers=$PWD/target/bench-peers
if [ ! -x "$peers/bin/hyper-mcp" ] || ! grep -qs "^\"hyper-mcp $HYPER_MCP " "$peers/.crates.toml"; then
    if ! pkg-config --exists openssl 2>/dev/null; then
        # hyper-mcp links OpenSSL (through native-tls).
        echo "bench: installing libssl-dev and pkg-config (apt-get), which hyper-mcp builds against"
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo=sudo
        $sudo apt-get install -y -qq libssl-dev pkg-config >/dev/null
    fi
    echo "bench: installing hyper-mcp $HYPER_MCP into $peers (cargo install; about 20 minutes on 2 cores, once)"
    CARGO_TARGET_DIR="$peers/hyper-mcp-build" \
        cargo install --quiet --locked --version "=$HYPER_MCP" --root "$peers" hyper-mcp
fi
if ! rustup target list --installed | grep -qx wasm32-wasip1; then
    echo "bench: adding the wasm32-wasip1 target (hyper-mcp's plugins)"
    rustup target add wasm32-wasip1
fi
cargo build --quiet --release --locked --target wasm32-wasip1 \
    --manifest-path host/benches/peers/extism-calc/Cargo.toml --target-dir "$peers/extism-calc"

cargo bench --quiet --workspace --bench compare
cargo bench --quiet --workspace --bench agent_turn
cargo bench --quiet --workspace --bench stores
cargo bench --quiet --workspace --bench code_mode
cargo bench --quiet --workspace --bench auth
cargo bench --quiet --workspace --bench mcp
mkdir -p docs/bench
cp target/bench/latency.svg docs/bench/latency.svg
echo "bench: chart copied to docs/bench/latency.svg"
