#!/usr/bin/env bash
# The main job, end to end on a fresh machine: install prerequisites, build
# the host and the example tools (Rust, Python, JavaScript), show what each
# tool may touch, then run a batch of tool calls through the sandbox: some
# succeed, and some are refused or fail, each with its typed reason.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --quiet -p toolhost
scripts/build-tools.sh
toolhost=target/release/toolhost
config=example-tools/toolhost.toml

echo; echo "== toolhost check: what each tool may touch"
"$toolhost" check --config "$config"

echo; echo "== toolhost call calc: one call"
"$toolhost" call --config "$config" calc '{"expression":"6*7"}'

echo; echo "== toolhost call --batch: six calls at once, in three languages"
"$toolhost" call --config "$config" --batch - <<'JSON'
[
  {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{\"expression\": \"2 * (3 + 4) ^ 2\"}"}},
  {"id": "call_2", "name": "word_count", "args": {"text": "toolhost runs every call\nin a fresh sandbox"}},
  {"id": "call_3", "name": "convert_units", "args": {"value": 21, "from": "C", "to": "F"}},
  {"id": "call_4", "name": "read_file", "args": {"path": "/data/notes.txt"}},
  {"id": "call_5", "name": "read_file", "args": {"path": "/etc/passwd"}},
  {"id": "call_6", "name": "http_get", "args": {"url": "http://169.254.169.254/latest/meta-data/"}}
]
JSON
