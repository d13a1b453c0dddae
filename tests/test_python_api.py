"""The Python API at the package top is what the commands call: one table (``campflow.API``) names
each function, every entry resolves, and the command line imports exactly those functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import campflow

CLI = Path(campflow.__file__).parent / "cli"


def _cli_imports() -> set[tuple[str, str]]:
    """(module, name) of every ``from campflow.x import name`` in the CLI's modules."""
    found = set()
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("campflow"):
                found.update((node.module, alias.name) for alias in node.names)
    return found


@pytest.mark.parametrize("name", sorted(campflow.API))
def test_every_api_name_resolves_to_the_function_its_module_defines(name: str) -> None:
    module, attribute = campflow.API[name]
    value = getattr(campflow, name)
    assert value is getattr(__import__(module, fromlist=[attribute]), attribute)
    assert value.__doc__, f"campflow.{name} needs a docstring"


@pytest.mark.parametrize("name", sorted(set(campflow.API) - {"Workspace"}))
def test_the_command_line_calls_the_api_function_itself(name: str) -> None:
    assert campflow.API[name] in _cli_imports(), f"no command imports campflow.{name} from {campflow.API[name][0]}"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'evaluat'"):
        campflow.evaluat  # noqa: B018


def test_importing_campflow_loads_no_heavy_package() -> None:
    code = (
        "import sys, campflow\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'prefect', 'duckdb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
