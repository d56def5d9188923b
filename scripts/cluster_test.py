"""The cluster test's load and its checks (issue 27), run by scripts/cluster-test.sh.

The shell script starts Redis, three `toolhost serve` replicas and HAProxy on
127.0.0.1 and passes their addresses and pids here. This driver, with the
official MCP Python SDK (2025-11-25 sessions, `mode="legacy"`) and httpx on
the HTTP API, all through HAProxy:

1. rate: a third principal, carol, floods `calc` for RATE_WINDOW_S; the
   calls the replicas admit together must be the limiter's budget (burst +
   rate x time) within 10 %.
2. mixed load: alice and bob, each with MCP sessions and HTTP workers,
   `remember` (a note, and a per-user counter in the store: a non-idempotent
   effect), `recall` and `calc`, for LOAD_S; one replica is SIGKILLed part-way.
3. checks: every call got exactly one answer; no `remember` ran twice (the
   store's counter against the answers); each principal sees only its own
   notes; the surviving replicas' RSS stayed flat.
4. tasks: a long call started as a durable task on the replica that is
   killed reads `failed`, with its reason, on the survivors (its tool is not
   idempotent, so it is never run again); a task finished before the kill
   reads back whole; bob cannot tell alice's task ids from ids nobody has.

Prints the figures, and exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

# How long carol floods calc, and with how many workers: enough to offer far
# more than the rate, so the limiter alone decides what is admitted.
RATE_WINDOW_S = 4.0
RATE_WORKERS = 16
# The mixed load's length, when the replica is killed in it, and each
# worker's pause between calls (keeping each principal under its rate).
LOAD_S = 10.0
KILL_AT_S = 4.0
PAUSE_S = 0.3
# The longest any one call may take to be answered: more is a hang.
CALL_DEADLINE_S = 20.0
# How long a dead replica's task may read `working` on the survivors: its
# lease ([serve.tasks] lease in scripts/cluster-test.sh), with room.
TASK_SETTLE_S = 20.0
# Allowed error of the limiter across replicas.
RATE_TOLERANCE = 0.10
# RSS may grow by this much over the mixed load (after warm-up) and still
# count as flat: allocator slack, not a leak.
RSS_SLACK_KIB = 24 * 1024
RSS_SLACK_RATIO = 0.25

WRITTEN = re.compile(r"\((\d+) notes written so far\)")


@dataclass
class Tally:
    """Every call's one answer, by call id, and what the answers say."""

    answers: dict[str, list[str]] = field(default_factory=dict)
    issued: int = 0
    # `remember` calls that succeeded, with the counter each saw, and those
    # whose outcome the client cannot know (the replica died mid-call).
    remembered: dict[str, list[int]] = field(default_factory=lambda: {"alice": [], "bob": []})
    unknown_remember: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)

    def start(self) -> str:
        self.issued += 1
        call_id = f"call-{self.issued}"
        self.answers[call_id] = []
        return call_id

    def answer(self, call_id: str, kind: str) -> None:
        self.answers[call_id].append(kind)
        self.kinds[kind] += 1


def http_outcome(response: httpx.Response) -> tuple[str, str]:
    """The kind of an HTTP API answer, and its text."""
    if response.status_code == 429:
        return "refused_rate", ""
    if response.status_code in (502, 503, 504):
        return "lost_replica", ""
    if response.status_code != 200:
        return f"http_{response.status_code}", response.text
    [message] = response.json()
    return ("tool_error" if message.get("is_error") else "ok"), str(message.get("content"))


async def http_call(client: httpx.AsyncClient, url: str, token: str, name: str, args: dict[str, Any], tally: Tally) -> str:
    call_id = tally.start()
    body = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]
    try:
        response = await client.post(
            f"{url}/v1/tool_calls", json=body, headers={"authorization": f"Bearer {token}"}, timeout=CALL_DEADLINE_S
        )
        kind, text = http_outcome(response)
    except httpx.TimeoutException:
        kind, text = "no_answer", ""
    except httpx.TransportError:
        kind, text = "lost_replica", ""
    tally.answer(call_id, kind)
    return kind + ("" if not text else f":{text}")


async def mcp_call(session: Client, name: str, args: dict[str, Any], tally: Tally) -> str:
    call_id = tally.start()
    text = ""
    try:
        with_deadline = session.call_tool(name, args, read_timeout_seconds=CALL_DEADLINE_S)
        result = await asyncio.wait_for(with_deadline, CALL_DEADLINE_S + 1)
        kind = "tool_error" if getattr(result, "is_error", None) else "ok"
        text = " ".join(getattr(block, "text", "") for block in result.content)
    except MCPError as error:
        code = error.error.code
        kind = "refused_rate" if code == -32029 else "lost_replica" if code in (-32603, -32600) else f"mcp_{code}"
    except (TimeoutError, asyncio.TimeoutError):
        kind = "no_answer"
    tally.answer(call_id, kind)
    return kind + ("" if not text else f":{text}")


def note_remembered(who: str, outcome: str, tally: Tally) -> None:
    """Record what one `remember` call's answer says of its execution."""
    if outcome.startswith("ok:"):
        match = WRITTEN.search(outcome)
        if match:
            tally.remembered[who].append(int(match.group(1)))
    elif outcome.startswith("lost_replica") or outcome.startswith("no_answer"):
        tally.unknown_remember[who] += 1


async def worker(call, who: str, stop_at: float, tally: Tally, prefix: str) -> None:
    """One client's loop: remember a new note, recall it, compute."""
    n = 0
    while time.monotonic() < stop_at:
        n += 1
        topic = f"{who}-{prefix}-{n}"
        outcome = await call("remember", {"topic": topic, "text": f"{who} was here ({n})"})
        note_remembered(who, outcome, tally)
        await call("recall", {"topic": topic})
        await call("calc", {"expression": f"{n}*2"})
        await asyncio.sleep(PAUSE_S)


async def mcp_worker(url: str, token: str, who: str, stop_at: float, tally: Tally, index: int) -> None:
    http = create_mcp_http_client(headers={"authorization": f"Bearer {token}"})
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(http)
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        session = await stack.enter_async_context(Client(transport, mode="legacy"))
        assert session.protocol_version == "2025-11-25", session.protocol_version
        await worker(lambda n, a: mcp_call(session, n, a, tally), who, stop_at, tally, f"mcp{index}")


async def http_worker(url: str, token: str, who: str, stop_at: float, tally: Tally, index: int) -> None:
    async with httpx.AsyncClient() as client:
        await worker(lambda n, a: http_call(client, url, token, n, a, tally), who, stop_at, tally, f"http{index}")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def rate_phase(url: str, token: str) -> tuple[int, int, float]:
    """Carol floods calc through HAProxy: (admitted, refused, seconds)."""
    admitted = refused = 0
    other: Counter[str] = Counter()
    start = time.monotonic()
    stop_at = start + RATE_WINDOW_S
    last = start

    async def flood(client: httpx.AsyncClient) -> None:
        nonlocal admitted, refused, last
        while time.monotonic() < stop_at:
            body = [{"id": "c", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "1+1"}'}}]
            response = await client.post(f"{url}/v1/tool_calls", json=body, headers={"authorization": f"Bearer {token}"})
            last = time.monotonic()
            if response.status_code == 200:
                admitted += 1
            elif response.status_code == 429:
                refused += 1
            else:
                other[str(response.status_code)] += 1

    async with httpx.AsyncClient(timeout=CALL_DEADLINE_S) as client:
        await asyncio.gather(*(flood(client) for _ in range(RATE_WORKERS)))
    if other:
        raise AssertionError(f"the flood got answers other than 200 and 429: {dict(other)}")
    return admitted, refused, last - start


async def calls_served(url: str, token: str) -> int:
    """The tool calls a replica has run, from its /metrics."""
    async with httpx.AsyncClient(timeout=CALL_DEADLINE_S) as client:
        response = await client.get(f"{url}/metrics", headers={"authorization": f"Bearer {token}"})
        response.raise_for_status()
    total = 0.0
    for line in response.text.splitlines():
        if line.startswith("toolhost_tool_calls_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def start_task(url: str, token: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Start one call as a durable task on `url` (one replica, or HAProxy);
    a refusal for the principal's rate is waited out as it asks."""
    body = [{"id": f"task-{name}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]
    async with httpx.AsyncClient(timeout=CALL_DEADLINE_S) as client:
        for _ in range(50):
            response = await client.post(f"{url}/v1/tool_calls?async=1", json=body,
                                         headers={"authorization": f"Bearer {token}"})
            if response.status_code != 429:
                break
            await asyncio.sleep(float(response.headers.get("retry-after", "1")))
        if response.status_code != 202:
            raise AssertionError(f"a task was not started: {response.status_code} {response.text}")
        (task,) = response.json()
        return task


async def get_task(url: str, token: str, task_id: str) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=CALL_DEADLINE_S) as client:
        response = await client.get(f"{url}/v1/tasks/{task_id}", headers={"authorization": f"Bearer {token}"})
        return response.status_code, response.json()


async def check_tasks(url: str, tokens: dict[str, str], doomed: dict[str, Any], done: dict[str, Any]) -> list[str]:
    """The tasks started before the kill, read through HAProxy by the
    surviving replicas: the one the killed replica ran ends `failed` with
    a reason (its tool is not idempotent: it is never run twice), the one
    finished before stays `completed`, and neither exists for another
    principal (the same 404 as an id nobody has)."""
    failures = []
    deadline = time.monotonic() + TASK_SETTLE_S
    while True:
        status, task = await get_task(url, tokens["alice"], doomed["id"])
        if status != 200 or task.get("state") != "working" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    reason = (task.get("error") or {}).get("message", "")
    print(f"tasks: the killed replica's task reads {task.get('state')!r} on the survivors: {reason!r}")
    if status != 200 or task.get("state") != "failed" or "stopped" not in reason:
        failures.append(f"the killed replica's task is not failed with a clear reason: {status} {task}")
    status, finished = await get_task(url, tokens["alice"], done["id"])
    print(f"tasks: a task finished before the kill reads {finished.get('state')!r}")
    if status != 200 or finished.get("state") != "completed" or str(finished.get("result", {}).get("content")) != "42":
        failures.append(f"a finished task is not read back whole: {status} {finished}")
    unknown = await get_task(url, tokens["bob"], "0" * 32)
    for task_id in (doomed["id"], done["id"]):
        foreign = await get_task(url, tokens["bob"], task_id)
        if foreign[0] != 404 or foreign[1] != unknown[1]:
            failures.append(f"bob reads alice's task {task_id}: {foreign}")
    print(f"tasks: bob asking for alice's tasks gets {foreign[0]}, as for an id nobody has ({unknown[0]})")
    return failures


async def final_count(url: str, token: str, who: str) -> int:
    """The per-user write counter after one more `remember` (which adds 1)."""
    async with httpx.AsyncClient(timeout=CALL_DEADLINE_S) as client:
        body = [{"id": "last", "type": "function",
                 "function": {"name": "remember",
                              "arguments": json.dumps({"topic": f"{who}-final", "text": "last"})}}]
        response = await client.post(f"{url}/v1/tool_calls", json=body, headers={"authorization": f"Bearer {token}"})
        response.raise_for_status()
        text = response.json()[0]["content"]
        match = WRITTEN.search(str(text))
        if not match:
            raise AssertionError(f"remember answered without its counter: {text}")
        return int(match.group(1)) - 1


async def topics(url: str, token: str) -> list[str]:
    async with httpx.AsyncClient(timeout=CALL_DEADLINE_S) as client:
        body = [{"id": "list", "type": "function", "function": {"name": "recall", "arguments": '{"topic": ""}'}}]
        response = await client.post(f"{url}/v1/tool_calls", json=body, headers={"authorization": f"Bearer {token}"})
        response.raise_for_status()
        text = str(response.json()[0]["content"])
        return [t.strip() for t in text.removeprefix("Notes:").split(",") if t.strip()]


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="HAProxy's address, http://127.0.0.1:PORT")
    parser.add_argument("--pids", required=True, help="the replicas' pids, comma-separated")
    parser.add_argument("--ports", required=True, help="the replicas' ports, in the same order")
    parser.add_argument("--rate", type=float, required=True, help="per-principal calls per second")
    parser.add_argument("--burst", type=int, required=True)
    args = parser.parse_args()
    tokens = {who: os.environ[f"{who.upper()}_TOKEN"] for who in ("alice", "bob", "carol")}
    pids = [int(p) for p in args.pids.split(",")]
    failures: list[str] = []

    admitted, refused, seconds = await rate_phase(args.url, tokens["carol"])
    expected = args.burst + args.rate * seconds
    error = (admitted - expected) / expected
    print(f"rate: carol offered {admitted + refused} calls in {seconds:.2f} s across {len(pids)} replicas; "
          f"admitted {admitted}, refused {refused}; the budget is {expected:.0f} "
          f"(burst {args.burst} + {args.rate:g}/s); error {error:+.1%}")
    if abs(error) > RATE_TOLERANCE:
        failures.append(f"the limiter admitted {admitted}, {error:+.1%} off its budget {expected:.0f}")

    victim, survivors = pids[1], [pids[0]] + pids[2:]
    victim_url = f"http://127.0.0.1:{args.ports.split(',')[1]}"
    rss_start = {pid: rss_kib(pid) for pid in survivors}
    tally = Tally()
    stop_at = time.monotonic() + LOAD_S
    workers = []
    for who in ("alice", "bob"):
        for i in range(2):
            workers.append(mcp_worker(args.url, tokens[who], who, stop_at, tally, i))
            workers.append(http_worker(args.url, tokens[who], who, stop_at, tally, i))

    done = await start_task(args.url, tokens["alice"], "calc", {"expression": "6*7"})
    doomed: dict[str, Any] = {}

    async def kill() -> None:
        await asyncio.sleep(KILL_AT_S)
        # A long call, as a task, on the replica about to die.
        doomed.update(await start_task(victim_url, tokens["alice"], "sleep", {"n": 8000}))
        served = await calls_served(victim_url, tokens["alice"])
        os.kill(victim, signal.SIGKILL)
        print(f"kill: SIGKILL to replica pid {victim} at {KILL_AT_S:g} s into the load, "
              f"after it had run {served} tool calls (the rate phase's included)")

    results = await asyncio.gather(kill(), *workers, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            failures.append(f"a client failed: {result!r}")
    rss_end = {pid: rss_kib(pid) for pid in survivors}

    many = {call: kinds for call, kinds in tally.answers.items() if len(kinds) != 1}
    print(f"calls: {tally.issued} issued, {sum(len(k) for k in tally.answers.values())} answers; "
          + ", ".join(f"{kind} {n}" for kind, n in sorted(tally.kinds.items())))
    if many:
        failures.append(f"{len(many)} calls did not get exactly one answer: {list(many.items())[:5]}")
    if tally.kinds["no_answer"]:
        failures.append(f"{tally.kinds['no_answer']} calls got no answer within {CALL_DEADLINE_S:g} s")
    unexpected = {k: n for k, n in tally.kinds.items()
                  if k not in ("ok", "tool_error", "refused_rate", "lost_replica", "no_answer")}
    if unexpected:
        failures.append(f"answers of unexpected kinds: {unexpected}")

    for who in ("alice", "bob"):
        executed = await final_count(args.url, tokens[who], who)
        seen = tally.remembered[who]
        unknown = tally.unknown_remember[who]
        print(f"exactly once: {who}'s counter says {executed} remember calls ran; {len(seen)} answered ok, "
              f"{unknown} lost with the killed replica (may or may not have run)")
        if not len(seen) <= executed <= len(seen) + unknown:
            failures.append(f"{who}: {executed} executions for {len(seen)} ok answers and {unknown} unknown")
        if len(set(seen)) != len(seen):
            failures.append(f"{who}: two answers saw the same counter value: a call ran twice")

    own = {who: await topics(args.url, tokens[who]) for who in ("alice", "bob")}
    for who, other in (("alice", "bob"), ("bob", "alice")):
        foreign = [t for t in own[who] if not t.startswith(f"{who}-")]
        print(f"notes: {who} sees {len(own[who])} notes, {len(foreign)} of them not {who}'s")
        if foreign or not own[who]:
            failures.append(f"{who} sees notes that are not theirs ({foreign[:3]}) or none")

    for pid in survivors:
        start, end = rss_start[pid], rss_end[pid]
        bound = max(RSS_SLACK_KIB, int(start * RSS_SLACK_RATIO))
        print(f"rss: replica pid {pid}: {start / 1024:.1f} MiB -> {end / 1024:.1f} MiB "
              f"({(end - start) / 1024:+.1f} MiB; bound +{bound / 1024:.0f} MiB)")
        if end - start > bound:
            failures.append(f"replica {pid}'s RSS grew {(end - start) / 1024:.1f} MiB over the load")

    failures += await check_tasks(args.url, tokens, doomed, done)
    for failure in failures:
        print(f"FAIL: {failure}")
    print("cluster test: " + ("failed" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
