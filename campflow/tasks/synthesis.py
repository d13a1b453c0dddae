"""Prefect tasks for failure mining, variant synthesis and the curriculum. Thin: the work is in
campflow.synthesis. They write to the store themselves, so run them in the flow's process (the
default thread runner does)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from campflow.agents.factory import build_policy
from campflow.config import CampflowConfig, PolicyConfig
from campflow.rollout.engine import RolloutSettings
from campflow.storage.workspace import Workspace
from campflow.synthesis.curriculum import update_curriculum
from campflow.synthesis.pipeline import analyze_run, run_policy_config, synthesize


@task(name="mine-failures", cache_policy=NO_CACHE)
def mine_failures_task(cfg: CampflowConfig, run_id: str) -> dict[str, int]:
    """Mine and cluster a run's model failures; returns the cluster sizes by cluster id."""
    analysis = analyze_run(Workspace.from_config(cfg).store, run_id, cfg.synthesis, bootcamps=cfg.eval.bootcamps)
    return {c.cluster_id: c.size for c in analysis.clusters}


@task(name="synthesize-variants", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=5)
def synthesize_task(
    cfg: CampflowConfig, run_id: str, policy_cfg: PolicyConfig | None = None, max_levels: dict[str, int] | None = None
) -> dict[str, Any]:
    """Synthesize, validate and record variants for a run's clusters, calibrated with the run's own policy
    (or ``policy_cfg``: the same checkpoint as the current ``serving`` reaches it, e.g. its running server);
    ``max_levels`` (bootcamp -> curriculum level) keeps them at the levels the cycle trains at.

    Retrying is safe: variants decided by the first attempt are not validated again.
    """
    store = Workspace.from_config(cfg).store
    policy = build_policy(policy_cfg or run_policy_config(store, run_id) or cfg.policy)
    summary = synthesize(
        store,
        run_id,
        cfg.synthesis,
        policy=policy,
        bootcamps=cfg.eval.bootcamps,
        rollout=RolloutSettings.from_config(cfg.rollout),
        max_levels=max_levels,
        hacker=cfg.integrity.hacker,
    )
    return {"run_id": summary.run_id, **summary.as_dict()}


@task(name="update-curriculum", cache_policy=NO_CACHE)
def update_curriculum_task(cfg: CampflowConfig, run_id: str) -> dict[str, int]:
    """Step the curriculum on a training run's train pass rates; returns the next level per bootcamp."""
    decisions = update_curriculum(
        Workspace.from_config(cfg).store, run_id, up=cfg.synthesis.curriculum_up, down=cfg.synthesis.curriculum_down
    )
    return {d.bootcamp: d.next_level for d in decisions if not d.cluster_id}
