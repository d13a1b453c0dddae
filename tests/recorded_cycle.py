"""A recorded improvement cycle without training: a noisy oracle as the starting model, a better one as the
candidate, on a text and an image bootcamp. Reports, artifacts and the browser test read it in seconds."""

from __future__ import annotations

import asyncio
from pathlib import Path

from campflow.agents.oracle import NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage import cycles
from campflow.storage.promotion import compare, gate
from campflow.storage.workspace import Workspace
from campflow.synthesis.pipeline import analyze_run

CYCLE = "c1"
BOOTCAMPS = ("calculator", "chart")


def _run(ws: Workspace, run_id: str, policy: NoisyOraclePolicy, n: int) -> None:
    store = ws.store
    store.start_run(run_id, "evaluate", {}, policy.model_id)
    for name in BOOTCAMPS:
        bootcamp = registry.make(name)
        instances = eval_instances(bootcamp, n)
        store.write_instances(instances, split="eval")
        specs = [EpisodeSpec(bootcamp, i) for i in instances]
        store.write_episodes(asyncio.run(run_episodes(specs, policy, run_id=run_id)))
    store.finish_run(run_id, "completed", {})


def record_cycle(ws: Workspace, n: int = 6) -> str:
    """Record cycle ``c1`` (before and after runs, mined failures, the gate's decision); returns its id."""
    store = ws.store
    before, after = f"{CYCLE}-before", f"{CYCLE}-after"
    _run(ws, before, NoisyOraclePolicy(p_wrong_answer=0.6, p_malformed=0.2, seed=1), n)
    _run(ws, after, NoisyOraclePolicy(p_wrong_answer=0.1, p_malformed=0.0, seed=2), n)
    analyze_run(store, before)
    cycle = cycles.start(store, CYCLE)
    cycle.base_model_id = "start-model"
    cycles.save_step(store, cycle, "evaluate", model="start-model", eval_before=before)
    cycles.save_step(store, cycle, "re-evaluate", eval_after=after, done=["evaluate", "re-evaluate"])

    def rate(run_id: str) -> float:
        return float(store.scalar("SELECT avg(success::INTEGER) FROM episodes WHERE run_id = ?", [run_id]))

    decision = gate(
        compare(store, before, after),
        metric="pass_rate",
        before=rate(before),
        after=rate(after),
        min_improvement=0.0,
        max_regression=0.05,
    )
    cycles.decide(
        store,
        cycle,
        candidate="candidate-model",
        metric="pass_rate",
        before=rate(before),
        after=rate(after),
        promoted=decision.promoted,
        reason=decision.reason,
    )
    cycles.finish(store, cycle)
    return CYCLE


_SHARED: dict[str, Path] = {}


def shared_cycle(tmp_path_factory) -> Workspace:  # noqa: ANN001  (pytest's TempPathFactory)
    """The recorded cycle, built once per test session: the tests that use it only read its store."""
    if "ws" not in _SHARED:
        ws = Workspace(tmp_path_factory.mktemp("recorded-cycle") / "ws")
        record_cycle(ws)
        _SHARED["ws"] = ws.path
    return Workspace(_SHARED["ws"])
