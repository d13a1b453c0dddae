"""Prefect artifacts: what a cycle decided and measured, and each evaluation's pass rates, in the Prefect UI.

A scheduled cycle's owner looks at its flow run in the Prefect UI; these artifacts put the decision, the
before/after figures with their standard errors, the per-cluster outcomes and a link to the report there.
Artifact keys name the cycle or run, so the UI's Artifacts page keeps one history per cycle and per run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from campflow.report.facts import CycleFacts
from campflow.storage.promotion import binomial_se
from campflow.storage.store import Store


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from ``parts``."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


def _pct(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.1%}"


def cycle_markdown(facts: CycleFacts, page: Path | None) -> str:
    """The decision, its reason and the before/after table per bootcamp (each ± its standard error)."""
    verdict = {True: "promoted", False: "not promoted", None: "undecided"}[facts.promoted]
    lines = [
        f"# Cycle {facts.cycle_id}: {verdict}",
        "",
        f"**Decision:** {facts.decision or 'not decided yet'}",
        "",
        f"Model `{facts.base_model_id}` → candidate `{facts.candidate_model_id}`: {facts.metric} "
        f"{_pct(facts.before_value)} → {_pct(facts.after_value)}.",
        "",
        "| scope | before | after | change |",
        "|---|---|---|---|",
    ]
    for c in facts.comparisons:
        if c.level is not None:
            continue  # per level: the table artifact
        lines.append(
            f"| {c.scope} | {c.p_before:.1%} ± {binomial_se(c.p_before, c.n_before):.1%} (n={c.n_before}) "
            f"| {c.p_after:.1%} ± {binomial_se(c.p_after, c.n_after):.1%} (n={c.n_after}) "
            f"| {100 * c.delta:+.1f} ± {100 * c.se:.1f} points |"
        )
    if not facts.comparisons:
        lines.append("| (no before/after evaluation yet) | | | |")
    if page is not None:
        lines += ["", f"Report: `{page}`"]
    return "\n".join(lines)


def level_rows(facts: CycleFacts) -> list[dict[str, Any]]:
    """Per bootcamp and level: pass rate before and after with standard errors, and the change."""
    return [
        {
            "bootcamp": c.bootcamp,
            "level": c.level,
            "n": c.n_after,
            "before": round(c.p_before, 4),
            "before_se": round(binomial_se(c.p_before, c.n_before), 4),
            "after": round(c.p_after, 4),
            "after_se": round(binomial_se(c.p_after, c.n_after), 4),
            "change": round(c.delta, 4),
            "change_se": round(c.se, 4),
        }
        for c in facts.comparisons
        if c.bootcamp is not None and c.level is not None
    ]


def cluster_rows(facts: CycleFacts) -> list[dict[str, Any]]:
    """Per failure cluster of the starting model: its eval instances, how many the candidate fixed, and probes."""
    probes = {(p["bootcamp"], p["cluster_label"]): p for p in facts.probes}
    rows = []
    for r in facts.cluster_outcomes:
        p = probes.get((r["bootcamp"], r["cluster_label"])) or {}
        rows.append(
            {
                "bootcamp": r["bootcamp"],
                "cluster": r["cluster_label"],
                "instances": int(r["instances"]),
                "fixed": int(r["fixed"]),
                "still_failing": int(r["still_failing"]),
                "probes": int(p.get("probes") or 0),
                "probe_pass_before": None if p.get("pass_before") is None else round(p["pass_before"], 4),
                "probe_pass_after": None if p.get("pass_after") is None else round(p["pass_after"], 4),
            }
        )
    return rows


@task(name="cycle-artifacts", cache_policy=NO_CACHE)
def cycle_artifacts_task(facts: CycleFacts, page: Path | None) -> list[str]:
    """Create the cycle's artifacts on the running flow: the decision (markdown), per level and per cluster
    tables, and a link to the report; returns their keys."""
    key = artifact_key("cycle", facts.cycle_id)
    create_markdown_artifact(
        cycle_markdown(facts, page), key=key, description=f"cycle {facts.cycle_id}: the decision and its figures"
    )
    keys = [key]
    levels = level_rows(facts)
    if levels:
        create_table_artifact(
            levels,
            key=f"{key}-levels",
            description="eval-split pass rate per bootcamp and level, before and after (± standard errors)",
        )
        keys.append(f"{key}-levels")
    clusters = cluster_rows(facts)
    if clusters:
        create_table_artifact(
            clusters,
            key=f"{key}-clusters",
            description="per failure cluster of the starting model: instances fixed, still failing, probes",
        )
        keys.append(f"{key}-clusters")
    if page is not None:
        create_link_artifact(
            page.resolve().as_uri(),
            link_text=f"report of cycle {facts.cycle_id}",
            key=f"{key}-report",
            description="the cycle's report: one self-contained HTML page",
        )
        keys.append(f"{key}-report")
    return keys


def pass_rate_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """A run's pass rate per bootcamp and level, with episodes and standard error."""
    return [
        {
            "bootcamp": r["bootcamp"],
            "level": r["level"],
            "episodes": int(r["episodes"]),
            "pass_rate": float(r["pass_rate"] or 0.0),
            "se": round(binomial_se(float(r["pass_rate"] or 0.0), int(r["episodes"])), 4),
            "mean_reward": float(r["mean_reward"] or 0.0),
        }
        for r in store.query(
            "SELECT bootcamp, level, episodes, pass_rate, mean_reward FROM pass_rates_by_level WHERE run_id = ? "
            "ORDER BY bootcamp, level",
            [run_id],
        )
    ]


@task(name="run-artifact", cache_policy=NO_CACHE)
def run_artifact_task(store: Store, run_id: str) -> str | None:
    """Create the table artifact of a run's pass rates on the running flow; returns its key (None: no episodes)."""
    rows = pass_rate_rows(store, run_id)
    if not rows:
        return None
    key = artifact_key("run", run_id)
    create_table_artifact(rows, key=key, description=f"pass rates of run {run_id} per bootcamp and level")
    return key
