"""``campflow failures`` and ``campflow synthesize``: a run's failures, and new variants aimed at them."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import (
    ConfigOption,
    DbOption,
    JsonOption,
    bootcamp_names,
    config_with,
    console,
    print_json,
    print_rows,
)
from campflow.cli.display import print_table

BootcampsOption = typer.Option(None, "--bootcamps", "-b", help="only these bootcamps (comma-separated)")


class SynthesizerKind(StrEnum):
    mutate = "mutate"
    llm = "llm"


def _open_workspace(cfg):  # noqa: ANN001, ANN202  (the types are imported lazily)
    from campflow.errors import StoreError
    from campflow.storage.workspace import Workspace

    ws = Workspace.from_config(cfg)
    if not ws.db_path.exists():
        raise StoreError(f"no store at {ws.db_path}; run `campflow eval` first or pass --db")
    return ws


def _names(ws, bootcamps: str | None) -> list[str] | None:  # noqa: ANN001  (the workspace is imported lazily)
    """The workspace's names for a ``--bootcamps`` option; None when it was not given."""
    names = bootcamp_names(bootcamps)
    return ws.names(names) if names is not None else None


@app.command()
def failures(
    run: str | None = typer.Option(None, "--run", "-r", help="run id (default: the latest run with episodes)"),
    bootcamps: str | None = BootcampsOption,
    refresh: bool = typer.Option(False, "--refresh", help="mine and cluster again even if already done"),
    as_json: bool = JsonOption,
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Mine and cluster a run's model failures; show their categories and clusters."""
    cfg = config_with(config, db)
    from campflow.synthesis.pipeline import analyze_run, failure_report, resolve_run

    ws = _open_workspace(cfg)
    store = ws.store
    run_id = resolve_run(store, run)
    if as_json:
        analyze_run(store, run_id, cfg.synthesis, bootcamps=_names(ws, bootcamps), refresh=refresh)
    else:
        with console.status(f"mining and clustering the failures of {run_id}"):
            analyze_run(store, run_id, cfg.synthesis, bootcamps=_names(ws, bootcamps), refresh=refresh)
    categories, clusters = failure_report(store, run_id)
    if as_json:
        from campflow.storage.suspicion import mine_suspicious, shares

        mine_suspicious(ws, run_id, refresh=refresh)
        suspicious = shares(store, run_id)
        print_json({"run_id": run_id, "categories": categories, "clusters": clusters, "suspicious": suspicious})
        return
    _print_suspicious(ws, run_id, refresh)
    if not categories:
        console.print(f"run {run_id} has no model failures")
        return
    print_table(
        console,
        ["bootcamp", "category", "failures", "instances", "clusters"],
        [tuple(r.values()) for r in categories],
        title=f"failure categories of {run_id}",
    )
    # 80 columns: a cluster's label and its exemplar episode go under the table, after its id
    print_rows(
        ["cluster", "bootcamp", "size", "accepted", "rejected", "label", "exemplar"],
        [
            (r["cluster_id"], r["bootcamp"], r["size"], r["accepted"], r["rejected"], r["label"], r["exemplar"])
            for r in clusters
        ],
        title="clusters",
        below=("label", "exemplar"),
    )
    console.print(f"read one: campflow show EPISODE_ID, or campflow show --run {run_id} --cluster CLUSTER")
    console.print(
        f"lineage of variants: campflow sql \"SELECT * FROM variant_lineage WHERE failure_run_id = '{run_id}'\""
    )


@app.command()
def synthesize(
    run: str = typer.Option(..., "--run", "-r", help="the run whose failures the variants target"),
    synthesizer: SynthesizerKind | None = typer.Option(
        None, "--synthesizer", "-s", help="mutate (offline) or llm (default: config)"
    ),
    model: str | None = typer.Option(None, "--model", "-m", help="llm: the endpoint's model name"),
    base_url: str | None = typer.Option(None, "--base-url", help="llm: OpenAI-compatible base URL"),
    n: int | None = typer.Option(None, "-n", help="proposals per cluster"),
    policy: str | None = typer.Option(
        None,
        "--policy",
        "-p",
        help="the current model, for calibration: "
        "oracle | noisy | openai | local (default: the policy the run was made with)",
    ),
    samples: int | None = typer.Option(None, "--calibration-samples", help="episodes per variant; 0 skips"),
    bootcamps: str | None = BootcampsOption,
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Propose variants aimed at a run's failure clusters; record the verified ones as train instances."""
    cfg = config_with(
        config,
        db,
        **{
            "synthesis.synthesizer": synthesizer.value if synthesizer else None,
            "synthesis.llm.model": model,
            "synthesis.llm.base_url": base_url,
            "synthesis.n_per_cluster": n,
            "policy.kind": policy,
            "synthesis.calibration_samples": samples,
        },
    )
    from campflow.agents.factory import build_policy
    from campflow.rollout.engine import RolloutSettings
    from campflow.synthesis.pipeline import build_synthesizer, resolve_run, run_policy_config
    from campflow.synthesis.pipeline import synthesize as synthesize_run

    ws = _open_workspace(cfg)
    names = _names(ws, bootcamps)
    store = ws.store
    run_id = resolve_run(store, run)
    synth = build_synthesizer(cfg.synthesis)  # fails fast on a missing --model, before any work
    current = build_policy(cfg.policy if policy else (run_policy_config(store, run_id) or cfg.policy))
    with console.status(f"synthesizing variants for the clusters of {run_id} ({synth.name})"):
        summary = synthesize_run(
            store,
            run_id,
            cfg.synthesis,
            synthesizer=synth,
            policy=current,
            bootcamps=names,
            rollout=RolloutSettings.from_config(cfg.rollout),
            hacker=cfg.integrity.hacker,
        )
    print_table(
        console,
        ["bootcamp", "cluster", "size", "label", "accepted", "rejected"],
        [
            (c["bootcamp"], c["cluster_id"], c["size"], c["label"], c["accepted"], c["rejected"])
            for c in summary.per_cluster
        ],
        title=f"variants for {run_id} ({summary.synthesizer})",
    )
    if summary.rejected:
        print_table(
            console,
            ["reject reason", "proposals"],
            sorted(summary.rejected.items(), key=lambda kv: -kv[1]),
            title="rejected",
        )
    calibrated = f"calibrated with {current.model_id}" if cfg.synthesis.calibration_samples else "not calibrated"
    console.print(
        f"run {summary.run_id}: {summary.proposed} proposal(s), {summary.accepted} accepted, "
        f"{sum(summary.rejected.values())} rejected, {summary.already_recorded} already recorded "
        f'({calibrated}); inspect with: campflow sql "SELECT status, reject_reason, params FROM '
        f"variants WHERE run_id = '{summary.run_id}'\""
    )


def _print_suspicious(ws, run_id: str, refresh: bool) -> None:  # noqa: ANN001  (the workspace is imported lazily)
    """The run's suspicious successes (campflow.integrity.suspicion): their share per bootcamp and level."""
    from campflow.storage.suspicion import mine_suspicious, shares

    with console.status(f"mining the successes of {run_id}"):
        flagged = mine_suspicious(ws, run_id, refresh=refresh)
    rows = shares(ws.store, run_id)
    if rows:
        print_table(
            console,
            ["bootcamp", "level", "solved", "suspicious", "share"],
            [(r["bootcamp"], r["level"], r["solved"], r["suspicious"], f"{r['share']:.1%}") for r in rows],
            title=f"suspicious successes of {run_id}",
        )
    if flagged:
        console.print(
            f"why: campflow sql \"SELECT episode_id, bootcamp, why FROM suspicious_successes WHERE run_id = '{run_id}'\""
        )
