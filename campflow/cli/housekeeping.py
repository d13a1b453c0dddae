"""``campflow gc``: remove checkpoint folders nothing needs and the scratch of dead runs (a dry run by default)."""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, config_with, console
from campflow.cli.display import print_table


@app.command()
def gc(
    apply: bool = typer.Option(False, "--yes", "--apply", help="delete (without it: list what would go)"),
    keep: int = typer.Option(3, "--keep", min=0, help="also keep the newest K checkpoints"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Remove checkpoints that are neither promoted (nor in a promoted model's lineage), nor a cycle's start,
    nor needed by an unfinished cycle, nor the newest K, and .partial folders of dead runs."""
    cfg = config_with(config, db)
    if not cfg.workspace.db_path.exists():
        console.print(f"nothing to collect: no store at {cfg.workspace.db_path}")
        return
    from campflow.storage.workspace import Workspace
    from campflow.training.pruning import collect_garbage

    ws = Workspace.from_config(cfg)
    done = collect_garbage(ws.store, ws.path, cfg.workspace.db_path, keep_newest=keep, apply=apply)
    if done.removals:
        print_table(
            console,
            ["path", "kind", "MB", "why it goes"],
            [(str(r.path), r.kind, f"{r.bytes / 1e6:.1f}", r.reason) for r in done.removals],
            title="removed" if done.applied else "would remove (dry run)",
        )
    kept = ", ".join(f"{n} {why}" for why, n in sorted(done.kept.items())) or "none"
    console.print(f"kept: {kept}")
    if done.applied:
        console.print(f"freed {done.bytes:,} bytes ({done.bytes / 1e6:.1f} MB) in {len(done.removals)} folder(s)")
    else:
        console.print(
            f"would free {done.bytes:,} bytes ({done.bytes / 1e6:.1f} MB) in {len(done.removals)} folder(s); "
            "`campflow gc --yes` deletes them"
        )
