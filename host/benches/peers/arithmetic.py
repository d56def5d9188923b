"""The arithmetic both Python peers of the benchmark evaluate (toolnode.py and
mcp_calc_server.py), so they do the same work per call as each other and as
toolhost's calc tool: numbers, + - * / % **, unary signs and parentheses, as
floats, never through eval().
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

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
