#!/usr/bin/env bash
# How often the quickstart's demo lands: runs the demo task N times against
# the local model (scripts/local-model.sh; started here unless one is
# already up on the port) and counts the runs whose final answer states both
# results: the product 7006652, and that the metadata request was refused.
# Prints each run's time and outcome, then the success rate.
#
#   scripts/demo-rate.sh        # 10 runs
#   scripts/demo-rate.sh 3      # 3 runs
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
usage() { echo "demo-rate: give a number of runs from 1 to 1000, e.g. scripts/demo-rate.sh 10" >&2; exit 2; }
case $runs in
    ''|*[!0-9]*) usage ;;
esac
# Base 10, so that 08 is eight; at most four digits, so that it fits.
[ "${#runs}" -le 4 ] || usage
runs=$((10#$runs))
[ "$runs" -ge 1 ] && [ "$runs" -le 1000 ] || usage
port=${TOOLHOST_DEMO_PORT:-8095}
toolhost=target/release/toolhost
[ -x "$toolhost" ] || { echo "demo-rate: build first: scripts/quickstart.sh (or cargo build --release)" >&2; exit 2; }

started_here=0
curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 || started_here=1
eval "$(scripts/local-model.sh start "$port")"
[ "$started_here" = 1 ] && trap 'scripts/local-model.sh stop "$port" >/dev/null 2>&1 || true' EXIT

task=$(cat example-tools/demo-task.txt)
out=target/demo-rate
mkdir -p "$out"
landed=0
total_ms=0
for i in $(seq 1 "$runs"); do
    begin=$(date +%s%N)
    "$toolhost" run --config example-tools/demo.toml --base-url "$LLM_BASE_URL" \
        --json "$task" >"$out/run-$i.jsonl" 2>"$out/run-$i.err" || true
    ms=$(( ($(date +%s%N) - begin) / 1000000 ))
    total_ms=$((total_ms + ms))
    verdict=$(python3 - "$out/run-$i.jsonl" <<'PY'
import json, re, sys
events = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
finished = next((e for e in events if e["type"] == "finished"), None)
if finished is None:
    print("no finish"); sys.exit()
text = finished["final_text"]
results = [e["message"] for e in events if e["type"] == "tool_result"]
ran = any(m["name"] == "calc" and m["content"] == "7006652" for m in results)
refused = any(m["name"] == "http_get" and (m.get("error") or {}).get("type") == "capability_denied" for m in results)
states_product = re.search(r"7,?006,?652", text) is not None
states_refusal = re.search(r"refus|denied|not allowed|not permitted|capability", text, re.I) is not None
end = finished["end"]["kind"]
missing = [what for what, ok in [("answered", end == "answered"), ("calc ran", ran),
    ("http_get refused", refused), ("answer states the product", states_product),
    ("answer states the refusal", states_refusal)] if not ok]
print("ok" if not missing else "missed: " + ", ".join(missing) + f" (end: {end})")
PY
)
    [ "$verdict" = ok ] && landed=$((landed + 1))
    printf 'run %2d: %4d.%d s  %s\n' "$i" $((ms / 1000)) $((ms % 1000 / 100)) "$verdict"
done
avg=$((total_ms / runs))
printf 'demo-rate: %d of %d runs landed; %d.%d s per run on average (transcripts in %s)\n' \
    "$landed" "$runs" $((avg / 1000)) $((avg % 1000 / 100)) "$out"
