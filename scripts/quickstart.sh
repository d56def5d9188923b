#!/usr/bin/env bash
# The main job, end to end on a fresh machine, with no API key: install
# prerequisites, build the host and the demo's two tools (Rust), start a
# local model server on 127.0.0.1 (llama.cpp with Qwen2.5-Coder,
# scripts/local-model.sh), and run the agent loop on a task
# that makes the model call tools: one succeeds, one is refused a capability
# it was never granted. Stops the model server it started. It builds only
# what the demo needs, and ends by saying how long each step took.
#
#   scripts/quickstart.sh            # the demo task
#   scripts/quickstart.sh "PROMPT"   # your own task
set -euo pipefail
cd "$(dirname "$0")/.."
port=${TOOLHOST_QUICKSTART_PORT:-8093}

# How long each step took, said at the end: where a first run's time goes.
steps="" step_started=$SECONDS
step_done() {
    steps+="${steps:+; }$1 $((SECONDS - step_started)) s"
    step_started=$SECONDS
}

echo "== installing what the build needs (scripts/setup.sh --demo; skipped when done)"
scripts/setup.sh --demo
step_done setup
# The model's install (a download, about 1.2 GB once) needs no CPU to
# speak of: it runs while toolhost compiles.
mkdir -p target
model_install_log=target/quickstart-model-install.log
# In a session of its own where setsid exists (util-linux), so that
# stopping it stops its pip too.
session=$(command -v setsid || true)
$session scripts/local-model.sh install >/dev/null 2>"$model_install_log" &
model_install=$!
trap 'kill -TERM -- -"$model_install" 2>/dev/null || kill "$model_install" 2>/dev/null || true' EXIT
# --workspace: the same feature set as scripts/test.sh's build, so the tests
# reuse this compile of wasmtime instead of making their own.
if [ ! -x target/release/toolhost ]; then
    echo "== building toolhost (the first build compiles wasmtime and the server: about 17 minutes on 2 cores;"
    echo "   the model downloads meanwhile, log: $model_install_log)"
else
    echo "== building toolhost (only what changed since the last build)"
fi
cargo build --release --quiet --workspace --bin toolhost
step_done "toolhost build"
echo "== building the demo's two tools (calc, http-get)"
# Only what the demo needs; scripts/build-tools.sh builds every tool.
scripts/build-tools.sh --demo
step_done "tools build"
toolhost=target/release/toolhost
# Only the two tools the task needs, and deterministic sampling.
config=example-tools/demo.toml

echo; echo "== what each tool may touch (toolhost check)"
"$toolhost" check --config "$config"

echo; echo "== starting the local model on 127.0.0.1:$port"
# A failed install is tried again by `start`, which says why if it fails.
trap - EXIT
if kill -0 "$model_install" 2>/dev/null; then
    echo "(waiting for the model's download to finish: $model_install_log)"
fi
wait "$model_install" || echo "quickstart: the model's install in the background failed (log: $model_install_log); trying again" >&2
started_here=0
if ! curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    started_here=1
fi
eval "$(scripts/local-model.sh start "$port")"
# Stop only a server this run started.
[ "$started_here" = 1 ] && trap 'scripts/local-model.sh stop "$port" >/dev/null 2>&1 || true' EXIT
step_done "check and model start"

prompt=${1:-$(cat example-tools/demo-task.txt)}
echo; echo "== toolhost run: $prompt"; echo
"$toolhost" run --config "$config" --base-url "$LLM_BASE_URL" --model "$LLM_MODEL_NAME" \
    --transcript target/quickstart-transcript.jsonl "$prompt"
step_done "agent run"
echo; echo "(full transcript: target/quickstart-transcript.jsonl; show it again: $toolhost replay target/quickstart-transcript.jsonl)"
echo "(code mode's example, README \"Code mode\": scripts/setup.sh --code && scripts/build-tools.sh --code, about a minute)"
echo "quickstart: done in $SECONDS s ($steps)"
