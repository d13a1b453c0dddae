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
    ``variant_ids``, the rest at the curriculum's ``levels``); returns the collect run ids (the first is
    always ``<cycle>-collect``)."""
    first, *fallback = cfg.training.teacher.split("+")
    run_id = f"{cycle_id}-collect"
    collect_flow.with_options(task_runner=runner)(
        teacher_config(cfg, servers, model_path, first), run_id, variant_ids=variant_ids, levels=levels
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
