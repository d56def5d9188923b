"""A load generator for MCP servers: `calc("6*7")` over and over, timed.

It drives any MCP server with the official MCP Python SDK's client (mcp 2.x
`Client`), so toolhost (`toolhost serve`) and the Python peer
(host/benches/peers/mcp_calc_server.py) are measured the same way, through the
client most Python agents use. Each of C concurrent clients has its own
connection (its own server process over stdio, its own session over HTTP)
and calls in a closed loop: one call, wait for the answer, the next. With
--shared, the C workers share one connection instead, so one server process
(stdio) or one session (HTTP) carries C calls at once.

Run (in the venv tests/clients/run.sh builds, target/clients-venv):

    PY=target/clients-venv/bin/python
    $PY host/benches/peers/mcp_client_bench.py --stdio -- $PY host/benches/peers/mcp_calc_server.py --stdio
    $PY host/benches/peers/mcp_client_bench.py --stdio -- target/release/toolhost --config example-tools/toolhost.toml serve --stdio
    $PY host/benches/peers/mcp_client_bench.py --url http://127.0.0.1:8931/mcp      # a server already listening
    $PY host/benches/peers/mcp_client_bench.py --tool calc-calc --stdio -- \
        target/bench-peers/bin/hyper-mcp --config-file CONFIG.json    # hyper-mcp, as host/benches/peer starts it

Options: --calls N (timed calls per concurrency level, default 2000),
--concurrency 1,16 (levels), --warmup N (untimed calls per client first),
--mode auto|legacy|2026-07-28 (how the client negotiates; auto, the SDK's
default, probes server/discover and falls back to initialize), --shared,
--tool NAME (the name calc is listed under: calc, or hyper-mcp's PLUGIN-calc).

Prints one JSON object on stdout, progress on stderr:

    {"target": ..., "transport": "stdio"|"http", "protocol_version": ..., "versions": {...},
     "runs": [{"concurrency": 1, "calls": N, "p50_us": .., "p99_us": .., "calls_per_s": ..}, ...]}

Every answer is checked ("42", not isError); a wrong one ends the run with
an error, so a broken server cannot post a fast figure.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from contextlib import AsyncExitStack
from importlib.metadata import version
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

EXPRESSION = "6*7"
EXPECTED = "42"


def percentile(sorted_ns: list[int], p: float) -> int:
    """Same rule as toolnode.py and host/benches/calls.rs: index round((n - 1) * p), halves rounded up."""
    return sorted_ns[math.floor((len(sorted_ns) - 1) * p + 0.5)]


def check(result: Any) -> None:
    text = result.content[0].text if result.content else None
    if result.is_error or text != EXPECTED:
        raise SystemExit(f"calc({EXPRESSION!r}) answered {result!r}, not {EXPECTED!r}")


def make_client(args: argparse.Namespace) -> Client:
    server: Any
    if args.url:
        server = args.url
    else:
        server = StdioServerParameters(command=args.command[0], args=args.command[1:])
    # No response cache: only tools/list would use it, and it is not timed.
    return Client(server, mode=args.mode, cache=None)


async def run_level(args: argparse.Namespace, concurrency: int) -> tuple[dict[str, Any], str]:
    """Open the clients, warm them up, then time `args.calls` calls spread over `concurrency` workers."""
    samples: list[int] = []
    async with AsyncExitStack() as stack:
        n_clients = 1 if args.shared else concurrency
        clients: list[Client] = []

        async def connect() -> None:
            clients.append(await stack.enter_async_context(make_client(args)))

        # Connect one by one: C server processes starting at once would
        # only time the machine's start-up contention.
        for _ in range(n_clients):
            await connect()
        protocol = clients[0].protocol_version
        for client in clients:
            # List first, as agents do: the SDK validates structured content
            # against the listed output schema on every call.
            await client.list_tools()
        workers = [clients[0 if args.shared else i] for i in range(concurrency)]

        async def warm(client: Client) -> None:
            for _ in range(args.warmup):
                check(await client.call_tool(args.tool, {"expression": EXPRESSION}))

        async with anyio.create_task_group() as tg:
            for client in workers:
                tg.start_soon(warm, client)

        # Split the calls as evenly as possible over the workers.
        shares = [args.calls // concurrency + (1 if i < args.calls % concurrency else 0) for i in range(concurrency)]

        async def work(client: Client, n: int) -> None:
            for _ in range(n):
                started = time.perf_counter_ns()
                result = await client.call_tool(args.tool, {"expression": EXPRESSION})
                samples.append(time.perf_counter_ns() - started)
                check(result)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for client, n in zip(workers, shares):
                tg.start_soon(work, client, n)
        elapsed = time.perf_counter() - started
    samples.sort()
    return (
        {
            "concurrency": concurrency,
            "clients": n_clients,
            "calls": len(samples),
            "p50_us": round(percentile(samples, 0.50) / 1000, 1),
            "p99_us": round(percentile(samples, 0.99) / 1000, 1),
            "mean_us": round(sum(samples) / len(samples) / 1000, 1),
            "calls_per_s": round(len(samples) / elapsed, 1),
        },
        protocol,
    )


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    protocol = None
    for concurrency in args.concurrency:
        print(f"concurrency {concurrency}: {args.calls} calls", file=sys.stderr)
        run, protocol = await run_level(args, concurrency)
        print(f"  {run}", file=sys.stderr)
        runs.append(run)
    return {
        "system": "mcp-python-client",
        "target": args.url or " ".join(args.command),
        "transport": "http" if args.url else "stdio",
        "mode": args.mode,
        "shared_connection": args.shared,
        "protocol_version": protocol,
        "versions": {"python": platform.python_version(), "mcp": version("mcp")},
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a Streamable HTTP endpoint, e.g. http://127.0.0.1:8931/mcp")
    where.add_argument("--stdio", action="store_true", help="spawn the command after -- and talk over its stdio")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per concurrency level (default 2000)")
    parser.add_argument(
        "--concurrency",
        default="1,16",
        type=lambda s: [int(c) for c in s.split(",")],
        help="comma-separated concurrency levels (default 1,16)",
    )
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per worker first (default 20)")
    parser.add_argument("--mode", default="auto", help="auto (default), legacy, or a modern protocol version")
    parser.add_argument("--shared", action="store_true", help="all workers share one connection")
    parser.add_argument("--tool", default="calc", help="the name calc is listed under (default calc)")
    parser.add_argument("command", nargs="*", help="with --stdio: the server command (after --)")
    args = parser.parse_args()
    if args.stdio and not args.command:
        parser.error("--stdio needs the server command after --")
    if args.url and args.command:
        parser.error("--url takes no command")
    if args.calls < 1 or any(c < 1 for c in args.concurrency):
        parser.error("--calls and every --concurrency level must be at least 1")
    print(json.dumps(anyio.run(main_async, args)))


if __name__ == "__main__":
    main()
