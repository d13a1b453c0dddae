"""Running planned episodes through rollout tasks and recording them: shared by the flows."""

from __future__ import annotations

from prefect.futures import as_completed

from campflow import progress
from campflow.config import PolicyConfig, RolloutConfig
from campflow.flows.runners import in_process
from campflow.sources import registered_imports
from campflow.storage.store import Store
from campflow.tasks.rollout import ShardItem, rollout_shard


def chunks(items: list[ShardItem], size: int) -> list[list[ShardItem]]:
    """``items`` in consecutive shards of at most ``size``."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def record_rollouts(
    store: Store,
    items: list[ShardItem],
    policy: PolicyConfig,
    rollout: RolloutConfig,
    run_id: str,
    meter: progress.Throughput | None = None,
) -> int:
    """Run ``items`` as rollout tasks on the flow's task runner, writing each shard's episodes as it
    finishes (so a crash loses at most the shards in flight); returns how many were written. ``meter``
    counts every written episode's tokens and policy latency."""
    reporter = progress.current()
    reporter.start("episodes", "episodes", len(items))
    imports = registered_imports()  # rollout workers in other processes must register them too
    futures = [
        rollout_shard.submit(shard, policy, rollout, run_id, imports) for shard in chunks(items, rollout.shard_size)
    ]
    written = 0
    for future in as_completed(futures):
        episodes = future.result()
        written += store.write_episodes(episodes)
        for episode in episodes:
            if meter is not None:
                meter.add(episode.tokens, episode.turns, episode.latency_s)
            if not in_process(rollout):
                reporter.episode("episodes", episode.tokens, episode.turns, episode.latency_s)
    reporter.finish("episodes")
    return written
