"""``campflow env serve``: a bootcamp as an OpenEnv environment for other trainers."""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, WorkspaceOption, config_with, console

env_app = typer.Typer(help="Serve bootcamps to other trainers as OpenEnv environments.", no_args_is_help=True)
app.add_typer(env_app, name="env")


@env_app.command("serve")
def serve_command(
    name: str = typer.Argument(..., help="bootcamp name: built in, imported or authored in the workspace"),
    port: int = typer.Option(8000, "--port", "-p", min=0, max=65535, help="TCP port (0: a free one)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (0.0.0.0: every interface)"),
    level: int | None = typer.Option(None, "--level", help="serve only this level (default: all, in rotation)"),
    sessions: int = typer.Option(64, "--sessions", min=1, help="most client sessions (concurrent rollouts) at once"),
    seed: int = typer.Option(0, "--seed", min=0, help="seed of the first reset that names none; later ones count up"),
    workspace: Path | None = WorkspaceOption,
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Serve a bootcamp's train split over OpenEnv (WebSocket /ws, HTTP /reset /step) until stopped."""
    from campflow.envserve.server import Served, serve
    from campflow.stopping import Stopped

    cfg = config_with(config, db, **({"workspace.path": workspace} if workspace is not None else {}))

    def ready(served: Served) -> None:
        levels = ",".join(str(lv) for lv in served.levels)
        console.print(
            f"serving {served.bootcamp} (levels {levels}) as an OpenEnv environment at {served.url} "
            f"(up to {served.sessions} sessions); Ctrl-C stops",
            markup=False,
            soft_wrap=True,
        )

    try:
        serve(cfg, name, host=host, port=port, level=level, sessions=sessions, seed=seed, on_ready=ready)
    except Stopped as stop:  # Ctrl-C or SIGTERM is how a server is meant to end
        console.print(f"stopped by {stop}: no longer serving {name}", markup=False)
