"""Teacher collection for a cycle, as ``training.teacher`` says: the oracle, the current model itself
(best-of-k at a temperature, reached as ``serving`` says), a stronger model behind an endpoint, or a
model first and the oracle for the instances where none of its samples passed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campflow.config import CampflowConfig
from campflow.errors import ConfigError
from campflow.flows.collect import collect_flow
from campflow.serving import CheckpointServers


def teacher_config(cfg: CampflowConfig, servers: CheckpointServers, model_path: Path, teacher: str) -> CampflowConfig:
    """The config a collect run of ``teacher`` (``oracle``, ``self`` or ``endpoint``) uses."""
    out = cfg.model_copy(deep=True)
    t = cfg.training
    if teacher == "oracle":  # the grounded demonstrator: the oracle's answers, reached as an agent could
        out.policy.kind, out.policy.model = "demonstrator", None
        if cfg.rollout.agent is not None:  # answering the user's agent behind the proxy, in the model's tokens
            out.policy.model = str(model_path)
        return out
    out.training.collect_samples = t.self_samples
    if teacher == "self":
        out.policy = servers.policy(model_path).model_copy(deep=True)
        out.policy.temperature = t.self_temperature
        return out
    e = t.teacher_endpoint
    if not (e.model and e.base_url):
        raise ConfigError(
            "training.teacher_endpoint.model and .base_url are required for teacher "
            f"{t.teacher!r}, e.g. Qwen/Qwen3-32B at http://localhost:8000/v1"
        )
    out.policy.kind, out.policy.model, out.policy.base_url = "openai", e.model, e.base_url
    out.policy.api_key_env, out.policy.temperature, out.policy.max_tokens = e.api_key_env, e.temperature, e.max_tokens
    return out


def collect_teachers(
    cfg: CampflowConfig,
    servers: CheckpointServers,
    model_path: Path,
    cycle_id: str,
    runner: Any,
    *,
    variant_ids: list[str] | None = None,
    levels: dict[str, list[int]] | None = None,
) -> list[str]:
    """Run the configured teacher(s) on the cycle's training instances (``synthesis.share`` of them from
    ``variant_ids``, the rest generated); returns the collect run ids (the first is always ``<cycle>-collect``).

    A model teacher (``self``, ``endpoint``) plays at the curriculum's ``levels``: it practises where it can
    pass. The demonstrator (``oracle``) solves every level, so its transcripts cover all of
    ``training.levels`` from the first cycle: held back to the curriculum's first level, a cycle never showed
    level 2 and left it at 0% in both bootcamps (benchmarks/RESULTS.md, "Learning from the mistake")."""
    first, *fallback = cfg.training.teacher.split("+")
    run_id = f"{cycle_id}-collect"
    collect_flow.with_options(task_runner=runner)(
        teacher_config(cfg, servers, model_path, first),
        run_id,
        variant_ids=variant_ids,
        levels=None if first == "oracle" else levels,
    )
    servers.check()
    runs = [run_id]
    if fallback:  # the oracle only where no sample of the model passed
        from campflow.storage.workspace import Workspace

        failed = [
            r["instance_id"]
            for r in Workspace.from_config(cfg).store.query(
                "SELECT instance_id FROM episodes WHERE run_id = ? GROUP BY instance_id "
                "HAVING max(success::INTEGER) = 0 ORDER BY instance_id",
                [run_id],
            )
        ]
        if failed:
            oracle_run = f"{cycle_id}-collect-oracle"
            collect_flow.with_options(task_runner=runner)(
                teacher_config(cfg, servers, model_path, "oracle"), oracle_run, only_ids=failed
            )
            runs.append(oracle_run)
    return runs


def collect_corrections(
    cfg: CampflowConfig,
    servers: CheckpointServers,
    model_path: Path,
    cycle_id: str,
    *,
    levels: dict[str, list[int]] | None = None,
) -> str:
    """On-policy corrections (``training.corrections``): the model at ``model_path`` plays
    ``training.corrections.n`` train instances per bootcamp at the curriculum's ``levels``, and the
    demonstrator labels every state it reaches (:mod:`campflow.training.corrections`). The episodes are
    recorded as run ``<cycle>-corrections`` (kind ``corrections``), the labels in ``corrections``; returns
    the run id. No eval or probe instance is played."""
    import asyncio

    from campflow.agents.factory import build_policy
    from campflow.bootcamps.splits import assert_not_held_out
    from campflow.flows.collect import collection_instances
    from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
    from campflow.storage.workspace import Workspace
    from campflow.training.corrections import CorrectingPolicy, write_corrections

    run_id = f"{cycle_id}-corrections"
    ws = Workspace.from_config(cfg)
    store = ws.store
    sub = cfg.model_copy(deep=True)
    sub.training.collect_n = cfg.training.corrections.n
    sub.synthesis.share = 0.0  # generated train instances only: a variant's probes stay unplayed
    instances, _ = collection_instances(sub, ws, levels=levels)
    assert_not_held_out((i.id for i in instances), store.eval_ids(), store.probe_ids(), what="corrections")
    store.write_instances(instances, split="train")
    policy = CorrectingPolicy(build_policy(servers.policy(model_path)), cfg.training.corrections.follow)
    store.start_run(run_id, "corrections", cfg.model_dump(mode="json"), policy.model_id)
    try:
        bootcamps = {b.name: b for b in ws.bootcamps(cfg.training.bootcamps)}
        specs = [EpisodeSpec(bootcamps[i.bootcamp], i) for i in instances]

        async def play() -> list:
            try:
                return await run_episodes(
                    specs,
                    policy,
                    RolloutSettings.from_config(cfg.rollout),
                    run_id=run_id,
                    concurrency=cfg.rollout.concurrency,
                )
            finally:
                await policy.model.aclose()

        episodes = asyncio.run(play())
        store.write_episodes(episodes)
        labels = write_corrections(store, run_id, policy.corrections)
        agreed = sum(c.agreed for c in policy.corrections)
        store.finish_run(
            run_id,
            "completed",
            {"episodes": len(episodes), "corrections": labels, "agreed": agreed, "follow": policy.follow},
        )
    except BaseException as exc:
        store.fail_run(run_id, exc)
        raise
    servers.check()
    return run_id
