"""MCP bootcamps: episodes through the engine vs the same tool calls made directly with the SDK.

Both sides play the reference solution of the same ledger tasks (``tests/mcp_servers/ledger_server.py
--sdk``: the SDK's MCPServer, a real server's start) on a fresh stdio server per episode, then make the tasks' check calls on the final
state, at the same concurrency. The engine adds the guard process (``campflow/mcp/guard.py``), the
episode's folder and fixtures, messages, parsing and validation, the transcript and scoring; the direct
side is ``mcp.Client`` over ``StdioServerParameters``, nothing else. Goal: ratio <= 1.2 (a server start
dominates an episode, so the engine's share should be small).

The start-up cost of one episode (start the server, initialize, list its tools, stop it) is measured
alone, one after another, with and without the guard. Last, the hack battery plays every task once
(``campflow/integrity/served.py``: each exploit an episode on a fresh server, four at a time), as
``campflow import mcp`` does: its episodes per task and seconds per task, against one engine episode.

Run: python benchmarks/bench_mcp.py [--episodes 8] [--concurrency 4] [--starts 4]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from campflow.agents.oracle import OraclePolicy
from campflow.mcp.server import ServerSpec, open_server
from campflow.mcp.tasks import McpTaskParams, build
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
from campflow.sources import ImportSpec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.test_mcp import LEDGER, LEDGER_TASKS  # noqa: E402  (the tasks the tests vet)

COMMAND = [sys.executable, LEDGER, "--sdk", "--seed", "{seed}"]


def bootcamp():
    tasks = LEDGER_TASKS[:2]
    spec = ImportSpec(
        name="bench-ledger", adapter="mcp", source="ledger", options={"server": {"command": COMMAND}, "tasks": tasks}
    )
    return build(spec)


def instances(b, n: int) -> list:
    ids = [t["id"] for t in LEDGER_TASKS[:2]]
    return [b.generate(McpTaskParams(level=1, task=ids[i % 2]), i) for i in range(n)]


async def engine(b, insts: list, concurrency: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    eps = await run_episodes(
        [EpisodeSpec(b, i) for i in insts],
        OraclePolicy(),
        RolloutSettings(episode_timeout=120),
        concurrency=concurrency,
    )
    return time.perf_counter() - t0, sum(e.success for e in eps)


async def direct(insts: list, concurrency: int) -> tuple[float, int]:
    """The same calls through the SDK alone: a fresh server, the reference calls, the check calls."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    gate = asyncio.Semaphore(concurrency)

    async def one(inst) -> bool:
        import tempfile

        async with gate:
            folder = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
            for rel, text in inst.data["fixtures"].items():
                (folder / rel).write_text(text)
            argv = [a.replace("{seed}", str(inst.seed)) for a in COMMAND]
            params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=folder)
            async with Client(params, cache=None, mode="legacy") as client:
                await client.list_tools()
                for call in inst.data["reference"]:
                    args = {
                        k: (v.replace("{workdir}", str(folder)) if isinstance(v, str) else v)
                        for k, v in call["arguments"].items()
                    }
                    await client.call_tool(call["tool"], args)
                results = [
                    await client.call_tool(c["call"]["tool"], c["call"]["arguments"])
                    for c in inst.data["checks"]
                    if c["call"]
                ]
            return all(not r.is_error for r in results)

    t0 = time.perf_counter()
    ok = await asyncio.gather(*(one(i) for i in insts))
    return time.perf_counter() - t0, sum(ok)


async def startup(guarded: bool, n: int) -> float:
    """Mean seconds to start a server, initialize, list its tools and stop it, one after another."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    t0 = time.perf_counter()
    for seed in range(n):
        if guarded:
            async with open_server(ServerSpec(command=COMMAND), seed=seed):
                pass
        else:
            params = StdioServerParameters(
                command=COMMAND[0], args=[a.replace("{seed}", str(seed)) for a in COMMAND[1:]]
            )
            async with Client(params, cache=None, mode="legacy") as client:
                await client.list_tools()
    return (time.perf_counter() - t0) / n


def battery(b) -> tuple[int, int, float, bool]:
    """The hack battery on every task: (tasks, episodes with the oracle's, seconds, passed)."""
    from campflow.integrity.battery import run_battery
    from campflow.mcp.tasks import task_instances

    tasks = task_instances(b)
    t0 = time.perf_counter()
    report = run_battery(b, instances=tasks, partial_refuses=False)
    return len(tasks), len(report.probes) + len(tasks), time.perf_counter() - t0, report.passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--starts", type=int, default=4)
    args = parser.parse_args()
    b = bootcamp()
    insts = instances(b, args.episodes)
    t_direct, ok_direct = asyncio.run(direct(insts, args.concurrency))
    t_engine, solved = asyncio.run(engine(b, insts, args.concurrency))
    print(
        f"direct SDK: {args.episodes} episodes in {t_direct:.2f}s ({args.episodes / t_direct:.2f} episodes/s), {ok_direct} answered every check call"
    )
    print(
        f"engine:     {args.episodes} episodes in {t_engine:.2f}s ({args.episodes / t_engine:.2f} episodes/s), {solved} solved"
    )
    bare = asyncio.run(startup(False, args.starts))
    guarded = asyncio.run(startup(True, args.starts))
    print(f"start-up per episode: {guarded:.2f}s through campflow (guard, folder, list_tools), {bare:.2f}s bare SDK")
    tasks, played, t_battery, passed = battery(b)
    print(
        f"hack battery: {tasks} tasks, {played} episodes ({played / tasks:.1f} per task, the oracle's included) "
        f"in {t_battery:.1f}s ({t_battery / tasks:.1f}s per task at concurrency 4), passed: {passed}"
    )
    print(f"RATIO engine/direct wall time = {t_engine / t_direct:.2f} (goal <= 1.2)")
    print(f"RATIO start-up campflow/bare = {guarded / bare:.2f}")
    per_episode = t_engine / args.episodes
    print(f"RATIO battery per task / engine episode = {t_battery / tasks / per_episode:.1f}")


if __name__ == "__main__":
    main()
