"""Options and output shared by the CLI commands."""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from campflow.config import CampflowConfig, load_config

console = Console(log_path=False)
err_console = Console(stderr=True)

ConfigOption = typer.Option(None, "--config", "-c", help="YAML config (default: built-in defaults)")
DbOption = typer.Option(None, "--db", help="DuckDB store (default: the workspace's campflow.duckdb)")
WORKSPACE_ENV = "CAMPFLOW_WORKSPACE"
WorkspaceOption = typer.Option(
    None,
    "--workspace",
    "-w",
    envvar=WORKSPACE_ENV,
    help="workspace folder: store, datasets, checkpoints (default: $CAMPFLOW_WORKSPACE, else the config's "
    "workspace.path, ./campflow-data)",
)
_workspace: contextvars.ContextVar[Path | None] = contextvars.ContextVar("workspace", default=None)


def config_with(path: Path | None, db: Path | None = None, **overrides: Any) -> CampflowConfig:
    """Load the config and apply command-line overrides (dotted keys; None means not given), the
    command's ``--workspace`` (or ``$CAMPFLOW_WORKSPACE``) included."""
    extra = dict(overrides)
    if db is not None:
        extra["workspace.db"] = db
    if extra.get("workspace.path") is None and _workspace.get() is not None:
        extra["workspace.path"] = _workspace.get()
    return load_config(path, extra)


def add_workspace_option(group: typer.Typer) -> None:
    """Give every command of ``group`` (and its sub-groups) that takes ``--db`` -- every command that
    touches a store -- the one ``--workspace`` option, read by :func:`config_with`. Commands that
    declare their own ``workspace`` parameter keep it."""
    for info in group.registered_commands:
        callback = info.callback
        if callback is None:
            continue
        params = inspect.signature(callback).parameters
        if "db" in params and "workspace" not in params:
            info.callback = _with_workspace(callback)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            add_workspace_option(sub.typer_instance)


def _with_workspace(command: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(command)
    option = inspect.Parameter(
        "workspace", inspect.Parameter.KEYWORD_ONLY, default=WorkspaceOption, annotation=Path | None
    )

    @functools.wraps(command)
    def run(*args: Any, workspace: Path | None = None, **kwargs: Any) -> Any:
        token = _workspace.set(workspace)
        try:
            return command(*args, **kwargs)
        finally:
            _workspace.reset(token)

    run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), option])  # type: ignore[attr-defined]
    return run


def bootcamp_names(option: str | None) -> list[str] | None:
    """The names of a ``--bootcamps`` option; None when it was not given (the config's list applies).

    Raises:
        UnknownBootcampError: the option names no bootcamp (``""``, ``","``): refused, not read as
            "the defaults".
    """
    if option is None:
        return None
    names = [s.strip() for s in option.split(",") if s.strip()]
    if not names:
        from campflow.errors import UnknownBootcampError

        raise UnknownBootcampError(
            f"--bootcamps {option!r} names no bootcamp; expected a comma-separated list such as calculator,maze, or all"
        )
    return names


_describe_stop: list[Callable[[], str]] = []


def when_stopped(describe: Callable[[], str]) -> None:
    """Have a stopped command say where it stopped and how to resume: ``describe()`` is asked after
    the command has unwound (so it may read the store)."""
    _describe_stop.append(describe)


def stop_message(signal_name: str) -> str:
    """The one line a command stopped by ``signal_name`` ends with."""
    for describe in reversed(_describe_stop):
        try:
            return f"stopped by {signal_name}: {describe()}"
        except Exception:  # noqa: BLE001  (the line must come out even if the store cannot say more)
            continue
    return f"stopped by {signal_name}"


def quiet_after_stop(signal_name: str) -> None:
    """Once a stop is asked for, the only output is the one line the command ends with: stderr and logging are
    silenced (Prefect reports the crash of every task and flow run at ERROR), and Prefect's API client
    gives up at the first refused connection, as the same signal may have taken down its ephemeral
    server (it would otherwise retry for a minute and end in a traceback)."""
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (click's "Aborted!", warnings: stopping.say writes the line)
    logging.disable(logging.CRITICAL)
    for logger in list(logging.root.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):  # Prefect's internal loggers ignore logging.disable
            logger.disabled = True
    settings = sys.modules.get("prefect.settings")  # not imported here: the signal may land inside its import
    if settings is not None and hasattr(settings, "get_current_settings"):
        settings.get_current_settings().client.max_retries = 0
    _no_connection_retries()


def _no_connection_retries() -> None:
    """The flow run's Prefect client tries to connect once more, not three times with back-off: Prefect sets
    its HTTP connection pool to retry a refused connection 3 times, and the crash report of a stopped run
    to an API server the same signal took down waited those out until the stop's deadline (8 s) ended the
    process. A server that is up gets the report at the first try."""
    context = sys.modules.get("prefect.context")
    sync_context = getattr(context, "SyncClientContext", None)
    try:
        current = sync_context.get() if sync_context is not None else None
        http = getattr(getattr(current, "client", None), "_client", None)
        transport = http._transport_for_url(http.base_url) if http is not None else None
    except Exception:  # noqa: BLE001  (Prefect's or httpx's insides changed: the deadline still ends it)
        return
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_retries"):
        pool._retries = 0


def resolve_local_model(cfg: CampflowConfig) -> None:
    """For ``policy.kind = local``, accept a checkpoint id as the model and turn it into its path (and
    say now, before a flow starts, if the ``train`` extra that runs local models is missing)."""
    if cfg.policy.kind != "local":
        return
    from campflow.extras import require

    require("train")
    from campflow.storage.workspace import Workspace
    from campflow.training.checkpoints import local_model_path

    model = cfg.policy.model
    if model and Path(model).exists():  # a folder: no store needed
        return
    cfg.policy.model = local_model_path(Workspace.from_config(cfg).store if model else None, model)


JsonOption = typer.Option(False, "--json", help="print the rows as JSON (a list of objects), for scripts")


def json_default(value: Any) -> Any:
    """What ``json.dumps`` writes for values it does not know: timestamps as ISO 8601, the rest as text."""
    import datetime as dt

    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


def print_json(value: Any) -> None:
    """``value`` as JSON on stdout, nothing else."""
    import json

    print(json.dumps(value, default=json_default, ensure_ascii=False, indent=1))


def print_rows(
    columns: list[str],
    rows: list[tuple[Any, ...]] | list[list[Any]],
    *,
    as_json: bool = False,
    title: str | None = None,
    below: tuple[str, ...] = (),
) -> None:
    """Rows as JSON (one object per row, every column) or, through :func:`~campflow.cli.display.print_table`,
    as a table that fits the terminal: the ``below`` columns (long text) are printed under it, one line per
    row and column, after the row's first cell; a table too wide even so is printed as ``key: value`` lines."""
    if as_json:
        print_json([dict(zip(columns, row)) for row in rows])
        return
    from campflow.cli.display import print_table

    print_table(console, columns, rows, title=title, below=below)
