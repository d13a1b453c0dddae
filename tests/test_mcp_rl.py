"""GRPO on MCP bootcamps: TRL's environments drive a fresh server per episode, the reward is read off the
final server state, and no server outlives its episode or a killed training run.

Each task has a check a fresh server already passes (the fixture the ledger reads back; ``SELECT 1`` on
sqlite) and one only the task's work passes, so a rollout's reward is 0.5 where the model did nothing
and 1.0 where it did the task: 0.0 would mean the final state was never read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from campflow.config import load_config
from campflow.mcp.tasks import McpTaskParams
from campflow.sources import ImportSpec, register_import
from campflow.storage.store import Store
from campflow.training.base import ensure_base
from tests.conftest import REPO
from tests.test_mcp import LEDGER, SQLITE, _servers_gone

NOTE_TASK = {
    "id": "deposit-note",
    "level": 1,
    "prompt": "Open account c with 1 and deposit the amount written in {workdir}/amount.txt.",
    "fixtures": {"amount.txt": "2.5"},
    "reference": [
        {"tool": "read_note", "arguments": {"path": "{workdir}/amount.txt"}},
        {"tool": "open_account", "arguments": {"name": "c", "balance": 1}},
        {"tool": "deposit", "arguments": {"name": "c", "amount": 2.5}},
    ],
    "checks": [
        {"call": {"tool": "read_note", "arguments": {"path": "{workdir}/amount.txt"}}, "result": "2.5"},
        {"call": {"tool": "balances"}, "path": ["c"], "approx": 3.5, "tolerance": 0.01},
    ],
}
SQLITE_TASK = {
    "id": "table-t",
    "level": 1,
    "prompt": "Create a table t (x INTEGER) and insert 3 and 4.",
    "reference": [
        {"tool": "create_table", "arguments": {"query": "CREATE TABLE t (x INTEGER)"}},
        {"tool": "write_query", "arguments": {"query": "INSERT INTO t VALUES (3), (4)"}},
    ],
    "checks": [
        {"call": {"tool": "read_query", "arguments": {"query": "SELECT 1 AS one"}}, "path": [0, "one"], "equals": 1},
        {
            "call": {"tool": "read_query", "arguments": {"query": "SELECT SUM(x) AS s FROM t"}},
            "path": [0, "s"],
            "equals": 7,
        },
    ],
}


def ledger_command(pids: Path) -> list[str]:
    return [sys.executable, LEDGER, "--seed", "{seed}", "--pid-file", str(pids)]


def register(name: str, command: list[str], task: dict) -> None:
    options = {"server": {"command": command}, "tasks": [task]}
    register_import(ImportSpec(name=name, adapter="mcp", source=command[0], options=options), replace=True)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A workspace with the embedded tiny model."""
    ws = tmp_path_factory.mktemp("mcp-rl")
    cfg = load_config(
        None,
        {
            "workspace.path": str(ws),
            "training.tiny.corpus_per_level": 4,
            "training.tiny.pretrain.steps": 0,
            "training.tiny.hidden_size": 64,
            "training.tiny.intermediate_size": 128,
            "training.tiny.layers": 2,
            "training.tiny.heads": 2,
            "training.tiny.kv_heads": 1,
        },
        env={},
    )
    store = Store(cfg.workspace.db_path)
    return cfg, store, ensure_base(store, cfg)


def _grpo(cfg, store, model_id: str, name: str):
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import train_instances
    from campflow.training.rl import train_rl

    rl_cfg = cfg.training.rl.model_copy(
        update={
            "max_steps": 2,
            "num_generations": 2,
            "prompts_per_step": 1,
            "max_completion_length": 32,
            "max_tool_calling_iterations": 2,
        }
    )
    instances = train_instances(registry.make(name), 2, levels=[1])
    return train_rl(store, cfg.workspace.path, model_id, [name], rl_cfg, [1], instances=instances)


def test_grpo_on_an_mcp_bootcamp_reads_the_reward_off_each_episodes_server_and_leaves_none_running(
    base, tmp_path
) -> None:
    cfg, store, checkpoint = base
    pids = tmp_path / "pids"
    register("mcp-rl-ledger", ledger_command(pids), NOTE_TASK)
    result = _grpo(cfg, store, checkpoint.model_id, "mcp-rl-ledger")
    assert result.metrics["steps"] == 2
    rewards = [r for _, r in result.metrics["reward_curve"]]
    assert len(rewards) == 2 and all(0.5 <= r <= 1.0 for r in rewards), rewards  # the fixture's check, read back
    started = pids.read_text().split()
    assert len(started) >= 4  # a server per rollout: 2 steps x 2 generations (and one listing its tools)
    assert _servers_gone(pids) == []


@pytest.mark.skipif(not SQLITE.exists(), reason="mcp-server-sqlite's environment is made by `make mcp-servers`")
def test_grpo_on_mcp_server_sqlite_reads_the_reward_off_its_final_state_and_leaves_no_server(
    base, tmp_path, monkeypatch
) -> None:
    cfg, store, checkpoint = base
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # every episode's folder under tmp_path
    register("mcp-rl-sqlite", [str(SQLITE), "--db-path", "{workdir}/db.sqlite"], SQLITE_TASK)
    result = _grpo(cfg, store, checkpoint.model_id, "mcp-rl-sqlite")
    rewards = [r for _, r in result.metrics["reward_curve"]]
    assert len(rewards) == 2 and all(0.5 <= r <= 1.0 for r in rewards), rewards
    assert _processes_naming(str(tmp_path)) == []


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def test_a_training_run_killed_with_sigkill_leaves_no_server(base, tmp_path) -> None:
    cfg, store, checkpoint = base
    pids = tmp_path / "pids"
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from tests.test_mcp_rl import NOTE_TASK, ledger_command, register
from campflow.bootcamps import registry
from campflow.mcp.tasks import McpTaskParams
from campflow.training.environments import environment_factories
register("mcp-rl-killed", ledger_command(Path({str(pids)!r})), NOTE_TASK)
envs = environment_factories(["mcp-rl-killed"])["mcp-rl-killed"]
instance = registry.make("mcp-rl-killed").generate(McpTaskParams(level=1, task="deposit-note"), 3)
first, second = envs(), envs()  # two rollouts in flight, as in a GRPO batch
for env in (first, second):
    env.reset(params=instance.params.model_dump(mode="json"), seed=3)
first.open_account(name="c", balance=1)
print("ready", flush=True)
import time
time.sleep(600)
"""
    run = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    try:
        assert run.stdout.readline().strip() == "ready"
        alive = [int(p) for p in pids.read_text().split()]
        assert len(alive) >= 2 and all(Path(f"/proc/{p}").exists() for p in alive[-2:])
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    finally:
        if run.poll() is None:
            run.kill()
    assert _servers_gone(pids) == []


def test_a_served_environment_scores_the_final_state_and_a_new_episode_gets_a_fresh_server(tmp_path) -> None:
    from campflow.bootcamps import registry
    from campflow.training.environments import environment_factories

    pids = tmp_path / "pids"
    register("mcp-rl-env", ledger_command(pids), NOTE_TASK)
    env = environment_factories(["mcp-rl-env"])["mcp-rl-env"]()
    instance = registry.make("mcp-rl-env").generate(McpTaskParams(level=1, task="deposit-note"), 3)
    row = {"params": instance.params.model_dump(mode="json"), "seed": 3, "instance_id": instance.id}
    prompt = env.reset(**row)
    folder = env.state.workdir
    assert str(folder / "amount.txt") in prompt  # the episode's own folder, named in the prompt
    assert env.read_note(path=str(folder / "amount.txt")) == "2.5"
    assert env.deposit(name="nobody", amount=1).startswith("Error: ")  # the server's refusal, as the engine words it
    env.open_account(name="c", balance=1)
    env.deposit(name="c", amount=2.5)
    assert env.submit(answer="") == "Submitted."
    assert env.deposit(name="c", amount=1) == "Error: the episode has already ended."
    assert env.get_reward() == 1.0
    assert env.reset(**row) and env.state.workdir != folder
    assert env.balances() == "{}"  # the last episode's account is not in this one's server
    assert env.get_reward() == 0.5  # nothing done: only the fixture's check passes
    assert _servers_gone(pids) == []


def test_a_url_server_whose_episodes_share_one_state_is_refused_for_grpo_in_one_line() -> None:
    from campflow.errors import ConfigError
    from campflow.training.environments import environment_class

    url = "http://127.0.0.1:9/mcp"  # never reached: the refusal comes first
    options = {
        "server": {"url": url, "reset": {"tool": "reset"}},
        "tasks": [NOTE_TASK],
        "tools": [{"name": "balances", "description": "", "input_schema": {"type": "object", "properties": {}}}],
    }
    register_import(ImportSpec(name="mcp-rl-url", adapter="mcp", source=url, options=options), replace=True)
    with pytest.raises(ConfigError, match=f"every episode of the server {url} shares its one state"):
        environment_class("mcp-rl-url")
