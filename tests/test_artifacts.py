"""Prefect artifacts of a cycle and of an evaluation run, read back through Prefect's client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from campflow.config import load_config
from campflow.report.facts import cycle_facts
from campflow.report.page import write_report
from campflow.storage.workspace import Workspace
from tests.recorded_cycle import CYCLE, shared_cycle

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _read(keys: list[str]) -> dict[str, object]:
    """The latest artifact of each key, through the Prefect API's client."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def read():
        async with get_client() as client:
            return await client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))

    return {a.key: a for a in asyncio.run(read())}


def test_a_cycle_leaves_its_decision_tables_and_report_link_as_artifacts(tmp_path: Path, tmp_path_factory) -> None:
    from prefect import flow

    from campflow.tasks.artifacts import cycle_artifacts_task

    ws = shared_cycle(tmp_path_factory)
    facts = cycle_facts(ws.store, CYCLE)
    page = write_report(facts, tmp_path / "reports" / CYCLE)

    @flow(name="publish-cycle")
    def publish() -> list[str]:
        return cycle_artifacts_task(facts, page)

    keys = publish()
    assert keys == ["cycle-c1", "cycle-c1-levels", "cycle-c1-clusters", "cycle-c1-report"]
    read = _read(keys)
    assert set(read) == set(keys) and all(a.flow_run_id for a in read.values())  # on the flow run's page
    markdown = read["cycle-c1"]
    assert markdown.type == "markdown"
    assert markdown.data.startswith(f"# Cycle {CYCLE}: ") and facts.decision in markdown.data
    for bootcamp in ("calculator", "chart"):
        row = next(line for line in markdown.data.splitlines() if line.startswith(f"| {bootcamp} |"))
        assert row.count(" ± ") == 3 and "points" in row  # before, after and the change, each with its SE
    levels = json.loads(read["cycle-c1-levels"].data)
    compared = {(c.bootcamp, c.level): c for c in facts.comparisons if c.level is not None}
    assert {(r["bootcamp"], r["level"]) for r in levels} == set(compared)
    for r in levels:
        c = compared[(r["bootcamp"], r["level"])]
        assert (r["before"], r["after"]) == (round(c.p_before, 4), round(c.p_after, 4)) and "change_se" in r
    clusters = json.loads(read["cycle-c1-clusters"].data)
    labels = {
        r["cluster_label"]
        for r in ws.store.query("SELECT cluster_label FROM cycle_outcomes WHERE cluster_id IS NOT NULL")
    }
    assert {r["cluster"] for r in clusters} == labels and all(r["fixed"] <= r["instances"] for r in clusters)
    assert read["cycle-c1-report"].type == "markdown"  # a link artifact is stored as a markdown link
    assert page.resolve().as_uri() in read["cycle-c1-report"].data


def test_an_evaluation_run_leaves_a_table_of_its_pass_rates(tmp_path: Path) -> None:
    from campflow.flows.evaluate import evaluate

    cfg = load_config(
        None,
        {
            "workspace.path": str(tmp_path / "ws"),
            "policy.kind": "noisy",
            "eval.bootcamps": ["calculator", "maze"],
            "eval.n": 4,
        },
        env={},
    )
    evaluate(cfg, run_id="eval-artifact")
    (table,) = _read(["run-eval-artifact"]).values()
    assert table.type == "table" and table.flow_run_id
    rows = json.loads(table.data)
    stored = Workspace.from_config(cfg).store.query(
        "SELECT bootcamp, level, episodes, pass_rate FROM pass_rates_by_level WHERE run_id = 'eval-artifact'"
    )
    assert sorted((r["bootcamp"], r["level"], r["episodes"], r["pass_rate"]) for r in rows) == sorted(
        (r["bootcamp"], r["level"], r["episodes"], float(r["pass_rate"])) for r in stored
    )
