"""Running planned episodes through rollout tasks and recording them: shared by the flows."""

from __future__ import annotations

import queue
from collections.abc import Iterator

from prefect.futures import PrefectFuture

from campflow import progress
from campflow.config import PolicyConfig, RolloutConfig
from campflow.flows.runners import ClusterWatch, in_process, spread
from campflow.rollout.episode import Episode
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
    counts every written episode's tokens and policy latency. With ``rollout.agent`` the user's agent plays
    them (:func:`record_agent_rollouts`)."""
    if rollout.agent is not None:
        return record_agent_rollouts(store, items, policy, rollout, run_id, meter)
    reporter = progress.current()
    reporter.start("episodes", "episodes", len(items))
    imports = registered_imports()  # rollout workers in other processes must register them too
    with spread(rollout):
        futures = [
            rollout_shard.submit(shard, policy, rollout, run_id, imports) for shard in chunks(items, rollout.shard_size)
        ]
    written = 0
    for future in finished(futures, ClusterWatch(rollout, run_id)):
        episodes = future.result()
        written += store.write_episodes(episodes)
        for episode in episodes:
            if meter is not None:
                meter.add(episode.tokens, episode.turns, episode.latency_s)
            if not in_process(rollout):
                reporter.episode("episodes", episode.tokens, episode.turns, episode.latency_s)
    reporter.finish("episodes")
    return written


def finished(futures: list[PrefectFuture], watch: ClusterWatch, every: float = 2.0) -> Iterator[PrefectFuture]:
    """``futures`` in the order they finish; while none finishes, ``watch`` is checked every ``every`` s."""
    done: queue.Queue[PrefectFuture] = queue.Queue()
    for future in futures:
        future.add_done_callback(done.put)
    for _ in futures:
        while True:
            try:
                yield done.get(timeout=every)
                break
            except queue.Empty:
                watch.check()


def record_agent_rollouts(
    store: Store,
    items: list[ShardItem],
    policy: PolicyConfig,
    rollout: RolloutConfig,
    run_id: str,
    meter: progress.Throughput | None = None,
) -> int:
    """Play ``items`` with the user's agent program ``rollout.agent`` (``campflow eval --agent``, ``improve
    --agent``) instead of the engine's own loop: ``policy`` answers behind the recording proxy, each episode's
    tools are served over MCP (:mod:`campflow.proxy.runner`). Each episode is written as it ends; returns how
    many were."""
    import asyncio

    from campflow.proxy.program import AgentProgram
    from campflow.proxy.runner import AgentRunner, agent_items, proxy_backend
    from campflow.rollout.engine import RolloutSettings

    assert rollout.agent is not None
    program = AgentProgram.parse(rollout.agent)
    reporter = progress.current()
    reporter.start("episodes", "episodes", len(items))
    written = 0

    def write(episode: Episode) -> None:
        nonlocal written
        written += store.write_episodes([episode])
        if meter is not None:
            meter.add(episode.tokens, episode.turns, episode.latency_s)
        reporter.episode("episodes", episode.tokens, episode.turns, episode.latency_s)

    runner = AgentRunner(
        program,
        proxy_backend(policy),
        store,
        RolloutSettings.from_config(rollout),
        run_id,
        concurrency=rollout.concurrency,
    )
    asyncio.run(runner.run(agent_items(items), on_episode=write))
    reporter.finish("episodes")
    return written
