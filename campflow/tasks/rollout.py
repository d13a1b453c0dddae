"""Prefect tasks that run episodes. Thin: the work is in campflow.rollout."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from campflow import progress
from campflow.agents.factory import build_policy
from campflow.bootcamps import registry
from campflow.bootcamps.base import Instance
from campflow.config import PolicyConfig, RolloutConfig
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, rollout
from campflow.rollout.episode import Episode


@dataclass(frozen=True)
class ShardItem:
    """One episode to run, small enough to ship to a remote worker: the instance is rebuilt there."""

    bootcamp: str
    params: dict[str, Any]
    seed: int
    instance_id: str
    sample: int


def shard_items(instances: Iterable[Instance], samples: int, skip: set[tuple[str, int]] = frozenset()) -> list[ShardItem]:
    """Every (instance, sample) pair not in ``skip``."""
    return [ShardItem(i.bootcamp, i.params.model_dump(mode="json"), i.seed, i.id, k)
            for i in instances for k in range(samples) if (i.id, k) not in skip]


def settings_from(cfg: RolloutConfig) -> RolloutSettings:
    """Engine limits from the rollout config section."""
    return RolloutSettings(
        max_turns=cfg.max_turns, episode_timeout=cfg.episode_timeout,
        max_consecutive_errors=cfg.max_consecutive_errors, max_calls_per_turn=cfg.max_calls_per_turn,
        max_reply_chars=cfg.max_reply_chars, max_observation_chars=cfg.max_observation_chars,
        max_context_tokens=cfg.max_context_tokens,
    )


def specs_for(items: Sequence[ShardItem]) -> list[EpisodeSpec]:
    """Rebuild the instances of a shard, checking that each still has the id it was planned with."""
    specs = []
    for item in items:
        bootcamp = registry.make(item.bootcamp)
        instance = bootcamp.generate(item.params, item.seed)
        if instance.id != item.instance_id:
            raise RuntimeError(f"{item.bootcamp} instance {item.instance_id} regenerated as {instance.id}: "
                               "the bootcamp changed without a version bump")
        specs.append(EpisodeSpec(bootcamp, instance, item.sample))
    return specs


@task(name="rollout-shard", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def rollout_shard(items: list[ShardItem], policy: PolicyConfig, rollout_cfg: RolloutConfig, run_id: str) -> list[Episode]:
    """Run a shard of episodes with the engine; episodes come back to the flow, which writes them."""
    reporter = progress.current()
    return rollout(specs_for(items), build_policy(policy), settings_from(rollout_cfg), run_id=run_id,
                   concurrency=rollout_cfg.concurrency, on_episode=lambda _: reporter.advance("episodes"))
