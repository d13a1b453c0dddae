"""RL's part of a cycle: find the learnable band of the SFT checkpoint, train on it, measure the effect.

GRPO learns only from groups whose rewards differ, so its prompts are the train instances where the
model's pass@k lies strictly between 0 and 1 (``training.rl.band_samples`` samples each, at the RL
temperature). A share of the band (``band_holdout``) is held out of training; the SFT and the RL
checkpoint both play it with the same samples, so RL's effect is measured on instances neither saw
in RL, apart from the selection bias both share.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from campflow import progress
from campflow.agents.vision import observation_mode
from campflow.bootcamps.base import Instance
from campflow.bootcamps.served import ServedTools
from campflow.config import CampflowConfig
from campflow.flows.collect import collect_flow
from campflow.storage.schema import RETRYABLE_SQL
from campflow.storage.store import Store
from campflow.storage.workspace import Workspace
from campflow.training.rl import rl_instances


def sampling_policy(cfg: CampflowConfig, path: Path) -> CampflowConfig:
    """``cfg`` with the local model at ``path`` sampling at the RL temperature."""
    out = cfg.model_copy(deep=True)
    out.policy.kind, out.policy.model = "local", str(path)
    out.policy.temperature = cfg.training.rl.temperature
    return out


@dataclass
class Band:
    """The learnable band of a model: RL's prompts and the instances held out to measure RL on."""

    run_id: str
    calibrated: int
    prompts: list[str]
    holdout: list[str]


def find_band(cfg: CampflowConfig, runner: object, sft_path: Path, run_id: str, levels: dict[str, list[int]]) -> Band:
    """Calibrate the SFT checkpoint on train instances at ``levels`` and split its band."""
    ws = Workspace.from_config(cfg)
    rl = cfg.training.rl
    observation = observation_mode(cfg.rollout.observation, "local", str(sft_path))
    candidates = rl_instances(ws.store, cfg.training.bootcamps, rl.instances_per_bootcamp, rl.seed, levels, observation)
    shared = sorted({i.bootcamp for i in candidates if _shared_server(ws, i)})
    if shared:  # TRL plays a batch's rollouts side by side; one shared server state cannot hold them apart
        progress.current().note(f"no RL on {', '.join(shared)}: its episodes share one URL server's state")
        candidates = [i for i in candidates if i.bootcamp not in shared]
    ws.store.write_instances(candidates, split="train")
    collect_flow.with_options(task_runner=runner)(
        sampling_policy(cfg, sft_path),
        run_id,
        only_ids=[i.id for i in candidates],
        kind="calibrate",
        samples=rl.band_samples,
    )
    band = band_ids(ws.store, run_id)
    ordered = sorted(band, key=lambda iid: hashlib.sha256(f"holdout:{iid}".encode()).hexdigest())
    held = round(rl.band_holdout * len(ordered)) if len(ordered) > 1 else 0
    prompts = sorted(ordered[held:])
    if rl.band_balance and prompts:
        prompts = balanced(prompts, band_groups(ws.store, run_id, prompts))
    return Band(run_id, len(candidates), prompts, sorted(ordered[:held]))


def band_groups(store: Store, run_id: str, instance_ids: list[str]) -> dict[str, tuple[int, str]]:
    """Each band instance's (level, divergence kind): the commonest kind among its failed calibration
    samples (:mod:`campflow.synthesis.divergence`; ``none`` where none was found)."""
    from campflow.synthesis.divergence_records import record_divergences

    record_divergences(store, run_id)
    rows = store.query(
        """SELECT e.instance_id, any_value(e.level) AS level,
                  coalesce(mode(d.kind) FILTER (WHERE d.kind IS NOT NULL), 'none') AS kind
           FROM episodes e LEFT JOIN divergences d ON d.run_id = e.run_id AND d.episode_id = e.episode_id
           WHERE e.run_id = ? AND e.instance_id IN (SELECT unnest(?)) GROUP BY e.instance_id""",
        [run_id, instance_ids],
    )
    return {r["instance_id"]: (int(r["level"] or 0), r["kind"]) for r in rows}


def balanced(prompts: list[str], groups: dict[str, tuple[int, str]]) -> list[str]:
    """``prompts`` with no (level, kind) group above an equal share of them: smaller groups kept whole, the
    larger cut to the share (which ones: by a hash of the id, so the same band keeps the same prompts)."""
    by_group: dict[tuple[int, str], list[str]] = {}
    for iid in prompts:
        by_group.setdefault(groups.get(iid, (0, "none")), []).append(iid)
    share = -(-len(prompts) // len(by_group))
    kept = []
    for members in by_group.values():
        members.sort(key=lambda iid: hashlib.sha256(f"balance:{iid}".encode()).hexdigest())
        kept += members[:share]
    return sorted(kept)


def _shared_server(ws: Workspace, instance: Instance) -> bool:
    bootcamp = ws.bootcamp(instance.bootcamp)
    return isinstance(bootcamp, ServedTools) and bootcamp.shared_server(instance) is not None


def band_ids(store: Store, run_id: str) -> list[str]:
    """Instances of ``run_id`` some but not all of whose measured samples passed."""
    rows = store.query(
        f"""SELECT instance_id FROM episodes WHERE run_id = ? AND termination NOT IN {RETRYABLE_SQL}
                           GROUP BY instance_id HAVING bool_or(success) AND NOT bool_and(success)
                           ORDER BY instance_id""",
        [run_id],
    )
    return [r["instance_id"] for r in rows]


def measure(cfg: CampflowConfig, runner: object, path: Path, run_id: str, instance_ids: list[str]) -> float:
    """The pass rate of the local model at ``path`` on ``instance_ids``, ``band_samples`` each."""
    collect_flow.with_options(task_runner=runner)(
        sampling_policy(cfg, path),
        run_id,
        only_ids=instance_ids,
        kind="calibrate",
        samples=cfg.training.rl.band_samples,
    )
    store = Workspace.from_config(cfg).store
    value = store.scalar(
        f"SELECT avg(success::INTEGER) FROM episodes WHERE run_id = ? AND termination NOT IN {RETRYABLE_SQL}", [run_id]
    )
    return float(value or 0.0)
