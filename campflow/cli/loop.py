"""``campflow improve``, ``watch``, ``serve``, ``report`` and ``cycles``: the loop."""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import (
    ConfigOption,
    DbOption,
    JsonOption,
    config_with,
    console,
    print_rows,
    when_stopped,
)
from campflow.cli.display import print_table
from campflow.cli.evaluate import quiet_prefect


def _quiet() -> None:
    quiet_prefect()
    from campflow.cli.training import quiet_training

    quiet_training()


def print_cycle(summary) -> None:  # noqa: ANN001
    """The before/after table of a cycle and where its report is."""
    names = sorted(set(summary.pass_before) | set(summary.pass_after))
    rows = [
        (
            b,
            _pct(summary.pass_before.get(b, 0.0)),
            _pct(summary.pass_after.get(b, 0.0)),
            _pct(summary.pass_after.get(b, 0.0) - summary.pass_before.get(b, 0.0), sign=True),
        )
        for b in names
    ]
    rows.append(
        (
            f"[bold]overall {summary.metric}[/]",
            _pct(summary.before),
            _pct(summary.after),
            _pct(summary.after - summary.before, sign=True),
        )
    )
    print_table(
        console,
        ["bootcamp", f"before ({summary.model_id})", f"after ({summary.candidate_id})", "change"],
        rows,
        title=f"cycle {summary.cycle_id} on the eval split",
    )
    verdict = "[green]promoted[/]" if summary.promoted else "[yellow]not promoted[/] (the current model stays)"
    console.print(f"candidate {summary.candidate_id}: {verdict}: {summary.decision}")
    console.print(f"report: {summary.report}")


def _pct(value: float, sign: bool = False) -> str:
    return f"{value:+.1%}" if sign else f"{value:.1%}"


@app.command()
def improve(
    resume: bool = typer.Option(False, "--resume", help="continue the latest unfinished cycle (or --cycle-id)"),
    cycle_id: str | None = typer.Option(None, "--cycle-id", help="name a new cycle, or the one to resume"),
    start: str | None = typer.Option(
        None,
        "--from",
        help="improve.model: 'embedded', 'embedded-vl' (the tiny vision-language model) or a local model folder",
    ),
    n_cycles: int | None = typer.Option(
        None, "--cycles", min=1, help="improve.cycles: cycles to run, each from the last promoted model"
    ),
    agent: str | None = typer.Option(
        None,
        "--agent",
        help="rollout.agent: your agent plays every rollout of the cycle, a command ('python my_agent.py') or "
        "module:function, and the model trains on the ids it produced there (docs/agents.md)",
    ),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Improvement cycles: evaluate, mine, synthesize, collect, SFT, RL, re-evaluate, promote (if it passes the gate)."""
    cfg = config_with(config, db, **{"improve.model": start, "improve.cycles": n_cycles, "rollout.agent": agent})
    if cfg.rollout.agent is not None:  # fail fast, before Prefect starts: a program that cannot run
        from campflow.proxy.program import AgentProgram

        AgentProgram.parse(cfg.rollout.agent)
    from campflow.storage import cycles
    from campflow.storage.workspace import Workspace

    if cycle_id is not None:
        from campflow.storage.names import check_cycle_id

        check_cycle_id(cycle_id)  # fail fast, before Prefect starts
    elif not resume:
        cycle_id = cycles.new_cycle_id()  # named here, so a stopped cycle can be named

    cfg.eval.bootcamps = Workspace.from_config(cfg).names(cfg.eval.bootcamps)
    _quiet()
    from campflow import progress
    from campflow.cli.display import RichReporter
    from campflow.flows.improve import improve as run_improve

    options = "".join(f" {flag} {value}" for flag, value in (("--config", config), ("--db", db)) if value)
    when_stopped(lambda: cycle_progress(cfg.workspace.db_path, cycle_id, f"campflow improve --resume{options}"))
    from campflow.storage.lock import WorkspaceLock

    # held here, before Prefect starts, so a refusal is immediate; the flow takes it again (re-entrant)
    with WorkspaceLock(cfg.workspace.db_path, cycle_id) as lock:
        if lock.taken_over is not None:
            console.print(f"took over the workspace lock of {lock.taken_over.describe()}: that process has ended")
        with RichReporter(console) as reporter, progress.use(reporter):
            reporter.note("starting Prefect (the first flow on a fresh ephemeral API takes ~10 s)")
            summary = run_improve(cfg, cycle_id, resume)
    for each in [*summary.earlier, summary]:
        print_cycle(each)


def cycle_progress(db_path: Path, cycle_id: str | None, resume: str) -> str:
    """Where a stopped cycle stands and how to resume it, for the line a stopped command ends with."""
    from campflow.errors import CampflowError
    from campflow.flows.improve import STEPS
    from campflow.storage import cycles
    from campflow.storage.workspace import Workspace

    cycle = None
    if db_path.exists():
        try:
            store = Workspace(db_path.parent, db=db_path).store
            cycle = cycles.load(store, cycle_id) if cycle_id else cycles.latest_unfinished(store)
        except CampflowError:  # stopped before the cycle was recorded
            pass
    if cycle is None:
        return f"no cycle was recorded yet; start again with `{resume.replace(' --resume', '')}`"
    done = cycle.state.get("done", [])
    step = next((s for s in STEPS if s not in done), "the end")
    return (
        f"cycle {cycle.cycle_id} stopped during step {step!r} ({len(done)} of {len(STEPS)} steps done); "
        f"resume with `{resume}`"
    )


@app.command()
def watch(config: Path | None = ConfigOption, db: Path | None = DbOption) -> None:
    """Count new model failures since the last training; start a cycle past ``watch.threshold``."""
    cfg = config_with(config, db)
    _quiet()
    from campflow import progress
    from campflow.cli.display import RichReporter
    from campflow.flows.watch import watch_flow

    with RichReporter(console) as reporter, progress.use(reporter):
        decision = watch_flow(cfg)
    console.print(
        f"{decision.new_failures} new model failure(s) since the last training; threshold "
        f"{decision.threshold}: {'started a cycle' if decision.started else 'no cycle started'}"
    )
    production = decision.production
    if production is not None and (production.total or cfg.watch.production_threshold is not None):
        crossed = ", ".join(
            f"{c} ({production.labels.get(c) or '?'}: {production.by_cluster[c]})" for c in decision.crossed
        )
        console.print(
            f"{production.total} judged production failure(s) since the last training (threshold "
            f"{cfg.watch.production_threshold}, per cluster {cfg.watch.production_cluster_threshold}); "
            f"clusters that crossed: {crossed or 'none'}",
            markup=False,
            soft_wrap=True,
        )
    if decision.busy:
        console.print(f"no cycle could start: {decision.busy}")
    if decision.started:
        print_cycle(decision.started)


@app.command()
def serve(config: Path | None = ConfigOption, db: Path | None = DbOption) -> None:
    """Serve ``improve`` on its cron and ``watch`` on its interval (needs `prefect server start`)."""
    import os

    cfg = config_with(config, db)
    if not os.environ.get("PREFECT_API_URL"):
        from campflow.errors import ConfigError

        raise ConfigError(
            "schedules need a Prefect server: run `prefect server start`, then "
            "`export PREFECT_API_URL=http://127.0.0.1:4200/api` and `campflow serve` again"
        )
    from campflow.flows.serve import serve as run_serve

    console.print(
        f"serving improve (cron {cfg.improve.cron!r}) and watch (every {cfg.watch.interval_seconds}s); Ctrl-C stops"
    )
    run_serve(cfg, config)


@app.command()
def report(
    cycle: str | None = typer.Option(None, "--cycle", help="cycle id (default: the latest)"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Write reports/<cycle>/index.html with plots, and print the cycle's summary."""
    cfg = config_with(config, db)
    from campflow.report.facts import cycle_facts
    from campflow.report.page import write_report
    from campflow.storage.workspace import Workspace

    facts = cycle_facts(Workspace.from_config(cfg).store, cycle)
    page = write_report(facts, cfg.improve.reports_dir / facts.cycle_id)
    names = sorted(set(facts.pass_before) | set(facts.pass_after))
    print_table(
        console,
        ["bootcamp", "before", "after"],
        [(b, facts.pass_before.get(b, 0.0), facts.pass_after.get(b, 0.0)) for b in names],
        title=f"cycle {facts.cycle_id} ({facts.status})",
    )
    console.print(f"{facts.metric}: {facts.before_value} -> {facts.after_value}; promoted: {facts.promoted}")
    console.print(f"report: {page}")


@app.command()
def cycles(as_json: bool = JsonOption, config: Path | None = ConfigOption, db: Path | None = DbOption) -> None:
    """List improvement cycles with their figures and decisions."""
    cfg = config_with(config, db)
    from campflow.storage.query import run_sql

    result = run_sql(
        cfg.workspace.db_path,
        "SELECT cycle_id, status, step, base_model_id, candidate_model_id, metric, "
        "round(before_value, 4) AS before, round(after_value, 4) AS after, promoted, decision, "
        "strftime(started_at, '%Y-%m-%d %H:%M') AS started FROM cycles ORDER BY started_at DESC",
    )
    # 80 columns: the models and the decision (a sentence) go under the table
    print_rows(
        result.columns,
        result.rows,
        as_json=as_json,
        title="cycles",
        below=("metric", "base_model_id", "candidate_model_id", "decision"),
    )
