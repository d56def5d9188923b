"""The official MCP Python SDK against `toolhost serve`, over stdio and
Streamable HTTP.

It runs under either major version of the SDK, in the venv it is run from
(tests/clients/run.sh runs it in both):

- mcp 2.x (target/clients-venv): the `Client` front door, in both protocol
  eras: `legacy` (the `initialize` handshake, 2025-11-25) and `modern` (the
  SDK's default `auto` mode: a `server/discover` probe, then the stateless
  2026-07-28 revision, which the test requires toolhost to negotiate).
- mcp 1.x (target/clients-venv-langchain, the version langchain-mcp-adapters
  needs): `ClientSession` and `initialize`, the only era 1.x speaks.

Every result is compared in its wire shape (`model_dump(by_alias=True)`:
`isError`, `structuredContent`, `_meta`), which is the same in both SDKs.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from conftest import PATIENT_MANIFEST, metric_samples, serve_stdio_args
from mcp import ClientSession, StdioServerParameters, types

try:  # mcp 2.x
    from mcp.shared.exceptions import MCPError as McpError
except ImportError:  # mcp 1.x
    from mcp.shared.exceptions import McpError  # type: ignore[no-redef,attr-defined]

pytestmark = pytest.mark.anyio

MCP_MAJOR = int(version("mcp").split(".")[0])
ERAS = ["legacy", "modern"] if MCP_MAJOR >= 2 else ["legacy"]
HANDSHAKE_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
ERROR_KEY = "toolhost/error"
# What the probe's spin and sleep report before they work.
PROBE_PROGRESS = {"spinning", "sleeping"}
# No test here needs longer: the slowest waits for the manifest's 2 s timeout.
TEST_DEADLINE_S = 60.0


def wire(model: Any) -> dict[str, Any]:
    """A result or tool as it travels: camelCase keys, `_meta`, no unset fields."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def text_of(result: dict[str, Any]) -> str:
    assert [block["type"] for block in result["content"]] == ["text"], result
    return result["content"][0]["text"]


def typed_error(result: dict[str, Any]) -> dict[str, Any]:
    """The typed error a failed result carries, after checking its shape."""
    assert result["isError"] is True, result
    error = result.get("_meta", {}).get(ERROR_KEY)
    assert isinstance(error, dict), f"no _meta[{ERROR_KEY!r}] in {result}"
    assert isinstance(error["type"], str) and error["type"], error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["retryable"], bool), error
    return error


class Connection:
    """One connected client, the same to the tests whichever SDK made it."""

    def __init__(self, caller: Any, session: ClientSession, protocol_version: str, server_name: str | None):
        # mcp 2.x: the `Client`; mcp 1.x: the `ClientSession` itself.
        self._caller = caller
        self.session = session
        self.protocol_version = protocol_version
        self.server_name = server_name
        # Over HTTP, whether the server runs a tool instance now (its
        # /metrics); None over stdio, where the tool's own progress says so.
        self.running: Callable[[], Awaitable[bool]] | None = None

    async def list_tools(self) -> dict[str, dict[str, Any]]:
        result = await self._caller.list_tools()
        return {tool.name: wire(tool) for tool in result.tools}

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return wire(await self._caller.call_tool(name, arguments))

    async def abandon(self, name: str, arguments: dict[str, Any]) -> None:
        """Start a call of the probe's spin or sleep, give up on it once it
        runs, not while it is still on its way, and let the server know the
        way a user of this SDK does. Over HTTP the server's /metrics says the
        call runs, so the request is a plain one (on 2026-07-28, the fast
        path's); over stdio the tool's own progress report says so (the
        host's, that a call waits for its component's compilation, does not
        count). The connection's deadline is the patience."""
        # mcp 1.x sends nothing when a caller gives up: the notification below
        # names the request id the call is about to take.
        request_id = None if MCP_MAJOR >= 2 else self.session._request_id  # noqa: SLF001
        reported = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if message in PROBE_PROGRESS:
                reported.set()

        async def give_up(scope: anyio.CancelScope) -> None:
            if self.running is None:
                await reported.wait()
            else:
                while not await self.running():
                    await anyio.sleep(0.02)
            scope.cancel()

        progress = {"progress_callback": on_progress} if self.running is None else {}
        async with anyio.create_task_group() as tasks:
            with anyio.CancelScope() as scope:
                tasks.start_soon(give_up, scope)
                # mcp 2.x cancels for us: `notifications/cancelled` on stdio and
                # legacy HTTP; on 2026-07-28 HTTP it aborts the request's POST.
                await self._caller.call_tool(name, arguments, **progress)
            cancelled = scope.cancelled_caught
            tasks.cancel_scope.cancel()
        assert cancelled, f"{name} answered before it was cancelled"
        if MCP_MAJOR >= 2:
            return
        await self.session.send_notification(
            types.ClientNotification(
                types.CancelledNotification(
                    params=types.CancelledNotificationParams(requestId=request_id, reason="the test gave up")
                )
            )
        )


Elicit = Callable[[Any, types.ElicitRequestParams], Any]


@asynccontextmanager
async def connect(
    transport: str,
    era: str,
    toolhost: Path,
    mcp_url: str | None,
    elicit: Elicit | None = None,
    stdio_args: list[str] | None = None,
) -> AsyncIterator[Connection]:
    """A connection; `elicit` answers the server's questions (elicitation).
    Over stdio, the server runs `stdio_args` (default: the test manifest)."""
    stdio = StdioServerParameters(command=str(toolhost), args=stdio_args or serve_stdio_args())
    with anyio.fail_after(TEST_DEADLINE_S):
        async with AsyncExitStack() as stack:
            if MCP_MAJOR >= 2:
                from mcp import Client

                server: Any = mcp_url if transport == "http" else stdio
                mode = "legacy" if era == "legacy" else "auto"
                client = await stack.enter_async_context(Client(server, mode=mode, elicitation_callback=elicit))
                info = client.server_info
                connection = Connection(client, client.session, client.protocol_version, info and info.name)
            else:
                if transport == "http":
                    from mcp.client.streamable_http import streamable_http_client

                    streams = await stack.enter_async_context(streamable_http_client(mcp_url))
                else:
                    from mcp.client.stdio import stdio_client

                    streams = await stack.enter_async_context(stdio_client(stdio))
                session = await stack.enter_async_context(
                    ClientSession(streams[0], streams[1], elicitation_callback=elicit)
                )
                init = await session.initialize()
                connection = Connection(session, session, init.protocolVersion, init.serverInfo.name)
            yield connection


Connector = Callable[[], AbstractAsyncContextManager[Connection]]


def connector(request: pytest.FixtureRequest, toolhost: Path, transport: str, era: str) -> Connector:
    """Opens a connection over `transport` in `era`; stdio starts a server per
    connection, HTTP uses the session's server."""
    url = request.getfixturevalue("mcp_url") if transport == "http" else None
    return lambda: connect(transport, era, toolhost, url)


TRANSPORTS_AND_ERAS = [(transport, era) for transport in ("stdio", "http") for era in ERAS]


@pytest.fixture(params=TRANSPORTS_AND_ERAS, ids=lambda p: f"{p[0]}-{p[1]}")
def open_connection(request: pytest.FixtureRequest, toolhost: Path) -> Connector:
    """Opens a connection over this test's transport, in this test's era."""
    return connector(request, toolhost, *request.param)


@pytest.fixture(params=TRANSPORTS_AND_ERAS, ids=lambda p: f"{p[0]}-{p[1]}")
def open_patient_connection(request: pytest.FixtureRequest, toolhost: Path) -> Connector:
    """Opens a connection to a server on tests/clients/patient.toml: the probe
    alone, one call at a time, with a deadline no test waits out."""
    transport, era = request.param
    url = request.getfixturevalue("patient_mcp_url") if transport == "http" else None
    stdio_args = serve_stdio_args(PATIENT_MANIFEST)

    @asynccontextmanager
    async def opened() -> AsyncIterator[Connection]:
        async with connect(transport, era, toolhost, url, stdio_args=stdio_args) as conn:
            if url is not None:
                conn.running = lambda: instances_running(url.removesuffix("/mcp"))
            yield conn

    return opened


async def instances_running(base: str) -> bool:
    """Whether the server at `base` runs a tool instance now (its /metrics)."""
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as http:
        text = (await http.get(f"{base}/metrics")).text
    return any(
        name == "toolhost_instances_in_flight" and value >= 1 for name, _, value in metric_samples(text)
    )


async def test_initialize_and_list_tools(open_connection: Connector) -> None:
    async with open_connection() as conn:
        if conn.protocol_version != MODERN_VERSION:
            assert conn.protocol_version == HANDSHAKE_VERSION
        if conn.server_name is not None:
            assert conn.server_name == "toolhost"
        tools = await conn.list_tools()
    assert {"calc", "echo", "sleep", "spin", "panic"} <= tools.keys()
    calc = tools["calc"]
    assert calc["description"]
    assert calc["inputSchema"]["type"] == "object"
    assert calc["inputSchema"]["properties"]["expression"]["type"] == "string"
    assert calc["inputSchema"]["required"] == ["expression"]
    # An object schema: the SDK validates structuredContent against it.
    assert calc["outputSchema"]["type"] == "object"
    assert calc["outputSchema"]["properties"]["value"]["type"] == "number"
    assert calc["annotations"]["readOnlyHint"] is True
    assert calc["annotations"].get("destructiveHint") is False


@pytest.mark.skipif(MCP_MAJOR < 2, reason="mcp 1.x speaks only the handshake era")
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_modern_era_is_negotiated(transport: str, toolhost: Path, request: pytest.FixtureRequest) -> None:
    """mcp 2.x's default (`auto`) ends on the stateless revision, not a fallback to `initialize`."""
    async with connector(request, toolhost, transport, "modern")() as conn:
        assert conn.protocol_version == MODERN_VERSION
        assert conn.session.discover_result is not None
        assert MODERN_VERSION in conn.session.discover_result.supported_versions
        assert text_of(await conn.call("calc", {"expression": "6*7"})) == "42"


async def test_call_calc(open_connection: Connector) -> None:
    async with open_connection() as conn:
        await conn.list_tools()
        result = await conn.call("calc", {"expression": "6*7"})
    assert result["isError"] is False
    assert text_of(result) == "42"
    assert result["structuredContent"] == {"value": 42}
    assert ERROR_KEY not in result.get("_meta", {})


async def test_call_before_listing(open_connection: Connector) -> None:
    """Calling a tool never listed on this connection: the SDK lists the tools
    itself to validate structuredContent against the output schema."""
    async with open_connection() as conn:
        result = await conn.call("calc", {"expression": "2*(3+4)"})
    assert text_of(result) == "14"
    assert result["structuredContent"] == {"value": 14}


async def test_tool_error_is_a_result_with_its_typed_error(open_connection: Connector) -> None:
    async with open_connection() as conn:
        result = await conn.call("calc", {"expression": "1/0"})
    error = typed_error(result)
    assert error["type"] == "tool_error"
    assert error["tool_kind"] == "invalid_input"
    assert error["retryable"] is True
    assert "structuredContent" not in result
    assert text_of(result).startswith("Error: tool 'calc' failed (invalid_input)")
    assert error["message"] in text_of(result)


async def test_bad_expression(open_connection: Connector) -> None:
    async with open_connection() as conn:
        result = await conn.call("calc", {"expression": "2+"})
    error = typed_error(result)
    assert (error["type"], error["tool_kind"]) == ("tool_error", "invalid_input")


async def test_invalid_arguments(open_connection: Connector) -> None:
    async with open_connection() as conn:
        result = await conn.call("calc", {"expr": "1"})
    error = typed_error(result)
    assert error["type"] == "invalid_arguments"
    assert error["retryable"] is True
    assert "expression" in error["message"]


async def test_timeout(open_connection: Connector) -> None:
    async with open_connection() as conn:
        started = time.monotonic()
        result = await conn.call("spin", {})
        elapsed = time.monotonic() - started
    error = typed_error(result)
    assert error["type"] == "timeout"
    assert error["retryable"] is True
    # Never sooner than the deadline (no load makes a call end early); how
    # much later depends on the machine, and the typed error says why it ended.
    assert elapsed >= 2.0, f"spin ended after {elapsed:.2f} s; the manifest's timeout is 2 s"


async def test_trap(open_connection: Connector) -> None:
    async with open_connection() as conn:
        result = await conn.call("panic", {})
    error = typed_error(result)
    assert error["type"] == "trap"
    assert error["retryable"] is False


async def test_unknown_tool_is_a_protocol_error(open_connection: Connector) -> None:
    async with open_connection() as conn:
        with pytest.raises(McpError) as raised:
            await conn.call("no_such_tool", {})
        assert raised.value.error.code == types.INVALID_PARAMS == -32602
        assert "no_such_tool" in raised.value.error.message
        assert "calc" in raised.value.error.message  # it lists the tools that exist
        # The connection survives it.
        assert text_of(await conn.call("calc", {"expression": "1+1"})) == "2"


async def test_cancellation_stops_the_call(open_patient_connection: Connector) -> None:
    """A cancelled call frees its instance: the probe runs one call at a time
    with a ten-minute deadline, so the next probe call is answered (within the
    test's deadline) only if the spin, cancelled once it runs, really
    stopped. No clock decides it."""
    async with open_patient_connection() as conn:
        await conn.list_tools()
        await conn.abandon("spin", {})
        result = await conn.call("echo", {"text": "still here", "times": 1})
        assert result["isError"] is False, result
        assert text_of(result) == "still here"


async def test_sleep_is_cancelled_too(open_patient_connection: Connector) -> None:
    """A call waiting in a host call (wasi:clocks sleep), not burning fuel, stops as well."""
    async with open_patient_connection() as conn:
        await conn.list_tools()
        await conn.abandon("sleep", {"n": 600_000})
        assert text_of(await conn.call("echo", {"text": "x", "times": 2})) == "xx"


async def test_parallel_calls(open_connection: Connector) -> None:
    n = 16
    results: dict[int, dict[str, Any]] = {}
    async with open_connection() as conn:
        await conn.list_tools()

        async def one(i: int) -> None:
            results[i] = await conn.call("calc", {"expression": f"{i}*{i}+1"})

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
    assert sorted(results) == list(range(n))
    for i, result in results.items():
        assert result["isError"] is False, result
        assert text_of(result) == str(i * i + 1)
        assert result["structuredContent"] == {"value": i * i + 1}


@pytest.mark.skipif(
    MCP_MAJOR < 2,
    reason="mcp 1.x runs the elicitation callback inside its receive loop: a callback that waits holds up every answer",
)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_call_waiting_on_the_client_does_not_hold_up_the_next(
    transport: str, toolhost: Path, request: pytest.FixtureRequest
) -> None:
    """Calls on one connection run at once: the probe's ask_confirm waits for the
    person's answer, which this client gives only once a calc call, sent while it
    waits, has been answered. Served one at a time, calc would never be answered
    and the test would fail at its deadline; no clock decides it.

    In the handshake era the server holds the waiting call (it asks with an
    elicitation request); the 2026-07-28 era holds nothing while the client
    answers (the question comes back in the result), so only this era can tell."""
    asked = anyio.Event()
    calc_answered = anyio.Event()

    async def elicit(_: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert "Wait?" in params.message, params.message
        asked.set()
        await calc_answered.wait()
        return types.ElicitResult(action="accept", content={"confirm": True})

    url = request.getfixturevalue("mcp_url") if transport == "http" else None
    answers: dict[str, str] = {}
    async with connect(transport, "legacy", toolhost, url, elicit) as conn:
        await conn.list_tools()

        async def waiting() -> None:
            answers["ask_confirm"] = text_of(await conn.call("ask_confirm", {"question": "Wait?"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            await asked.wait()
            answers["calc"] = text_of(await conn.call("calc", {"expression": "6*7"}))
            calc_answered.set()
    assert answers == {"calc": "42", "ask_confirm": "confirm=true"}


async def test_content_blocks_pass_the_sdks_types(open_connection: Connector) -> None:
    """An image and a resource link (contract 0.2), read through the SDK's own
    result types: the shapes are what MCP clients accept."""
    async with open_connection() as conn:
        result = await conn.call("media", {"size": 16})
    assert result["isError"] is False, result
    kinds = [block["type"] for block in result["content"]]
    assert kinds == ["text", "image", "resource_link"], result
    image = result["content"][1]
    assert image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
    assert result["content"][2]["uri"] == "https://example.org/r"


async def test_progress_reaches_the_sdks_callback(open_connection: Connector) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with open_connection() as conn:
        result = wire(await conn._caller.call_tool("report_progress", {"n": 2}, progress_callback=on_progress))  # noqa: SLF001
    assert text_of(result) == "done"
    assert [r[0] for r in reports] == [0.0, 1.0, 2.0], reports
    assert reports[1] == (1.0, 2.0, "step 1")
