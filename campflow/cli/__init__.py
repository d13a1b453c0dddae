"""The ``campflow`` command line: thin calls of functions that are also usable from Python.

Heavy libraries (torch, transformers, trl, prefect) are imported inside the commands that need them,
so ``campflow --help`` and ``campflow sql`` start quickly.
"""

from __future__ import annotations

import sys

import typer

from campflow.errors import CampflowError

app = typer.Typer(
    name="campflow",
    help="Executable agent environments and a continuous-improvement pipeline for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


# Modules whose import registers their commands on `app` (each is small and imports lazily).
COMMAND_MODULES = ("evaluate", "store", "bootcamps", "training", "synthesis", "imports", "loop")


def main() -> None:
    """Console entry point: campflow errors become one line on stderr and a non-zero exit."""
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"campflow.cli.{name}")

    try:
        app()
    except CampflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
