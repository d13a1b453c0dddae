"""``campflow rescore``: a run's episodes judged again by the current verifiers, beside their old scores."""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, config_with, console
from campflow.cli.display import print_table


@app.command()
def rescore(
    run: str = typer.Option(..., "--run", help="the run whose episodes to re-score (`campflow runs` lists them)"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Re-score a run's stored episodes with each bootcamp's current verifier (no model runs); list what changed.

    The old scores stay in `episodes`; the new ones go to `episode_rescores`, under one rescore id.
    """
    from campflow.storage.rescores import rescore_run
    from campflow.storage.workspace import Workspace

    result = rescore_run(Workspace.from_config(config_with(config, db)), run)
    changed = result.changed
    if changed:
        rows = [
            (
                e.bootcamp,
                e.instance_id,
                e.sample,
                f"{e.old_reward:g}",
                e.old_success,
                f"{e.new_reward:g}",
                e.new_success,
            )
            for e in changed
        ]
        columns = ["bootcamp", "instance", "sample", "old reward", "old success", "new reward", "new success"]
        print_table(console, columns, rows, title=f"changed by {result.rescore_id}")
    old = sum(e.old_success for e in result.episodes if e.error is None)
    new = sum(bool(e.new_success) for e in result.episodes if e.error is None)
    scored = len(result.episodes) - len(result.failed)
    console.print(
        f"{result.run_id}: {scored} episodes re-scored ({result.rescore_id}), {len(changed)} changed; "
        f"solved {old} -> {new}"
        + (f"; {len(result.failed)} not re-scored ({result.failed[0].error})" if result.failed else "")
    )
