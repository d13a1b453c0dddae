"""``campflow eval``: evaluate a policy on the eval split, with a live progress display."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import (
    ConfigOption,
    DbOption,
    bootcamp_names,
    config_with,
    console,
    resolve_local_model,
    when_stopped,
)
from campflow.cli.display import print_table
from campflow.errors import CampflowError


def quiet_prefect() -> None:
    """Keep Prefect's per-task log lines out of the progress display unless asked for."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    # the ephemeral API server would try to send telemetry, and print an error line where there is no network
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # a campflow error that ends a flow is said once, in the CLI's one line, not also as Prefect's traceback
    logging.getLogger("prefect.flow_runs").addFilter(_not_campflow_errors)


def _not_campflow_errors(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], CampflowError))


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
    agent: str | None = typer.Option(
        None,
        "--agent",
        help="your agent plays each episode: a command ('python my_agent.py') or module:function (docs/agents.md)",
    ),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Evaluate a policy on bootcamps x the eval split x k samples and record every episode."""
    names = bootcamp_names(bootcamps)
    cfg = config_with(
        config,
        db,
        **{
            "policy.kind": policy,
            "policy.model": model,
            "policy.base_url": base_url,
            "eval.bootcamps": names,
            "eval.n": n,
            "eval.samples": samples,
            "rollout.concurrency": concurrency,
        },
    )
    from campflow.storage.names import check_run_id
    from campflow.storage.workspace import Workspace

    if run_id is not None:
        check_run_id(run_id)  # fail fast, before Prefect starts
    # fail fast, before Prefect starts: an unknown name, or an imported file edited since its import
    cfg.eval.bootcamps = [b.name for b in Workspace.from_config(cfg).bootcamps(cfg.eval.bootcamps)]
    resolve_local_model(cfg)
    if agent is not None:  # fail fast, before Prefect starts: a program that cannot run, a policy that is no model
        from campflow.proxy.program import AgentProgram
        from campflow.proxy.runner import proxy_backend

        AgentProgram.parse(agent)
        if cfg.policy.kind != "local":
            proxy_backend(cfg.policy)
    quiet_prefect()
    from campflow import progress
    from campflow.cli.display import RichReporter
    from campflow.flows.evaluate import evaluate, new_run_id

    run_id = run_id or new_run_id("eval")
    when_stopped(lambda: run_progress(cfg.workspace.db_path, run_id, "eval"))
    with RichReporter(console) as reporter, progress.use(reporter):
        reporter.note("starting Prefect (the first flow on a fresh ephemeral API takes ~10 s)")
        summary = evaluate(cfg, run_id, agent=agent)
    console.print(f"[bold]run[/] {summary.run_id}  [bold]model[/] {summary.model_id}")
    print_table(console, ["bootcamp", "pass_rate"], list(summary.pass_rates.items()))
    print_table(console, list(summary.terminations), [tuple(summary.terminations.values())])
    console.print(
        f"ran {summary.ran} episode(s), kept {summary.skipped} from before; "
        f"inspect with: campflow sql \"SELECT * FROM failure_summary WHERE run_id = '{summary.run_id}'\""
    )
    refuse_all_infra_errors(cfg.workspace.db_path, summary.run_id, summary.terminations, "eval")


def run_progress(db_path: Path, run_id: str, command: str) -> str:
    """Where a stopped run stands and how to complete it, for the line a stopped command ends with."""
    from campflow.storage.query import run_sql

    if not db_path.exists():
        return f"nothing was stored yet; rerun the same `campflow {command}` (with --run-id {run_id})"
    stored = run_sql(db_path, f"SELECT count(*) FROM episodes WHERE run_id = '{run_id}'").rows[0][0]
    return (
        f"run {run_id} stopped with {stored} episode(s) stored; rerun the same `campflow {command}` "
        f"with --run-id {run_id} to complete only what is missing"
    )


def refuse_all_infra_errors(db_path: Path, run_id: str, terminations: dict[str, int], command: str) -> None:
    """Raise when every episode of a run ended as ``infra_error``: nothing about the model was measured.

    Raises:
        PolicyError: naming the run, the count and the first episode's error.
    """
    if not terminations or set(terminations) != {"infra_error"}:
        return
    from campflow.errors import PolicyError
    from campflow.storage.query import run_sql

    rows = run_sql(
        db_path,
        f"SELECT error FROM episodes WHERE run_id = '{run_id}' AND termination = 'infra_error' "
        "ORDER BY episode_id LIMIT 1",
    ).rows
    raise PolicyError(
        f"every episode of run {run_id} ({terminations['infra_error']}) ended as infra_error, so "
        f"nothing was measured: {rows[0][0] if rows else 'no error recorded'}; fix that and rerun "
        f"`campflow {command}` with --run-id {run_id}"
    )
