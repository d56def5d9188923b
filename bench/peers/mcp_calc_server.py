"""The Python MCP server peer of the toolhost benchmark.

The same `calc` tool toolhost's benchmark calls, served by the official MCP
Python SDK's high-level server (`MCPServer`, mcp 2.x; it was `FastMCP` in
1.x) as a plain, unsandboxed Python function: what an agent developer writes
today to put a tool behind MCP. It answers like toolhost's calc component:
content "42", structuredContent {"value": 42.0}, an output schema, and a
tool error (isError) for an expression it cannot evaluate.

Run (in the venv tests/clients/run.sh builds from tests/clients/requirements.txt,
target/clients-venv):

    target/clients-venv/bin/python bench/peers/mcp_calc_server.py --stdio
    target/clients-venv/bin/python bench/peers/mcp_calc_server.py --http 8931

--http serves Streamable HTTP at http://127.0.0.1:PORT/mcp, stateless and
with JSON responses (no SSE stream, no session to keep): the SDK's fastest
HTTP configuration. Drive it with bench/peers/mcp_client_bench.py.
"""

from __future__ import annotations

import argparse
import ast
import math
import operator
from collections.abc import Callable
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

# The evaluator is bench/peers/toolnode.py's, so both Python peers do the same
# work per call: numbers, + - * / % **, unary signs and parentheses, as floats.
_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> float:
    """Walk the parsed expression, allowing only numbers and arithmetic (never eval())."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    # bool is an int subclass: refuse `True + 1`.
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"unsupported syntax: {ast.dump(node)[:60]}")


def evaluate(expression: str) -> float:
    """The value of `expression`, or ValueError saying why there is none."""
    # Same bound as the Rust tool's schema; it also keeps parsing shallow.
    if not 1 <= len(expression) <= 1000:
        raise ValueError("expression must be 1 to 1000 characters")
    try:
        # Floats, as in the Rust tool: `**` overflows to an error rather than
        # building a huge integer.
        value = _evaluate(ast.parse(expression, mode="eval"))
    except (SyntaxError, ZeroDivisionError, OverflowError, RecursionError) as error:
        raise ValueError(f"cannot evaluate {expression!r}: {error}") from error
    if not math.isfinite(value):
        raise ValueError(f"{expression!r} has no finite value")
    return value


def format_number(value: float) -> str:
    """Integers print without a fractional part ("42", not "42.0"), as in the Rust tool."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


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
