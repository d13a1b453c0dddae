"""``campflow show`` and ``campflow export --format inspect``: episodes in the terminal, or as Inspect logs for
``inspect view``."""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, config_with, console


def _store(cfg):  # noqa: ANN001, ANN202  (the types are imported lazily)
    from campflow.errors import StoreError
    from campflow.storage.workspace import Workspace

    ws = Workspace.from_config(cfg)
    if not ws.db_path.exists():
        raise StoreError(f"no store at {ws.db_path}; run `campflow eval` first or pass --db")
    return ws


def export_inspect(runs: str, out: Path, cfg) -> None:  # noqa: ANN001  (the config type is imported lazily)
    """``campflow export --format inspect``: runs as Inspect AI eval logs (one sample per episode), for
    ``inspect view --log-dir OUT``."""
    from campflow.errors import ExportError
    from campflow.report.inspect_log import export_runs, require_inspect

    run_ids = [r.strip() for r in runs.split(",") if r.strip()]
    if not run_ids:
        raise ExportError(
            f"--runs {runs!r} names no run; expected comma-separated run ids (`campflow runs` lists them)"
        )
    require_inspect()  # before opening anything: the one line that says how to install it
    ws = _store(cfg)
    for path in export_runs(ws.store, run_ids, out):
        console.print(f"wrote {path}")
    console.print(f"view them: inspect view --log-dir {out}")


@app.command()
def show(
    episode: str | None = typer.Argument(None, help="an episode id (`campflow failures` prints exemplars)"),
    run: str | None = typer.Option(None, "--run", "-r", help="a run whose failures to show"),
    failed: bool = typer.Option(False, "--failed", help="with --run: its mined failures"),
    cluster: str | None = typer.Option(None, "--cluster", help="with --run: one failure cluster (id, prefix or label)"),
    limit: int = typer.Option(5, "--limit", help="with --run: show at most this many episodes (0: all)"),
    images: Path | None = typer.Option(
        None, "--images", help="folder for the episodes' images (default: <workspace>/shown)"
    ),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Print an episode's transcript (turns, tool calls and results, how it ended); images are written as files."""
    from campflow.errors import ExportError
    from campflow.report.episodes import episode as load_episode
    from campflow.report.episodes import failed_episodes
    from campflow.report.transcript import render_episode

    if (episode is None) == (run is None):
        raise ExportError("give an episode id, or --run RUN with --failed or --cluster C (not both)")
    if run is not None and not (failed or cluster):
        raise ExportError(f"--run {run}: say which episodes: --failed (all its failures) or --cluster C")
    if limit < 0:
        raise ExportError(f"--limit {limit}: expected 0 (all) or a positive number of episodes")
    ws = _store(config_with(config, db))
    store = ws.store
    if episode is not None:
        chosen = [load_episode(store, episode)]
        total = 1
    else:
        from campflow.synthesis.pipeline import resolve_run

        run_id = resolve_run(store, run)
        chosen = failed_episodes(store, run_id, cluster)
        if not chosen:
            console.print(
                f"run {run_id} has no mined failures: it had none, or they were not mined yet "
                f"(`campflow failures --run {run_id}` mines and clusters them)"
            )
            return
        total = len(chosen)
        chosen = chosen[:limit] if limit else chosen
    folder = images or ws.path / "shown"
    for shown in chosen:
        console.print(render_episode(shown, folder / shown.episode_id, width=console.width), markup=False)
        console.print()
    if total > len(chosen):
        console.print(f"showed {len(chosen)} of {total} episodes; --limit 0 shows all")
