"""``campflow env serve NAME --protocol mcp`` gives each client session its own episode, in every protocol revision.

The OpenAI Agents SDK's own MCP clients (``MCPServerStreamableHttp``, ``MCPServerStdio``, on ``mcp`` 2.x: revision
2026-07-28 where the server allows it, which has no session) and the legacy ``mcp`` client (``initialize``) play a
served calculator, one session after another, against a real ``campflow env serve`` process; the store must hold
each session's episode once, on an instance of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from campflow.bootcamps import registry
from campflow.storage.store import Store

pytest.importorskip("agents.mcp")

SERVE = [sys.executable, "-m", "campflow.cli", "env", "serve", "calculator", "--protocol", "mcp"]
ENV = {**os.environ, "PYTHONPATH": str(Path.cwd())}


@contextlib.contextmanager
def _http_server(workspace: Path, run_id: str) -> Iterator[str]:
    """A ``campflow env serve --protocol mcp`` process over streamable HTTP; yields its ``/mcp`` URL."""
    command = [*SERVE, "--port", "0", "--run-id", run_id, "--workspace", str(workspace)]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        line = server.stderr.readline()
        assert " at http://" in line, line
        yield line.split(" at ", 1)[1].split(",", 1)[0]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


async def _play(call: Any, read_task: Any) -> tuple[dict, dict, Any]:
    """Play the session's episode with the calculator's oracle: (its task, the final result's outcome, the result
    of one more call after the end)."""
    task = json.loads((await read_task()).contents[0].text)
    bootcamp = registry.make("calculator")
    instance = bootcamp.generate(task["level"], task["seed"])
    assert instance.id == task["instance_id"]
    state, outcome = bootcamp.new_state(instance), None
    while outcome is None:
        action = bootcamp.oracle(instance, state)
        bootcamp.apply(instance, state, action)
        outcome = (await call(action.name, dict(action.arguments))).structured_content
    return task, outcome, await call(action.name, dict(action.arguments))


async def _agents_sdk_session(url: str) -> tuple[dict, dict, Any, str]:
    from agents.mcp import MCPServerStreamableHttp

    async with MCPServerStreamableHttp(params={"url": url}, cache_tools_list=False) as server:
        task, outcome, after = await _play(server.call_tool, lambda: server.read_resource("campflow://task"))
        return task, outcome, after, server.session.protocol_version


def _check_played(played: list[tuple[dict, dict, Any]]) -> None:
    """Each session: its own instance, solved, and a call after the end refused naming that session's episode."""
    assert len({task["instance_id"] for task, _, _ in played}) == len(played)
    for task, outcome, after in played:
        assert outcome["reward"] == 1.0 and outcome["episode_id"] == task["episode_id"]
        assert after.is_error and after.structured_content is None
        assert f"episode has ended (episode {task['episode_id']}: solved" in after.content[0].text


def _recorded(workspace: Path, run_id: str) -> list[dict]:
    return Store(workspace / "campflow.duckdb").query(
        "SELECT episode_id, instance_id, reward FROM episodes WHERE run_id = ? ORDER BY sample_index", [run_id]
    )


def test_agents_sdk_http_sessions_in_a_row_each_play_their_own_episode_recorded_once(tmp_path: Path) -> None:
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    with _http_server(tmp_path, "mcp-sdk-http") as url:

        async def sessions() -> tuple[list, list, list, str]:
            import httpx

            # at /mcp the SDK's discover probe is refused (a 2026-07-28 request names no episode there), so it
            # falls back to initialize: one legacy session, one episode, per connect
            at_mcp = [await _agents_sdk_session(url) for _ in range(10)]
            # an episode URL is an identity that 2026-07-28 carries: the SDK stays on it
            async with httpx.AsyncClient() as http:
                urls = [(await http.post(url.removesuffix("/mcp") + "/episodes")).json() for _ in range(2)]
            at_urls = [await _agents_sdk_session(made["url"]) for made in urls]
            for made, (task, *_) in zip(urls, at_urls, strict=True):
                assert (made["episode"], made["instance_id"]) == (task["episode_id"], task["instance_id"])
            async with Client(url, cache=None, mode="legacy") as legacy:  # the handshake client, as before
                legacy_played = await _play(legacy.call_tool, lambda: legacy.read_resource("campflow://task"))
            async with Client(urls[0]["url"], cache=None, mode="legacy") as legacy:  # an episode URL: that episode
                ended = await legacy.call_tool("submit", {"answer": 0})
                assert ended.is_error and f"episode {urls[0]['episode']}: solved" in ended.content[0].text
            async with Client(url, cache=None, mode="2026-07-28") as pinned:  # no fallback: one clear refusal
                with pytest.raises(MCPError, match="has no session, so a request to /mcp names no episode: POST"):
                    await pinned.list_tools()
            async with Client(url + "/e/0123456789ab", cache=None, mode="2026-07-28") as unknown:
                with pytest.raises(MCPError, match="no episode '0123456789ab' on this server; POST /episodes"):
                    await unknown.list_tools()
            return at_mcp, at_urls, [legacy_played], at_urls[0][3]

        at_mcp, at_urls, legacy, url_revision = asyncio.run(sessions())
    assert {revision for *_, revision in at_mcp} == {"2025-11-25"} and url_revision == "2026-07-28"
    played = [p[:3] for p in at_mcp + at_urls] + legacy
    _check_played(played)
    rows = _recorded(tmp_path, "mcp-sdk-http")
    assert [row["episode_id"] for row in rows] == [task["episode_id"] for task, _, _ in played]
    assert [row["instance_id"] for row in rows] == [task["instance_id"] for task, _, _ in played]
    assert {row["reward"] for row in rows} == {1.0}


def test_agents_sdk_stdio_sessions_in_a_row_each_play_a_fresh_instance_recorded_once(tmp_path: Path) -> None:
    from agents.mcp import MCPServerStdio

    # what a user writes once and connects per episode: the same command each time, no --seed
    command = [*SERVE[1:], "--transport", "stdio", "--run-id", "mcp-sdk-stdio", "--workspace", str(tmp_path)]
    params = {"command": sys.executable, "args": command, "env": ENV, "cwd": str(tmp_path)}

    async def sessions() -> list[tuple[dict, dict, Any]]:
        played = []
        for _ in range(10):
            async with MCPServerStdio(params=params, cache_tools_list=False, client_session_timeout_seconds=60) as s:
                assert s.session.protocol_version == "2026-07-28"  # the connection is the episode, in any revision
                played.append(await _play(s.call_tool, lambda s=s: s.read_resource("campflow://task")))
        return played

    played = asyncio.run(sessions())
    _check_played(played)
    rows = _recorded(tmp_path, "mcp-sdk-stdio")
    assert [row["episode_id"] for row in rows] == [task["episode_id"] for task, _, _ in played]  # samples 0..9
    assert {row["reward"] for row in rows} == {1.0}
    [run] = Store(tmp_path / "campflow.duckdb").query("SELECT status FROM runs WHERE run_id = 'mcp-sdk-stdio'")
    assert run == {"status": "completed"}


def test_the_docs_snippet_gets_an_episode_per_session_and_one_per_episode_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "mcp.md").read_text()
    snippet = doc.split("<!-- runs-in: tests/test_mcp_serve_sessions.py -->\n```python\n", 1)[1].split("```", 1)[0]
    with _http_server(tmp_path, "mcp-docs") as url:
        base = url.removesuffix("/mcp")
        exec(compile(snippet.replace('"http://127.0.0.1:8000"', repr(base)), "docs/mcp.md", "exec"), {})
    [one, two], [made, played] = (line.split() for line in capsys.readouterr().out.splitlines())
    assert made == played and len({one, two, made}) == 3
