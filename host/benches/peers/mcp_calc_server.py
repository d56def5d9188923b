"""The Python MCP server peer of the toolhost benchmark.

The same `calc` tool toolhost's benchmark calls, served by the official MCP
Python SDK's high-level server (`MCPServer`, mcp 2.x; it was `FastMCP` in
1.x) as a plain, unsandboxed Python function: what an agent developer writes
today to put a tool behind MCP. It answers like toolhost's calc component:
content "42", structuredContent {"value": 42.0}, an output schema, and a
tool error (isError) for an expression it cannot evaluate.

Run (in the venv tests/clients/run.sh builds from tests/clients/requirements.txt,
target/clients-venv):

    target/clients-venv/bin/python host/benches/peers/mcp_calc_server.py --stdio
    target/clients-venv/bin/python host/benches/peers/mcp_calc_server.py --http 8931

--http serves Streamable HTTP at http://127.0.0.1:PORT/mcp, stateless and
with JSON responses (no SSE stream, no session to keep): the SDK's fastest
HTTP configuration. Drive it with host/benches/peers/mcp_client_bench.py.
"""

from __future__ import annotations

import argparse
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from arithmetic import evaluate, format_number  # noqa: E402


class CalcResult(BaseModel):
    """What `calc` returns as structured output."""

    value: float = Field(description="The value of the expression.")


server = MCPServer(
    "calc-peer",
    instructions="A Python peer of toolhost's calc tool, for benchmarks.",
    log_level="WARNING",
)


@server.tool(
    annotations=ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
)
def calc(
    expression: Annotated[str, Field(min_length=1, max_length=1000)],
) -> Annotated[CallToolResult, CalcResult]:
    """Evaluate an arithmetic expression: numbers, + - * / % **, parentheses. Example: "2 * (3 + 4) ** 2"."""
    try:
        value = evaluate(expression)
    except ValueError as error:
        # isError with the message for the model, as toolhost's invalid_input.
        raise ToolError(str(error)) from error
    return CallToolResult(
        content=[TextContent(type="text", text=format_number(value))],
        structured_content={"value": value},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stdio", action="store_true", help="serve MCP on stdin and stdout")
    where.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP at http://127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    if args.stdio:
        server.run("stdio")
    else:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=args.http,
            stateless_http=True,
            json_response=True,
        )


if __name__ == "__main__":
    main()
