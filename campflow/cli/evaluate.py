"""``campflow eval``: evaluate a policy on the eval split, with a live progress display."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, config_with, console, resolve_local_model, table


def quiet_prefect() -> None:
    """Keep Prefect's per-task log lines out of the progress display unless asked for."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")


@app.command("eval")
def eval_command(
    policy: str | None = typer.Option(None, "--policy", "-p", help="oracle | noisy | openai | local"),
    model: str | None = typer.Option(None, "--model", "-m", help="endpoint model name or local model path"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible base URL"),
    bootcamps: str | None = typer.Option(None, "--bootcamps", "-b", help="comma-separated names, or 'all'"),
    n: int | None = typer.Option(None, "-n", help="eval-split instances per bootcamp"),
    samples: int | None = typer.Option(None, "--samples", "-k", help="episodes per instance"),
    run_id: str | None = typer.Option(None, "--run-id", help="resume or name a run"),
    concurrency: int | None = typer.Option(None, "--concurrency", help="episodes in flight per worker"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Evaluate a policy on bootcamps x the eval split x k samples and record every episode."""
    names = [s.strip() for s in bootcamps.split(",")] if bootcamps else None
    cfg = config_with(config, db, **{
        "policy.kind": policy, "policy.model": model, "policy.base_url": base_url, "eval.bootcamps": names,
        "eval.n": n, "eval.samples": samples, "rollout.concurrency": concurrency,
    })
    from campflow.storage.workspace import Workspace

    cfg.eval.bootcamps = Workspace.from_config(cfg).names(cfg.eval.bootcamps)  # fail fast, before Prefect starts
    resolve_local_model(cfg)
    quiet_prefect()
    from campflow import progress
    from campflow.cli.display import RichReporter
    from campflow.flows.evaluate import evaluate

    with RichReporter(console) as reporter, progress.use(reporter):
        reporter.note("starting Prefect (the first flow on a fresh ephemeral API takes ~10 s)")
        summary = evaluate(cfg, run_id)
    console.print(f"[bold]run[/] {summary.run_id}  [bold]model[/] {summary.model_id}")
    console.print(table(["bootcamp", "pass_rate"], list(summary.pass_rates.items())))
    console.print(table(list(summary.terminations), [tuple(summary.terminations.values())]))
    console.print(f"ran {summary.ran} episode(s), kept {summary.skipped} from before; "
                  f"inspect with: campflow sql \"SELECT * FROM failure_summary WHERE run_id = '{summary.run_id}'\"")
