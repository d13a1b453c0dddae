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
from campflow.sources import ImportSpec, ensure_registered


@dataclass(frozen=True)
class ShardItem:
    """One episode to run, small enough to ship to a remote worker: the instance is rebuilt there."""

    bootcamp: str
    params: dict[str, Any]
    seed: int
    instance_id: str
    sample: int


def shard_items(
    instances: Iterable[Instance], samples: int, skip: set[tuple[str, int]] = frozenset()
) -> list[ShardItem]:
    """Every (instance, sample) pair not in ``skip``."""
    return [
        ShardItem(i.bootcamp, i.params.model_dump(mode="json"), i.seed, i.id, k)
        for i in instances
        for k in range(samples)
        if (i.id, k) not in skip
    ]


def specs_for(items: Sequence[ShardItem]) -> list[EpisodeSpec]:
    """Rebuild the instances of a shard, checking that each still has the id it was planned with."""
    specs = []
    for item in items:
        bootcamp = registry.make(item.bootcamp)
        instance = bootcamp.generate(item.params, item.seed)
        if instance.id != item.instance_id:
            raise RuntimeError(
                f"{item.bootcamp} instance {item.instance_id} regenerated as {instance.id}: "
                "the bootcamp changed without a version bump"
            )
        specs.append(EpisodeSpec(bootcamp, instance, item.sample))
    return specs


@task(name="rollout-shard", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def rollout_shard(
    items: list[ShardItem],
    policy: PolicyConfig,
    rollout_cfg: RolloutConfig,
    run_id: str,
    imports: list[ImportSpec] | None = None,
) -> list[Episode]:
    """Run a shard of episodes with the engine; episodes come back to the flow, which writes them.

    ``imports`` are the specs of imported bootcamps the shard may name: a worker in another process
    (Ray) knows only the built-in bootcamps until they are registered here.
    """
    ensure_registered(imports)
    reporter = progress.current()

    def finished(episode: Episode) -> None:
        episode.freeze()  # serialize here, in the worker, not in the one process that writes the store
        reporter.episode("episodes", episode.tokens, episode.turns, episode.latency_s)

    return rollout(
        specs_for(items),
        build_policy(policy),
        RolloutSettings.from_config(rollout_cfg),
        run_id=run_id,
        concurrency=rollout_cfg.concurrency,
        on_episode=finished,
    )
