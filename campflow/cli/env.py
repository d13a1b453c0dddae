"""``campflow env serve``: a bootcamp as an OpenEnv environment for other trainers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, WorkspaceOption, config_with, console

env_app = typer.Typer(
    help="Serve bootcamps to other trainers as OpenEnv environments or MCP servers.", no_args_is_help=True
)
app.add_typer(env_app, name="env")


@env_app.command("serve")
def serve_command(
    name: str = typer.Argument(..., help="bootcamp name: built in, imported or authored in the workspace"),
    port: int = typer.Option(8000, "--port", "-p", min=0, max=65535, help="TCP port (0: a free one)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (0.0.0.0: every interface)"),
    level: int | None = typer.Option(None, "--level", help="serve only this level (default: all, in rotation)"),
    sessions: int = typer.Option(64, "--sessions", min=1, help="most client sessions (concurrent rollouts) at once"),
    seed: int | None = typer.Option(
        None,
        "--seed",
        min=0,
        help="seed of the first reset that names none; later ones count up (default 0; mcp stdio: a fresh one "
        "per process, each process being one episode)",
    ),
    workspace: Path | None = WorkspaceOption,
    protocol: str = typer.Option(
        "openenv", "--protocol", help="openenv, or mcp: one episode per MCP session or episode URL (POST /episodes)"
    ),
    transport: str = typer.Option("http", "--transport", help="mcp: http (streamable HTTP at /mcp) or stdio"),
    run_id: str | None = typer.Option(None, "--run-id", help="mcp: the run its episodes are recorded under"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Serve a bootcamp's train split over OpenEnv (WebSocket /ws, HTTP /reset /step) or MCP until stopped."""
    from campflow import stopping
    from campflow.envserve.server import Served, serve
    from campflow.stopping import Stopped

    cfg = config_with(config, db, **({"workspace.path": workspace} if workspace is not None else {}))
    if protocol not in ("openenv", "mcp") or transport not in ("http", "stdio"):
        from campflow.errors import EnvServerError

        raise EnvServerError(
            f"--protocol {protocol!r} --transport {transport!r}: expected --protocol openenv or mcp, "
            "and --transport http or stdio"
        )
    if protocol == "mcp":
        _serve_mcp(cfg, name, transport, host, port, level, seed, run_id)
        return

    def ready(served: Served) -> None:
        levels = ",".join(str(lv) for lv in served.levels)
        console.print(
            f"serving {served.bootcamp} (levels {levels}) as an OpenEnv environment at {served.url} "
            f"(up to {served.sessions} sessions); Ctrl-C stops",
            markup=False,
            soft_wrap=True,
        )

    try:
        serve(cfg, name, host=host, port=port, level=level, sessions=sessions, seed=seed or 0, on_ready=ready)
    except Stopped as stop:  # Ctrl-C or SIGTERM is how a server is meant to end
        stopping.stop_was_the_end()
        console.print(f"stopped by {stop}: no longer serving {name}", markup=False)


def _serve_mcp(
    cfg: Any, name: str, transport: str, host: str, port: int, level: int | None, seed: int | None, run_id: str | None
) -> None:
    from campflow import stopping
    from campflow.extras import require
    from campflow.mcp.serve import say, serve_mcp
    from campflow.stopping import Stopped

    require("mcp")
    if run_id is not None:
        from campflow.storage.names import check_run_id

        check_run_id(run_id)

    def ready(where: str) -> None:  # on stderr: a stdio server's stdout carries the protocol
        if transport == "stdio":
            how = f"on stdio (run {where}), one episode per process"
        else:  # where: the /mcp URL; episode URLs come from POST /episodes beside it
            how = f"at {where}, one episode per session (an episode URL per episode: POST {where.removesuffix('/mcp')}/episodes)"
        say(f"serving {name} over MCP {how}; episodes recorded in the workspace's store")

    try:
        done = serve_mcp(
            cfg, name, transport=transport, host=host, port=port, level=level, seed=seed, run_id=run_id, on_ready=ready
        )
        say(f"run {done}: MCP serving of {name} ended")
    except Stopped as stop:
        stopping.stop_was_the_end()
        say(f"stopped by {stop}: no longer serving {name}")
