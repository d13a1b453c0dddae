"""The ``campflow`` command line: thin calls of functions that are also usable from Python.

Heavy libraries (torch, transformers, trl, prefect) are imported inside the commands that need them,
so ``campflow --help`` and ``campflow sql`` start quickly.
"""

from __future__ import annotations

import signal
import sys

from campflow import stopping

with stopping.starting():  # a Ctrl-C while the command line loads: one line, not an import's traceback
    import typer

    from campflow.cli.common import add_workspace_option, quiet_after_stop, stop_message
    from campflow.errors import CampflowError

app = typer.Typer(
    name="campflow",
    help="Executable agent environments and a continuous-improvement pipeline for LLM agents.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(value: bool) -> None:
    if value:
        from campflow import __version__

        typer.echo(f"campflow {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print campflow's version and exit."
    ),
) -> None:
    """Executable agent environments and a continuous-improvement pipeline for LLM agents."""


# Modules whose import registers their commands on `app` (each is small and imports lazily).
COMMAND_MODULES = (
    "evaluate",
    "store",
    "bootcamps",
    "training",
    "synthesis",
    "imports",
    "own_bootcamp",
    "author",
    "loop",
    "env",
    "view",
    "housekeeping",
    "integrity",
    "proxy",
)


STOP_GRACE_S = 8.0  # from the first stop signal to the process's end, at most (the promise: under 10 s)


def main() -> None:
    """Console entry point: campflow errors become one line on stderr and a non-zero exit; Ctrl-C and
    SIGTERM unwind the command and say in one line where it stopped and how to resume."""
    import importlib

    # whatever happens after a stop signal, the process ends within the grace, saying where it stopped
    stopping.own_process(lambda name: f"error: {stop_message(name)}", STOP_GRACE_S)
    stopping.on_stop(quiet_after_stop)
    try:
        with stopping.signals():
            for name in COMMAND_MODULES:
                importlib.import_module(f"campflow.cli.{name}")
            add_workspace_option(app)
            app()
    except BaseException as exc:  # outside the block: a signal from here on ends the process with its line
        signal_name = stopping.received()
        if signal_name is None and isinstance(exc, KeyboardInterrupt):
            signal_name = "SIGINT"  # a Ctrl-C that arrived before the handler was installed
            stopping.request_stop(signal.SIGINT)
        finished = isinstance(exc, SystemExit) and not exc.code
        if signal_name is not None and not (finished and stopping.stopped_as_meant()):
            # whatever unwinding raised on the way out (typer's exit 130, a Prefect API server that the
            # same signal took down) is the stop's doing; a stop that landed as the work was ending ends
            # the same way: one line (it says what is stored) and the signal's exit code. Only a command
            # that a stop ends as meant (a server) exits 0.
            stopping.say(f"error: {stop_message(signal_name)}")
            stopping.end_stopped()
        if isinstance(exc, ModuleNotFoundError):
            from campflow.extras import missing_extra

            exc = missing_extra(exc) or exc  # a library of an extra: say which extra installs it
        if isinstance(exc, CampflowError):
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
        raise
    finally:  # the interpreter's shutdown follows: a stop from here on is said without the store
        stopping.exiting()
