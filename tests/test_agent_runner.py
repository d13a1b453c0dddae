"""``campflow eval --agent``: a user's agent program plays each episode behind the recording proxy and MCP.

The model is a real OpenAI-compatible server on 127.0.0.1 that answers as the oracle would
(:class:`~campflow.testing.scripted_server.ScriptedEndpoint`); the agents are the examples in
``examples/agents/`` and small programs written here, run as the processes campflow starts.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.config import load_config
from campflow.proxy.program import AgentProgram, AgentProgramError
from campflow.proxy.runner import AgentItem, AgentRunner, proxy_backend
from campflow.rollout.engine import RolloutSettings
from campflow.rollout.episode import Episode
from campflow.storage.workspace import Workspace
from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint
from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "examples" / "agents"
PYTHON = shlex.quote(sys.executable)


def _calculator(n: int) -> list:
    return eval_instances(registry.make("calculator"), n)


def _config(workspace: Path, url: str, **extra: object):
    overrides = {
        "workspace.path": str(workspace),
        "policy.kind": "openai",
        "policy.model": "scripted",
        "policy.base_url": url,
        "eval.bootcamps": ["calculator"],
        "eval.n": 2,
    }
    return load_config(None, {**overrides, **extra})


def _stored(workspace: Path, run_id: str) -> list[dict]:
    return Workspace.from_config(load_config(None, {"workspace.path": str(workspace)})).store.query(
        "SELECT episode_id, termination, reward, transcript, error, details FROM episodes WHERE run_id = ?", [run_id]
    )


def _check_solved_with_transcripts(workspace: Path, run_id: str, n: int) -> list[dict]:
    rows = _stored(workspace, run_id)
    assert len(rows) == n and {(r["termination"], r["reward"]) for r in rows} == {("solved", 1.0)}
    store = Workspace.from_config(load_config(None, {"workspace.path": str(workspace)})).store
    for row in rows:
        transcript = json.loads(row["transcript"])
        calls = [c for m in transcript if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        results = {m["tool_call_id"] for m in transcript if m["role"] == "tool"}
        assert calls[-1]["function"]["name"] == "submit" and results == {c["id"] for c in calls}
        recorded = store.scalar("SELECT count(*) FROM proxy_calls WHERE episode_id = ?", [row["episode_id"]])
        assert recorded == sum(1 for m in transcript if m["role"] == "assistant")
        assert json.loads(row["details"])["agent"]["exit_code"] == 0  # it stopped on its own, cleanly
        assert "reward" not in json.dumps(transcript)  # the agent is never shown its reward
    return rows


def test_the_openai_sdk_loop_example_solves_calculator_through_campflow_eval(workspace: Path) -> None:
    with ScriptedEndpoint(OracleScript(_calculator(1))) as server:
        agent = f"{PYTHON} {EXAMPLES / 'openai_loop.py'}"
        args = ["eval", "--agent", agent, "--policy", "openai", "--model", "scripted", "--base-url", server.url]
        done = run_cli(*args, "-b", "calculator", "-n", "1", "--workspace", str(workspace), "--run-id", "loop")
    assert done.returncode == 0, done.stderr
    _check_solved_with_transcripts(workspace, "loop", 1)


@pytest.mark.usefixtures("prefect_harness")
def test_the_agents_sdk_example_solves_calculator_and_stops_cleanly_after_its_episode(workspace: Path) -> None:
    from campflow.flows.evaluate import evaluate

    with ScriptedEndpoint(OracleScript(_calculator(2))) as server:
        agent = f"{PYTHON} {EXAMPLES / 'agents_sdk.py'}"
        summary = evaluate(_config(workspace, server.url), "sdk", agent=agent)
        assert summary.terminations == {"solved": 2} and summary.pass_rates == {"calculator": 1.0}
        first = _check_solved_with_transcripts(workspace, "sdk", 2)
        again = evaluate(_config(workspace, server.url), "sdk", agent=agent)
    # the same run id: its episodes stand under the same ids, and nothing is played again
    assert (again.ran, again.skipped) == (0, 2)
    assert [r["episode_id"] for r in _stored(workspace, "sdk")] == [r["episode_id"] for r in first]


def _run(
    workspace: Path, agent: str, timeout: float = 60.0, bootcamp=None, script=None, endpoint=None
) -> list[Episode]:
    """Run ``agent`` on one episode straight through the runner (a calculator episode answered by the oracle
    unless told otherwise), storing what it plays."""
    store = Workspace.from_config(load_config(None, {"workspace.path": str(workspace)})).store
    bootcamp = bootcamp or registry.make("calculator")
    instances = eval_instances(bootcamp, 1) if bootcamp.name == "calculator" else [bootcamp.generate(1, 0)]
    store.write_instances(instances, split="eval")
    store.start_run("direct", "evaluate", {}, "scripted")
    with endpoint or ScriptedEndpoint(script or OracleScript(instances)) as server:
        runner = AgentRunner(
            AgentProgram.parse(agent),
            proxy_backend(_config(workspace, server.url).policy),
            store,
            RolloutSettings(episode_timeout=timeout),
            "direct",
        )
        episodes = asyncio.run(runner.run([AgentItem(bootcamp, i, 0) for i in instances]))
    store.write_episodes(episodes)
    return episodes


def test_the_agents_sdk_example_solves_an_mcp_task_bootcamp(workspace: Path) -> None:
    from campflow.bootcamps.base import Action
    from campflow.mcp.tasks import build
    from campflow.sources import ImportSpec
    from campflow.testing.scripted_server import ReplyScript, action_message

    task = {
        "id": "open-two",
        "level": 1,
        "prompt": "Open account a with 5 and account b with 7.",
        "reference": [
            {"tool": "open_account", "arguments": {"name": "a", "balance": 5}},
            {"tool": "open_account", "arguments": {"name": "b", "balance": 7}},
        ],
        "checks": [{"call": {"tool": "balances"}, "equals": {"a": 5, "b": 7}}],
    }
    server = {"command": [sys.executable, str(REPO / "tests" / "mcp_servers" / "ledger_server.py"), "--seed", "{seed}"]}
    bootcamp = build(
        ImportSpec(name="mcp-ledger", adapter="mcp", source="ledger", options={"server": server, "tasks": [task]})
    )
    actions = [Action(call["tool"], call["arguments"]) for call in task["reference"]] + [Action("submit", {})]
    script = ReplyScript([action_message(action, f"call_{i}") for i, action in enumerate(actions)])
    (episode,) = _run(workspace, f"{PYTHON} {EXAMPLES / 'agents_sdk.py'}", bootcamp=bootcamp, script=script)
    assert (episode.termination, episode.reward) == ("solved", 1.0), episode.error
    assert episode.details["agent"] == {**episode.details["agent"], "exit_code": 0, "model_calls": 3}
    (row,) = _stored(workspace, "direct")
    names = [c["function"]["name"] for m in json.loads(row["transcript"]) for c in m.get("tool_calls", [])]
    assert names == ["open_account", "open_account", "submit"]


def test_an_agent_that_fails_ends_as_agent_error_with_the_tail_of_its_stderr(workspace: Path, tmp_path: Path) -> None:
    program = tmp_path / "failing.py"
    program.write_text(
        textwrap.dedent(
            """
            import sys, traceback
            try:
                raise RuntimeError("the agent's own bug")
            except RuntimeError:
                traceback.print_exc()
                sys.exit(3)
            """
        )
    )
    (episode,) = _run(workspace, f"{PYTHON} {program}")
    assert episode.termination == "agent_error" and episode.reward == 0.0
    assert episode.error.startswith("the agent program exited with code 3: RuntimeError: the agent's own bug")
    assert "Traceback (most recent call last)" in episode.error
    (row,) = _stored(workspace, "direct")
    assert row["termination"] == "agent_error" and "Traceback" in row["error"]


def test_an_agent_that_stops_because_the_model_failed_is_infra_error_not_its_own(workspace: Path) -> None:
    failing = ScriptedEndpoint(OracleScript(_calculator(1)), fail_rate=1.0)
    (episode,) = _run(workspace, f"{PYTHON} {EXAMPLES / 'openai_loop.py'}", script=failing.script, endpoint=failing)
    assert episode.termination == "infra_error" and episode.error.startswith("the model call failed (HTTP ")
    assert episode.details["agent"]["exit_code"] != 0  # the SDK gave up after its retries, the program failed


def _live_members(group: int) -> list[int]:
    """Processes of process group ``group`` that are not dead (zombies waiting for a reaper are dead)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            live.append(int(stat.parent.name))
    return live


def test_an_agent_that_sleeps_past_the_timeout_ends_as_timeout_with_its_process_group_gone(
    workspace: Path, tmp_path: Path
) -> None:
    pids = tmp_path / "pids.json"
    program = tmp_path / "sleeping.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import json, os, subprocess, time
            child = subprocess.Popen(["sleep", "600"])
            open({str(pids)!r}, "w").write(json.dumps([os.getpid(), child.pid, os.getpgid(0)]))
            time.sleep(600)
            """
        )
    )
    (episode,) = _run(workspace, f"{PYTHON} {program}", timeout=3.0)
    assert episode.termination == "timeout" and "process group was stopped" in episode.error
    leader, child, group = json.loads(pids.read_text())
    assert group == leader, "the program ran in a process group of its own"
    assert _live_members(group) == [] and child != leader


def test_a_function_agent_gets_its_episode_and_an_exit_without_submit_is_scored_unsolved(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quitter.py").write_text(
        textwrap.dedent(
            """
            import json, os

            async def run(task):
                assert task.base_url == os.environ["OPENAI_BASE_URL"] and task.base_url.endswith("/v1")
                assert task.mcp_url.endswith("/mcp/e/" + task.episode_id) and task.model == "scripted"
                assert task.task["messages"][-1]["content"] == task.prompt and task.timeout == 60
                print(json.dumps({"bootcamp": task.task["bootcamp"]}))
            """
        )
    )
    (episode,) = _run(workspace, "quitter:run")
    assert episode.termination == "wrong_answer" and episode.reward == 0.0
    assert episode.error == "the agent program exited without ending the episode (no final tool call)"
    assert episode.details["agent"]["exit_code"] == 0


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("", "expected a command"),
        ("python 'unclosed", "cannot be split into a command"),
        ("no-such-agent-program --fast", "command 'no-such-agent-program' not found"),
        ("no_such_agent_module:run", "module 'no_such_agent_module' is not importable"),
        ("python no_such_agent.py", "script 'no_such_agent.py' not found"),
    ],
)
def test_an_agent_value_campflow_cannot_run_is_one_error_naming_it(value: str, names: str) -> None:
    with pytest.raises(AgentProgramError, match=names) as caught:
        AgentProgram.parse(value)
    assert repr(value) in str(caught.value) and "\n" not in str(caught.value)


def test_campflow_eval_refuses_an_unrunnable_agent_in_one_line(workspace: Path) -> None:
    done = run_cli("eval", "--agent", "no-such-agent-program", "--policy", "openai", "--workspace", str(workspace))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "command 'no-such-agent-program' not found" in lines[0], lines
