"""The calculator's safe evaluator: arithmetic only, bounded in size and magnitude."""

from __future__ import annotations

import pytest

from campflow.bootcamps.arithmetic import evaluate, format_number
from campflow.errors import ToolError


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("8 / 2", 4),
        ("-3 + 1", -2),
        ("2 ** 10", 1024),
        ("17 // 5", 3),
        ("17 % 5", 2),
        ("3 × 4", 12),
        ("12 ÷ 4", 3),
        ("2^3", 8),
        ("  42  ", 42),
    ],
)
def test_arithmetic_evaluates(expr: str, value: float) -> None:
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("__import__('os').system('ls')", "unsupported element"),
        ("open('/etc/passwd')", "unsupported element"),
        ("x + 1", "unsupported element Name"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "exponent"),
        ("10 ** 16", "exceeds"),
        ("1" * 30, "exceeds"),
        ("1 +", "cannot parse"),
        ("", "empty expression"),
        ("1+" * 150 + "1", "characters long"),
        ("1+" * 40 + "1", "parts"),
        ("-" * 150 + "1", "parts"),
        ("[1, 2]", "unsupported element List"),
        ("1e400", "not a finite"),
        ("'a' * 3", "unsupported element"),
    ],
)
def test_anything_but_bounded_arithmetic_is_a_tool_error(expr: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        evaluate(expr)


def test_results_render_like_a_calculator() -> None:
    assert format_number(4.0) == "4" and format_number(3.5) == "3.5" and format_number(1 / 3) == "0.3333333333"
