"""The LangGraph ToolNode side of the toolhost benchmark.

ToolNode is what most agent developers use today to run an LLM's tool calls:
it dispatches them to plain, unsandboxed Python functions. This script times
it on the same trivial tool toolhost's Rust example uses, `calc("6*7")`, for
batches of 1, 8 and 64 tool calls in one AIMessage, and measures sustained
throughput with batches of 64 back to back.

Run (after `python3 -m venv target/bench-venv &&
target/bench-venv/bin/pip install -r host/benches/peers/requirements.txt`):

    target/bench-venv/bin/python host/benches/peers/toolnode.py [--iterations N]

--iterations N times N invokes for every batch size instead of the defaults.
Prints one JSON object on stdout and progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from importlib.metadata import version
from typing import Any

# Tracing would send every invoke to LangSmith over the network: keep it off
# even when the caller's environment turns it on, so only dispatch is timed.
for _name in ("LANGSMITH_TRACING", "LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING", "LANGCHAIN_TRACING_V2"):
    os.environ[_name] = "false"

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402

from arithmetic import evaluate, format_number  # noqa: E402

# Default invokes per batch size: enough samples for a p99 while the whole run
# (warm-up and throughput included) takes 20-35 s on 2 cores.
DEFAULT_ITERATIONS: dict[int, int] = {1: 4000, 8: 1500, 64: 300}
# One call at a time with a pause between calls, as toolhost's tools are
# timed too: a machine that idles between calls is slower to answer.
APART_SECONDS = 0.005
APART_ITERATIONS = 1000
THROUGHPUT_BATCH = 64
THROUGHPUT_SECONDS = 3.0
EXPRESSION = "6*7"
EXPECTED = "42"

# Outside a graph, ToolNode.invoke raises "Missing required config key 'N/A' for
# 'tools'" unless given the Runtime a graph would inject (langgraph issue #6397):
# pass an empty one, as a graph with no context, store or stream does.
RUNTIME: Runtime = Runtime()

@tool
def calc(expression: str) -> str:
    """Evaluate an arithmetic expression: numbers, + - * / % **, parentheses. Example: "2 * (3 + 4) ** 2"."""
    return format_number(evaluate(expression))


def tool_calls_message(size: int) -> AIMessage:
    """An AIMessage as a model would send it, asking for `size` calc calls at once."""
    return AIMessage(
        content="",
        tool_calls=[
            {"name": "calc", "args": {"expression": EXPRESSION}, "id": f"call_{i}", "type": "tool_call"}
            for i in range(size)
        ],
    )


def check_output(output: Any, size: int) -> None:
    """Fail loudly unless the node answered every call, with "42", in order."""
    messages = output["messages"]
    if len(messages) != size or not all(isinstance(m, ToolMessage) for m in messages):
        raise SystemExit(f"batch {size}: expected {size} ToolMessages, got {messages!r}")
    for i, message in enumerate(messages):
        if message.content != EXPECTED or message.tool_call_id != f"call_{i}":
            raise SystemExit(f"batch {size}: unexpected answer {message!r}")


def percentile(sorted_ns: list[int], p: float) -> int:
    """Same rule as host/benches/calls.rs: index round((n - 1) * p), halves rounded up."""
    return sorted_ns[math.floor((len(sorted_ns) - 1) * p + 0.5)]


def time_batch(node: ToolNode, size: int, iterations: int, pause: float = 0.0) -> dict[str, Any]:
    """Time `iterations` invokes of one batch of `size` calls, after a warm-up,
    each `pause` seconds after the one before (untimed), as an agent's calls
    come a model's answer apart."""
    state = {"messages": [tool_calls_message(size)]}
    check_output(node.invoke(state, runtime=RUNTIME), size)
    for _ in range(max(1, iterations // 10)):
        node.invoke(state, runtime=RUNTIME)
    samples: list[int] = []
    for _ in range(iterations):
        if pause:
            time.sleep(pause)
        started = time.perf_counter_ns()
        node.invoke(state, runtime=RUNTIME)
        samples.append(time.perf_counter_ns() - started)
    samples.sort()
    return {
        "size": size,
        "p50_us": round(percentile(samples, 0.50) / 1000, 1),
        "p99_us": round(percentile(samples, 0.99) / 1000, 1),
        "mean_us": round(sum(samples) / len(samples) / 1000, 1),
        "iterations": iterations,
    }


def throughput(node: ToolNode) -> float:
    """Calls per second with batches of THROUGHPUT_BATCH invoked back to back."""
    state = {"messages": [tool_calls_message(THROUGHPUT_BATCH)]}
    calls = 0
    started = time.perf_counter()
    deadline = started + THROUGHPUT_SECONDS
    while time.perf_counter() < deadline:
        node.invoke(state, runtime=RUNTIME)
        calls += THROUGHPUT_BATCH
    return calls / (time.perf_counter() - started)


def dispatch_note() -> str:
    """How ToolNode runs a batch, read from langgraph/prebuilt/tool_node.py (ToolNode._func)."""
    # ThreadPoolExecutor's default when max_workers is None (Python 3.8+).
    workers = min(32, (os.cpu_count() or 1) + 4)
    return (
        "ToolNode.invoke runs sync tools through langchain_core's get_executor_for_config, "
        "which opens a new ContextThreadPoolExecutor for every invoke (max_workers = config "
        f"max_concurrency, unset here, so Python's default min(32, cpu_count + 4) = {workers}, "
        "threads started as calls are submitted), maps the calls over it with a copied "
        "contextvars context each, and shuts the pool down before returning, even for a "
        "single call; the GIL keeps pure-Python tools like calc from running in parallel."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, help="invokes per batch size (default: 4000, 1500, 300)")
    args = parser.parse_args()
    if args.iterations is not None and args.iterations < 1:
        parser.error("--iterations must be at least 1")

    node = ToolNode([calc])
    batches = []
    for size, default in DEFAULT_ITERATIONS.items():
        iterations = args.iterations or default
        print(f"batch {size}: {iterations} invokes", file=sys.stderr)
        batches.append(time_batch(node, size, iterations))
        print(f"  {batches[-1]}", file=sys.stderr)
    print(f"one call at a time, {APART_SECONDS * 1000:.0f} ms apart: {APART_ITERATIONS} invokes", file=sys.stderr)
    apart = time_batch(node, 1, args.iterations or APART_ITERATIONS, APART_SECONDS)
    print(f"  {apart}", file=sys.stderr)
    print(f"throughput: batches of {THROUGHPUT_BATCH} for {THROUGHPUT_SECONDS:.0f} s", file=sys.stderr)
    calls_per_s = throughput(node)
    print(f"  {calls_per_s:.0f} calls/s", file=sys.stderr)

    result = {
        "system": "langgraph-toolnode",
        "versions": {
            "python": platform.python_version(),
            "langgraph": version("langgraph"),
            "langchain_core": version("langchain-core"),
        },
        "batches": batches,
        "throughput_calls_per_s": round(calls_per_s, 1),
        "single_call_p50_us": batches[0]["p50_us"],
        "single_call_apart": apart,
        "notes": dispatch_note(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
