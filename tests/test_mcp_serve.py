"""``campflow env serve NAME --protocol mcp``: an MCP client from the SDK plays a served bootcamp, one episode per
session, and the episode is in the store."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from campflow.bootcamps import registry
from campflow.storage.store import Store


async def _play_calculator(workspace: Path) -> tuple[dict, list]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    command = [
        "-m", "campflow.cli", "env", "serve", "calculator", "--protocol", "mcp", "--transport", "stdio",
        "--run-id", "mcp-test", "--workspace", str(workspace), "--seed", "3",
    ]  # fmt: skip
    params = StdioServerParameters(
        command=sys.executable, args=command, cwd=workspace, env={"PYTHONPATH": str(Path.cwd())}
    )
    async with Client(params, cache=None, read_timeout_seconds=120, mode="legacy") as client:
        [resource] = (await client.list_resources()).resources
        task = json.loads((await client.read_resource(resource.uri)).contents[0].text)
        assert client.instructions and client.instructions in task["messages"][-1]["content"]
        tools = {t.name: t for t in (await client.list_tools()).tools}
        bootcamp = registry.make("calculator")
        instance = bootcamp.generate(task["level"], task["seed"])
        assert instance.id == task["instance_id"]
        for schema in bootcamp.tool_schemas(instance):  # the bootcamp's tools, with their schemas
            assert tools[schema["function"]["name"]].input_schema == schema["function"]["parameters"]
        assert len(tools) == len(bootcamp.tool_schemas(instance))
        state, outcome, results = bootcamp.new_state(instance), None, []
        bad = await client.call_tool("no_such_tool", {})
        results.append(bad)
        while outcome is None:
            action = bootcamp.oracle(instance, state)
            bootcamp.apply(instance, state, action)
            result = await client.call_tool(action.name, dict(action.arguments))
            results.append(result)
            outcome = result.structured_content
        after = await client.call_tool(action.name, dict(action.arguments))
        results.append(after)
    return outcome, results


def test_an_mcp_client_plays_a_served_calculator_to_reward_one_and_the_episode_is_in_the_store(tmp_path: Path) -> None:
    outcome, results = asyncio.run(_play_calculator(tmp_path))
    assert results[0].is_error and "unknown tool" in results[0].content[0].text
    assert outcome["reward"] == 1.0 and outcome["termination"] == "solved" and outcome["run_id"] == "mcp-test"
    assert results[-1].is_error and "episode has ended" in results[-1].content[0].text
    store = Store(tmp_path / "campflow.duckdb")
    [row] = store.query("SELECT run_id, bootcamp, model_id, reward, termination FROM episodes")
    assert row == {
        "run_id": "mcp-test",
        "bootcamp": "calculator",
        "model_id": "mcp-client",
        "reward": 1.0,
        "termination": "solved",
    }
    [run] = store.query("SELECT kind, status FROM runs WHERE run_id = 'mcp-test'")
    assert run == {"kind": "evaluate", "status": "completed"}
    [split] = store.query("SELECT split FROM instances")
    assert split == {"split": "train"}


def test_sessions_get_train_instances_only_never_eval_or_probe_ones() -> None:
    from campflow.bootcamps.splits import is_eval_seed
    from campflow.envserve.environment import TrainStream
    from campflow.mcp.serve import EpisodeServer
    from campflow.rollout.engine import RolloutSettings

    bootcamp = registry.make("calculator")
    first = [TrainStream(bootcamp, sorted(bootcamp.levels), set()).draw(seed) for seed in range(4)]
    held_out = {first[0].id, first[2].id}  # as if the store had them in its eval split and probes
    server = EpisodeServer(TrainStream(bootcamp, sorted(bootcamp.levels), held_out), RolloutSettings())
    served = [server.open(f"session-{key}").episode.instance for key in range(4)]
    assert len({i.id for i in served}) == 4
    assert not {i.id for i in served} & held_out
    assert not any(is_eval_seed(i.seed) for i in served)
    assert server.open("session-1").episode is server.open("session-1").episode  # one episode per session


def test_over_streamable_http_each_session_is_its_own_episode(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess

    from mcp import Client

    command = [
        sys.executable, "-m", "campflow.cli", "env", "serve", "calculator", "--protocol", "mcp", "--port", "0",
        "--run-id", "mcp-http", "--workspace", str(tmp_path),
    ]  # fmt: skip
    server = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())}
    )
    try:
        line = server.stderr.readline()
        assert " at http://" in line, line
        url = line.split(" at ", 1)[1].split(",", 1)[0]

        async def sessions() -> tuple[dict, dict, dict]:
            bootcamp = registry.make("calculator")
            async with Client(url, cache=None, mode="legacy") as one, Client(url, cache=None, mode="legacy") as two:
                tasks = [json.loads((await c.read_resource("campflow://task")).contents[0].text) for c in (one, two)]
                instance = bootcamp.generate(tasks[0]["level"], tasks[0]["seed"])
                state, outcome = bootcamp.new_state(instance), None
                while outcome is None:
                    action = bootcamp.oracle(instance, state)
                    bootcamp.apply(instance, state, action)
                    outcome = (await one.call_tool(action.name, dict(action.arguments))).structured_content
            return tasks[0], tasks[1], outcome

        first, second, outcome = asyncio.run(sessions())
        assert first["instance_id"] != second["instance_id"]
        assert outcome["reward"] == 1.0
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    assert server.returncode == 0  # a server's stop is how it is meant to end
    rows = Store(tmp_path / "campflow.duckdb").query(
        "SELECT instance_id, reward FROM episodes WHERE run_id = 'mcp-http'"
    )
    assert rows == [{"instance_id": first["instance_id"], "reward": 1.0}]
