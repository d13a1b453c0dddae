"""``campflow proxy serve`` and ``proxy judge``: a deployed agent's traffic recorded, judged and filed."""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, config_with, console

proxy_app = typer.Typer(
    help="The production proxy: a deployed agent's calls recorded on their way to its model, then judged.",
    no_args_is_help=True,
)
app.add_typer(proxy_app, name="proxy")


@proxy_app.command("serve")
def serve_command(
    upstream: str | None = typer.Option(
        None, "--upstream", help="the model server's OpenAI base URL (default: production.upstream)"
    ),
    host: str | None = typer.Option(None, "--host", help="address to listen on (default: production.host)"),
    port: int | None = typer.Option(None, "--port", "-p", min=0, max=65535, help="port (default: production.port)"),
    spool: Path | None = typer.Option(None, "--spool", help="the spool's folder (default: production.spool_dir)"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Serve the upstream to a deployed agent, recording its chat completions by conversation, until stopped."""
    from campflow import stopping
    from campflow.proxy.production import CONVERSATION_HEADER, ProductionProxy, serve_production
    from campflow.stopping import Stopped

    overrides = {"production.upstream": upstream, "production.host": host, "production.port": port}
    cfg = config_with(config, db, **{k: v for k, v in overrides.items() if v is not None})
    if spool is not None:
        cfg.production.spool_dir = spool

    def ready(proxy: ProductionProxy) -> None:
        console.print(
            f"recording calls to {proxy.upstream} at {proxy.url} (conversation id: base URL "
            f"{proxy.conversation_url('<id>')} or header {CONVERSATION_HEADER}); feedback: POST "
            f"{proxy.url.removesuffix('/v1')}/episodes/<id>/feedback; spool {proxy.spool.path}; Ctrl-C stops",
            markup=False,
            soft_wrap=True,
        )

    try:
        serve_production(cfg.production, cfg.workspace.db_path, ready)
    except Stopped as stop:
        stopping.stop_was_the_end()
        console.print(f"stopped by {stop}: no longer recording", markup=False)


@proxy_app.command("judge")
def judge_command(
    llm: bool = typer.Option(False, "--llm", help="judge unjudged episodes with production.judge (groups of alike)"),
    reward: str | None = typer.Option(
        None, "--reward", help="module:function or file.py:function over the transcript (default: production.reward)"
    ),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Judge production episodes without a judgement, then file every judged one into a production run
    whose failures are mined and clustered (``campflow failures --run <id>``)."""
    from campflow.proxy.judging import judge_unjudged

    cfg = config_with(config, db)
    if reward is not None:
        cfg.production.reward = reward
    from campflow.storage.workspace import Workspace

    store = Workspace.from_config(cfg).store
    result = judge_unjudged(store, cfg.production, cfg.synthesis, llm=llm)
    for line in result.lines():
        console.print(line, markup=False, soft_wrap=True)


@proxy_app.command("tasks")
def tasks_command(
    cluster: str = typer.Option(..., "--cluster", help="a production failure cluster (id or prefix)"),
    bootcamp: str = typer.Option(..., "--bootcamp", help="the bootcamp the tasks are for (an MCP task bootcamp, ...)"),
    model: str | None = typer.Option(None, "--model", help="the synthesizer's model (default: synthesis.llm.model)"),
    base_url: str | None = typer.Option(
        None, "--base-url", help="its OpenAI base URL (default: synthesis.llm.base_url)"
    ),
    n: int | None = typer.Option(None, "-n", min=1, help="tasks to ask for (default: synthesis.n_per_cluster)"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Propose tasks of a bootcamp from a production failure cluster's conversations; each is validated
    like any variant and names the cluster it came from (view variant_lineage)."""
    from campflow.storage.workspace import Workspace
    from campflow.synthesis.from_production import synthesize_from_production

    overrides = {"synthesis.llm.model": model, "synthesis.llm.base_url": base_url, "synthesis.n_per_cluster": n}
    cfg = config_with(config, db, **{k: v for k, v in overrides.items() if v is not None})
    workspace = Workspace.from_config(cfg)
    summary = synthesize_from_production(workspace.store, cluster, bootcamp, cfg.synthesis)
    rejected = ", ".join(f"{k} x{v}" for k, v in sorted(summary.rejected.items())) or "none"
    console.print(
        f"run {summary.run_id}: {summary.proposed} proposed for {bootcamp}, {summary.accepted} accepted, "
        f"rejected: {rejected}; `campflow sql \"SELECT * FROM variant_lineage WHERE synthesizer = 'llm-production'\"`",
        markup=False,
        soft_wrap=True,
    )
