#!/usr/bin/env bash
# The main job, end to end on a fresh machine, with no API key: install
# prerequisites, build the host and the example tools (Rust, Python,
# JavaScript), start a local model server on 127.0.0.1 (llama.cpp with
# Qwen2.5-Coder, scripts/local-model.sh), and run the agent loop on a task
# that makes the model call tools: one succeeds, one is refused a capability
# it was never granted. Stops the model server it started.
#
#   scripts/quickstart.sh            # the demo task
#   scripts/quickstart.sh "PROMPT"   # your own task
set -euo pipefail
cd "$(dirname "$0")/.."
port=${TOOLHOST_QUICKSTART_PORT:-8093}

scripts/setup.sh
# --workspace: the same feature set as scripts/test.sh's build, so the tests
# reuse this compile of wasmtime instead of making their own.
cargo build --release --quiet --workspace --bin toolhost
scripts/build-tools.sh
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
