"""Approval over MCP: a tool whose manifest entry requires approval runs only
when the person at the client says yes (elicitation), and is refused
(`denied_by_user`) when they say no or when the client cannot be asked.

Runs in the mcp 1.x venv (target/clients-venv-langchain), whose
`ClientSession` takes an `elicitation_callback`; the server is
`toolhost serve --stdio` on a manifest where every probe call needs approval.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import ROOT
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

pytestmark = pytest.mark.anyio

ERROR_KEY = "toolhost/error"
MANIFEST = f"""
[[tool]]
component = "{ROOT / 'target/tools/probe.wasm'}"
approval = "always"
"""

Answer = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult | types.ErrorData]]


async def call_echo(toolhost: Path, tmp_path: Path, answer: Answer | None) -> tuple[dict[str, Any], list[str]]:
    """Call the probe's echo once; returns the result and the questions asked."""
    manifest = tmp_path / "toolhost.toml"
    manifest.write_text(MANIFEST)
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        asked.append(params.message)
        assert answer is not None
        return await answer(context, params)

    server = StdioServerParameters(command=str(toolhost), args=["--config", str(manifest), "serve", "--stdio"])
    with anyio.fail_after(60):
        async with stdio_client(server) as (read, write):
            callback = elicit if answer is not None else None
            async with ClientSession(read, write, elicitation_callback=callback) as session:
                await session.initialize()
                result = await session.call_tool("echo", {"text": "hi", "times": 1})
    return result.model_dump(by_alias=True, exclude_none=True), asked


async def test_a_yes_from_the_person_runs_the_call(toolhost: Path, tmp_path: Path) -> None:
    async def yes(_: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        schema = params.requestedSchema
        assert schema["properties"] == {"approve": {"type": "boolean", "title": "Run this call"}}, schema
        return types.ElicitResult(action="accept", content={"approve": True})

    result, asked = await call_echo(toolhost, tmp_path, yes)
    assert len(asked) == 1 and "echo" in asked[0], asked
    assert result["isError"] is False, result


async def test_a_no_from_the_person_refuses_the_call(toolhost: Path, tmp_path: Path) -> None:
    async def no(_: Any, __: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": False})

    result, asked = await call_echo(toolhost, tmp_path, no)
    assert len(asked) == 1
    assert result["isError"] is True
    assert result["_meta"][ERROR_KEY]["type"] == "denied_by_user", result


async def test_a_declined_question_refuses_the_call(toolhost: Path, tmp_path: Path) -> None:
    async def decline(_: Any, __: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    result, _ = await call_echo(toolhost, tmp_path, decline)
    assert result["_meta"][ERROR_KEY]["type"] == "denied_by_user", result


async def test_a_client_that_cannot_be_asked_is_refused_with_the_fix(toolhost: Path, tmp_path: Path) -> None:
    result, asked = await call_echo(toolhost, tmp_path, None)
    assert asked == []
    error = result["_meta"][ERROR_KEY]
    assert error["type"] == "denied_by_user", result
    assert "--yes" in error["message"], error
