#!/usr/bin/env python3
"""Code mode against plain tool calls, side by side, on tasks that need many calls.

    python3 scripts/code-mode-eval.py                  # a scripted model (deterministic)
    python3 scripts/code-mode-eval.py --base-url http://127.0.0.1:8080/v1 --model qwen2.5-coder-1.5b
                                                       # a real model (scripts/local-model.sh serves one)

Each task runs twice through `toolhost run --json` on the same model and the same tools
(example-tools/code.toml's): once offered the tools themselves, once with `--code-mode` (offered
`run_code`). It prints, per task and mode (transcripts in target/code-mode-eval/): success (the answer checked against the true figures),
model calls, input and output tokens, the tool calls the model made, the calls its programs made,
and wall time.

The scripted model is an OpenAI-compatible server started here on 127.0.0.1. It behaves as a
good model would: plain, it calls every tool at once and then answers from the results; in code
mode, it writes one program. Its token counts are estimates (a token per 4 characters of what
toolhost sent and received), the same rule for both modes. A real model's are its own.

Needs `target/release/toolhost` and the tools (scripts/build-tools.sh).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "target" / "tools"
TOOLHOST = Path(os.environ.get("TOOLHOST_BIN", ROOT / "target" / "release" / "toolhost"))

QUANTITIES = [
    (3.1, "mi"), (10, "km"), (26.2, "mi"), (500, "m"), (42, "km"), (1.5, "mi"), (800, "cm"), (12, "km"),
    (0.75, "mi"), (9000, "mm"), (5, "km"), (13.1, "mi"), (2500, "m"), (7, "mi"), (350, "cm"), (21.1, "km"),
    (4, "mi"), (60, "m"), (8.8, "km"), (0.5, "mi"), (1200, "m"), (15, "km"), (2.2, "mi"), (90, "m"),
    (3, "km"), (6.2, "mi"), (45, "m"), (18, "km"), (9.5, "mi"), (700, "m"),
]
METRES = {"m": 1, "km": 1000, "cm": 0.01, "mm": 0.001, "mi": 1609.344}
# Twenty texts of distinct, varied words: a text of one word repeated traps a
# small model into repeating it until its output limit (measured: 2,048
# tokens of "word word …" a step, four minutes each on 2 threads).
VOCABULARY = (
    "river stone morning lantern quiet harbor copper meadow signal winter orchard ladder "
    "velvet canyon whistle amber pocket thunder garden silver bridge feather compass island "
    "marble shadow candle forest rocket pepper violin desert anchor cotton planet window"
).split()
TEXTS = [
    " ".join(VOCABULARY[(7 * i + 5 * j) % len(VOCABULARY)] for j in range(n))
    for i, n in enumerate([6, 20, 4, 17, 29, 11, 3, 32, 10, 14, 22, 2, 18, 26, 5, 13, 30, 7, 15, 24])
]

TASKS = {
    "convert": (
        "Convert each of these quantities to metres with convert_units, total them, and report the "
        "total and the three largest: " + ", ".join(f"{v} {u}" for v, u in QUANTITIES) + "."
    ),
    "words": (
        "Count the words of each of these 20 texts with word_count and report which text (1 to 20) "
        "is the longest and how many words it has:\n"
        + "\n".join(f"{i + 1}. {t}" for i, t in enumerate(TEXTS))
    ),
}


def truth(task: str) -> dict:
    if task == "convert":
        metres = sorted((v * METRES[u] for v, u in QUANTITIES), reverse=True)
        return {"total": sum(metres), "top": metres[:3]}
    counts = [len(t.split()) for t in TEXTS]
    best = max(range(len(counts)), key=lambda i: counts[i])
    return {"index": best + 1, "words": counts[best]}


def succeeded(task: str, answer: str) -> bool:
    """Whether the final answer states the true figures (numbers within 0.5%)."""
    numbers = [float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*\.?\d*", answer)]
    close = lambda want: any(abs(n - want) <= max(1e-6, abs(want) * 0.005) for n in numbers)
    t = truth(task)
    if task == "convert":
        return close(t["total"]) and all(close(x) for x in t["top"])
    return close(t["index"]) and close(t["words"])


# ---------------------------------------------------------------- the scripted model

PROGRAMS = {
    "convert": """const qs = %s;
const rs = await Promise.all(qs.map(([value, from]) => tools.convert_units({value, from, to: "m"})));
const metres = rs.map(r => r.value).sort((a, b) => b - a);
return {total: metres.reduce((s, m) => s + m, 0), top3: metres.slice(0, 3)};"""
    % json.dumps(QUANTITIES),
    "words": """const texts = %s;
const counts = await Promise.all(texts.map(text => tools.word_count({text})));
let best = 0;
counts.forEach((c, i) => { if (c.words > counts[best].words) best = i; });
return {longest: best + 1, words: counts[best].words};"""
    % json.dumps(TEXTS),
}


def scripted_reply(request: dict) -> dict:
    messages = request["messages"]
    offered = {t["function"]["name"] for t in request.get("tools", [])}
    user = next(m["content"] for m in messages if m["role"] == "user")
    task = "convert" if "convert_units" in user else "words"
    results = [m for m in messages if m["role"] == "tool"]
    if results:
        return {"role": "assistant", "content": final_answer(task, results)}
    if "run_code" in offered:
        calls = [("run_code", {"code": PROGRAMS[task]})]
    elif task == "convert":
        calls = [("convert_units", {"value": v, "from": u, "to": "m"}) for v, u in QUANTITIES]
    else:
        calls = [("word_count", {"text": t}) for t in TEXTS]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)
        ],
    }


def final_answer(task: str, results: list) -> str:
    texts = [r["content"] if isinstance(r["content"], str) else json.dumps(r["content"]) for r in results]
    if len(texts) == 1:  # the program's result
        value = json.loads(texts[0].split("\n")[0])
        if task == "convert":
            return f"Total: {value['total']:.3f} m. Largest: " + ", ".join(f"{m:.3f} m" for m in value["top3"])
        return f"Text {value['longest']} is the longest, with {value['words']} words."
    if task == "convert":
        # "3.1 mi = 4988.966 m": the model reads the figure after "=".
        metres = sorted((float(t.split("=")[-1].split()[0]) for t in texts), reverse=True)
        return f"Total: {sum(metres):.3f} m. Largest: " + ", ".join(f"{m:.3f} m" for m in metres[:3])
    counts = [int(t.split()[0]) if not t.startswith("{") else json.loads(t)["words"] for t in texts]
    best = max(range(len(counts)), key=lambda i: counts[i])
    return f"Text {best + 1} is the longest, with {counts[best]} words."


class Scripted(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        request = json.loads(body)
        message = scripted_reply(request)
        reply = {
            "id": "scripted",
            "object": "chat.completion",
            "model": "scripted",
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }],
            "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": len(json.dumps(message)) // 4},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


# ---------------------------------------------------------------- the runs

def manifest(base_url: str, model: str, work: Path, code: bool, max_steps: int) -> Path:
    """The manifest of one mode: plain offers the tools alone; code mode adds the code tool, which
    may call every other tool, so that `--code-mode` offers `run_code` alone."""
    path = work / ("code.toml" if code else "plain.toml")
    code_tool = f"""
[[tool]]
component = "{TOOLS / 'code.wasm'}"
call_tools = ["*"]
""" if code else ""
    path.write_text(f"""[model]
provider = "openai"
base_url = "{base_url}"
model = "{model}"
stream = false
max_steps = {max_steps}
# A small local model on 2 cores can take minutes for one answer.
timeout = "30m"
max_tokens = 2048
max_tool_calls_per_turn = 64
temperature = 0

[limits]
timeout = "20s"
fuel = 5_000_000_000
memory = "256MiB"
max_output = "32KiB"
{code_tool}
[[tool]]
component = "{TOOLS / 'calc.wasm'}"

[[tool]]
component = "{TOOLS / 'units-js.wasm'}"

[[tool]]
component = "{TOOLS / 'text-py.wasm'}"
stores = ["tally"]

[store.tally]
max_keys = 10
""")
    return path


def run(configs: dict, task: str, code_mode: bool) -> dict:
    config = configs[code_mode]
    transcript = config.parent / f"{task}-{'code' if code_mode else 'plain'}.jsonl"
    command = [str(TOOLHOST), "run", "--json", "--config", str(config), "--transcript", str(transcript)]
    if code_mode:
        command.append("--code-mode")
    started = time.monotonic()
    done = subprocess.run(command + [TASKS[task]], capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    finished = next((e for e in events if e["type"] == "finished"), None)
    if finished is None:
        sys.exit(f"toolhost run failed:\n{done.stderr}")
    usage = finished.get("usage", {})
    return {
        "ok": succeeded(task, finished["final_text"]),
        "model_calls": finished["steps"],
        "input": usage.get("input_tokens", 0),
        "output": usage.get("output_tokens", 0),
        "tool_calls": sum(e["type"] == "tool_result" for e in events),
        "program_calls": sum(e["type"] == "nested_tool_result" for e in events),
        "wall_s": wall,
        "answer": finished["final_text"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="a real model's OpenAI-compatible endpoint (default: the scripted model)")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--max-steps", type=int, default=40, help="model calls a run may make (default 40)")
    parser.add_argument("--mode", choices=["both", "plain", "code"], default="both",
                        help="run both modes (default), or one")
    parser.add_argument("--task", choices=["all", *TASKS], default="all", help="run every task (default), or one")
    parser.add_argument("--show-answers", action="store_true")
    args = parser.parse_args()
    for path in [TOOLHOST, *(TOOLS / f"{t}.wasm" for t in ["code", "calc", "units-js", "text-py"])]:
        if not path.exists():
            sys.exit(f"{path} is missing: run scripts/build-tools.sh (and cargo build --release)")
    work = ROOT / "target" / "code-mode-eval"
    work.mkdir(parents=True, exist_ok=True)
    base_url = args.base_url
    if base_url is None:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    configs = {code: manifest(base_url, args.model, work, code, args.max_steps) for code in (False, True)}
    # Compile every component once, outside the figures.
    subprocess.run([str(TOOLHOST), "check", "--config", str(configs[True])], capture_output=True, check=False)
    print(f"model: {args.model} at {base_url}; at most {args.max_steps} model calls a run; {time.strftime('%Y-%m-%d')}")
    print("| task | mode | success | model calls | input tokens | output tokens | tool calls | calls by the program | wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    modes = {"both": (False, True), "plain": (False,), "code": (True,)}[args.mode]
    for task in TASKS if args.task == "all" else [args.task]:
        for code_mode in modes:
            r = run(configs, task, code_mode)
            mode = "code mode" if code_mode else "plain"
            print(
                f"| {task} | {mode} | {'yes' if r['ok'] else 'no'} | {r['model_calls']} | {r['input']:,} | "
                f"{r['output']:,} | {r['tool_calls']} | {r['program_calls']} | {r['wall_s']:.2f} s |"
            )
            if args.show_answers or not r["ok"]:
                print(f"|   | answer: {r['answer'][:200]!r} | | | | | | | |")


if __name__ == "__main__":
    main()
