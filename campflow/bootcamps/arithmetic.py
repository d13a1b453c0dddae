"""A safe arithmetic evaluator for the ``calculate`` tools: Python's parser, a whitelist, and bounds.

No ``eval``: the expression is parsed with :mod:`ast` and only numbers, parentheses, unary +/- and
the binary operators + - * / // % ** are evaluated, with limits on length, nesting, magnitude and
exponents so that no input can exhaust time or memory.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from campflow.bootcamps.messages import clip
from campflow.errors import ToolError

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 64
MAX_MAGNITUDE = 1e15
MAX_EXPONENT = 64

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression; raises ToolError naming what is wrong with it."""
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("^", "**")
    if not text:
        raise ToolError("empty expression; expected something like '12 + 7 * 3'")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression is {len(text)} characters long; at most {MAX_EXPRESSION_CHARS} are allowed")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        raise ToolError(f"cannot parse {clip(text, 63)!r} as arithmetic; use numbers, + - * / ( )") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise ToolError(f"expression has {nodes} parts; at most {MAX_NODES} are allowed")
    value = _eval(tree.body)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def format_number(value: int | float) -> str:
    """Render a result the way a calculator would: integers bare, floats to 10 significant digits."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return str(int(value))
    return f"{value:.10g}"


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {format_number(right)} is too large; at most {MAX_EXPONENT}")
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        except OverflowError:
            raise ToolError(f"result exceeds {MAX_MAGNITUDE:.0e}") from None
    raise ToolError(f"unsupported element {type(node).__name__} in expression; use numbers and + - * / ( )")


def _bounded(value: int | float | complex) -> int | float:
    if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
        raise ToolError("result is not a finite real number")
    if abs(value) > MAX_MAGNITUDE:
        raise ToolError(f"result exceeds {MAX_MAGNITUDE:.0e}")
    return value
