#!/usr/bin/env bash
# The main job, end to end on a fresh machine, with no API key: install
# prerequisites, build the host and the demo's two tools (Rust), start a
# local model server on 127.0.0.1 (llama.cpp with Qwen2.5-Coder,
# scripts/local-model.sh), and run the agent loop on a task
# that makes the model call tools: one succeeds, one is refused a capability
# it was never granted. Stops the model server it started.
#
#   scripts/quickstart.sh            # the demo task
#   scripts/quickstart.sh "PROMPT"   # your own task
set -euo pipefail
cd "$(dirname "$0")/.."
port=${TOOLHOST_QUICKSTART_PORT:-8093}

echo "== installing what the build needs (scripts/setup.sh --demo; skipped when done)"
scripts/setup.sh --demo
# --workspace: the same feature set as scripts/test.sh's build, so the tests
# reuse this compile of wasmtime instead of making their own.
if [ ! -x target/release/toolhost ]; then
    echo "== building toolhost (the first build compiles wasmtime: about 10 minutes on 2 cores)"
fi
cargo build --release --quiet --workspace --bin toolhost
echo "== building the demo's two tools (calc, http-get)"
# Only what the demo needs; scripts/build-tools.sh builds every tool.
scripts/build-tools.sh --demo
toolhost=target/release/toolhost
# Only the two tools the task needs, and deterministic sampling.
config=example-tools/demo.toml

echo; echo "== what each tool may touch (toolhost check)"
"$toolhost" check --config "$config"

echo; echo "== starting the local model on 127.0.0.1:$port"
started_here=0
if ! curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    started_here=1
fi
eval "$(scripts/local-model.sh start "$port")"
# Stop only a server this run started.
[ "$started_here" = 1 ] && trap 'scripts/local-model.sh stop "$port" >/dev/null 2>&1 || true' EXIT

prompt=${1:-$(cat example-tools/demo-task.txt)}
echo; echo "== toolhost run: $prompt"; echo
"$toolhost" run --config "$config" --base-url "$LLM_BASE_URL" --model "$LLM_MODEL_NAME" \
    --transcript target/quickstart-transcript.jsonl "$prompt"
echo; echo "(full transcript: target/quickstart-transcript.jsonl; show it again: $toolhost replay target/quickstart-transcript.jsonl)"

# Code mode's example (README: "Code mode"), after the demo: the code tool
# (JavaScript) and the tools example-tools/code.toml grants it.
[ "$started_here" = 1 ] && { scripts/local-model.sh stop "$port" >/dev/null 2>&1 || true; }
echo; echo "== building code mode's example: the code tool and the tools it may call (JavaScript, Python; about 2 minutes)"
# Best effort: the demo has run, and a machine without npm or pip lacks
# only this example, which the message says how to get.
if ! { scripts/setup.sh --code && scripts/build-tools.sh --code; }; then
    echo "quickstart: code mode's example was not built (above: why); the demo ran. Install Node.js 20+ with npm and" >&2
    echo "  Python 3 with pip, then run scripts/build-tools.sh --code" >&2
    exit 0
fi
echo "try: $toolhost call --config example-tools/code.toml run_code '{\"code\": \"return (await tools.calc({ expression: \\\"6*7\\\" })).value;\"}'"
