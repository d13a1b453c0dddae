"""Options and output shared by the CLI commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from campflow.bootcamps.messages import clip
from campflow.config import CampflowConfig, load_config

console = Console(log_path=False)
err_console = Console(stderr=True)

ConfigOption = typer.Option(None, "--config", "-c", help="YAML config (default: built-in defaults)")
DbOption = typer.Option(None, "--db", help="DuckDB store (default: the workspace's campflow.duckdb)")


def config_with(path: Path | None, db: Path | None = None, **overrides: Any) -> CampflowConfig:
    """Load the config and apply command-line overrides (dotted keys; None means not given)."""
    extra = dict(overrides)
    if db is not None:
        extra["workspace.db"] = db
    return load_config(path, extra)


def resolve_local_model(cfg: CampflowConfig) -> None:
    """For ``policy.kind = local``, accept a checkpoint id as the model and turn it into its path."""
    if cfg.policy.kind != "local":
        return
    from campflow.errors import ConfigError

    if not cfg.policy.model:
        raise ConfigError("policy.model is required for a local policy: a model folder or a checkpoint id "
                          "(see `campflow sql \"SELECT model_id, kind FROM checkpoints\"`)")
    if Path(cfg.policy.model).exists():
        return
    from campflow.storage.workspace import Workspace
    from campflow.training.checkpoints import get

    cfg.policy.model = str(get(Workspace.from_config(cfg).store, cfg.policy.model).path)


def table(columns: list[str], rows: list[tuple[Any, ...]] | list[list[Any]], title: str | None = None) -> Table:
    """A rich table of ``rows``; numbers right-aligned, floats to four places."""
    t = Table(title=title, header_style="bold")
    numeric = [bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
               for i in range(len(columns))]
    for col, num in zip(columns, numeric):
        t.add_column(str(col), justify="right" if num else "left", overflow="fold")
    for row in rows:
        t.add_row(*[_cell(v) for v in row])
    return t


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.4e}"
    return clip(str(value), 200)
