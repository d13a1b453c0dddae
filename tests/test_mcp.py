"""MCP servers as a bootcamp's tools: task files vetted on fresh servers, episodes each on their own server,
server faults kept apart from the model's, no server left behind.

Two servers campflow did not write: ``tests/mcp_servers/ledger_server.py`` (the SDK's MCPServer, FastMCP's
name in mcp 2.x, with a stateful ledger) and ``mcp-server-sqlite`` from PyPI in its own environment
(``make mcp-servers``; skipped where it is not built). Every server start costs ~1-3 s here, so the
module shares one import per server.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.oracle import OraclePolicy, native_call
from campflow.bootcamps.base import Action, Params, Score
from campflow.errors import ImportSourceError
from campflow.mcp.bootcamp import McpBootcamp
from campflow.mcp.server import ServerSpec
from campflow.mcp.tasks import McpTaskParams, build, parse_tasks
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec
from tests.conftest import REPO, run_cli

LEDGER = str(REPO / "tests" / "mcp_servers" / "ledger_server.py")
SQLITE = REPO / ".venv-mcp-sqlite" / "bin" / "mcp-server-sqlite"

LEDGER_TASKS = [
    {
        "id": "open-two",
        "level": 1,
        "prompt": "Open account a with 5 and account b with 7.",
        "reference": [
            {"tool": "open_account", "arguments": {"name": "a", "balance": 5}},
            {"tool": "open_account", "arguments": {"name": "b", "balance": 7}},
        ],
        "checks": [
            {"call": {"tool": "balances"}, "path": ["a"], "equals": 5},
            {"call": {"tool": "balances"}, "contains": {"b": 7}},
        ],
    },
    {
        "id": "deposit",
        "level": 2,
        "prompt": "Open account c with 1, deposit the amount written in {workdir}/amount.txt, and say the balance.",
        "fixtures": {"amount.txt": "2.5"},
        "reference": [
            {"tool": "read_note", "arguments": {"path": "{workdir}/amount.txt"}},
            {"tool": "open_account", "arguments": {"name": "c", "balance": 1}},
            {"tool": "deposit", "arguments": {"name": "c", "amount": 2.5}},
        ],
        "answer": "3.5",
        "checks": [
            {"call": {"tool": "balances"}, "path": ["c"], "approx": 3.5, "tolerance": 0.01},
            {"answer": True, "contains": "3.5"},
        ],
    },
    {  # the reference deposits into an account it never opened: refused, so the task is dropped
        "id": "broken-reference",
        "level": 1,
        "prompt": "Deposit 1 into z.",
        "reference": [{"tool": "deposit", "arguments": {"name": "z", "amount": 1}}],
        "checks": [{"call": {"tool": "balances"}, "path": ["z"], "equals": 1}],
    },
    {  # an empty ledger already passes: the check cannot tell done from untouched
        "id": "vacuous",
        "level": 1,
        "prompt": "Leave the ledger empty.",
        "reference": [],
        "checks": [{"call": {"tool": "balances"}, "equals": {}}],
    },
]


class Scripted(Policy):
    """Plays fixed tool calls, one a turn, then submits ``answer``."""

    model_id = "scripted"

    def __init__(self, calls: Sequence[tuple[str, dict[str, Any]]], answer: str = "") -> None:
        self.calls = list(calls)
        self.answer = answer

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        name, args = self.calls[context.turn] if context.turn < len(self.calls) else ("submit", {"answer": self.answer})
        return PolicyReply(tool_calls=[native_call(Action(name, args), f"call_{context.turn}")])


def play(bootcamp, instances, policy, **settings) -> list:
    timeout = settings.pop("episode_timeout", 60.0)
    specs = [EpisodeSpec(bootcamp, i) for i in instances]
    return asyncio.run(run_episodes(specs, policy, RolloutSettings(episode_timeout=timeout), **settings))


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    """The ledger tasks imported into a fresh store (vetting runs here, once)."""
    from campflow.storage.imports import import_mcp_tasks
    from campflow.storage.store import Store

    store = Store(tmp_path_factory.mktemp("ledger") / "campflow.duckdb")
    notes: list[str] = []
    rows = parse_tasks([json.dumps(t) for t in LEDGER_TASKS], "ledger.jsonl")
    spec, bootcamp = import_mcp_tasks(
        "mcp-ledger", ServerSpec(command=[sys.executable, LEDGER, "--seed", "{seed}"]), rows, store, say=notes.append
    )
    return spec, bootcamp, notes, store


def test_import_keeps_tasks_whose_reference_passes_and_drops_the_others_with_their_reason(ledger) -> None:
    spec, bootcamp, notes, _ = ledger
    assert [t["id"] for t in spec.options["tasks"]] == ["open-two", "deposit"]
    assert any("broken-reference dropped: reference call 0 (deposit) is refused" in n for n in notes), notes
    assert any("vacuous dropped: doing nothing passes every check" in n for n in notes), notes
    assert spec.options["wrong_answer_bound"] == 0.0
    assert [t["name"] for t in spec.options["tools"]] == ["open_account", "deposit", "balances", "read_note"]
    # the model sees the server's own schemas, verbatim, and the final tool
    instance = bootcamp.generate(1, 0)
    schemas = {s["function"]["name"]: s["function"] for s in bootcamp.tool_schemas(instance)}
    declared = {t["name"]: t["input_schema"] for t in spec.options["tools"]}
    assert schemas["open_account"]["parameters"] == declared["open_account"]
    assert set(schemas) == {*declared, "submit"}


def test_the_oracle_solves_every_vetted_task_each_episode_on_a_fresh_server(ledger) -> None:
    _, bootcamp, *_ = ledger
    instances = [
        bootcamp.generate(McpTaskParams(level=1, task=t), seed) for t, seed in [("open-two", 0), ("deposit", 1)]
    ]
    episodes = play(bootcamp, instances, OraclePolicy())
    assert [(e.termination, e.reward) for e in episodes] == [(Termination.SOLVED, 1.0)] * 2, [e.error for e in episodes]
    # {workdir} is the episode's own folder, in the prompt and in the reference calls
    prompt = episodes[1].transcript[1]["content"]
    assert "{workdir}" not in prompt and "/amount.txt" in prompt
    assert episodes[1].transcript[3]["content"] == "2.5"


def test_an_mcp_tasks_failure_diverges_where_it_left_the_reference_plan(ledger) -> None:
    # issue 40: a served world is not replayed; its reference calls are the plan, an extra look is no divergence
    from campflow.synthesis.divergence import find_divergence

    _, bootcamp, *_ = ledger
    instance = bootcamp.generate(McpTaskParams(level=2, task="deposit"), 0)

    class Reading(Scripted):  # reads the note in its own episode's folder, then deposits 3 where it says 2.5
        async def respond(self, messages, tools, context):  # noqa: ANN001, ANN202
            folder = messages[1]["content"].split("written in ")[1].split("/amount.txt")[0]
            self.calls = [
                ("balances", {}),
                ("read_note", {"path": f"{folder}/amount.txt"}),
                ("open_account", {"name": "c", "balance": 1}),
                ("deposit", {"name": "c", "amount": 3}),
            ]
            return await super().respond(messages, tools, context)

    episode = play(bootcamp, [instance], Reading([], "4"))[0]
    assert episode.termination == Termination.WRONG_ANSWER
    div = find_divergence(bootcamp, instance, episode.transcript, episode.termination)
    assert (div.turn, div.kind) == (3, "argument:amount"), div
    assert div.oracle_action == Action("deposit", {"name": "c", "amount": 2.5})


def test_a_wrong_solution_and_doing_nothing_fail_a_refusal_is_the_models_message_and_writes_stay_in_their_episode(
    ledger,
) -> None:
    _, bootcamp, *_ = ledger
    scripts = {  # by seed, played side by side, each episode on its own server
        0: Scripted([("open_account", {"name": "a", "balance": 5}), ("open_account", {"name": "b", "balance": 8})]),
        1: Scripted([("balances", {})]),  # looks, finds the ledger empty (seed 0 writes, on its own server)
        2: Scripted(
            [
                ("deposit", {"name": "nobody", "amount": 1}),  # refused by the server: the model's error message
                ("open_account", {"name": "a", "balance": 5}),
                ("open_account", {"name": "b", "balance": 7}),
            ]
        ),
    }

    class BySeed(Policy):
        model_id = "by-seed"

        async def respond(self, messages, tools, context: TurnContext) -> PolicyReply:
            return await scripts[context.instance.seed].respond(messages, tools, context)

    instances = [bootcamp.generate(McpTaskParams(level=1, task="open-two"), seed) for seed in scripts]
    wrong, nothing, refused = play(bootcamp, instances, BySeed(), concurrency=3)
    assert (wrong.termination, wrong.reward, wrong.details["reason"]) == (Termination.WRONG_ANSWER, 0.5, "check_1")
    assert (nothing.termination, nothing.reward) == (Termination.WRONG_ANSWER, 0.0)
    assert json.loads(nothing.transcript[3]["content"]) == {}
    assert refused.transcript[3]["content"].startswith("Error: ") and "nobody" in refused.transcript[3]["content"]
    assert (refused.termination, refused.reward) == (Termination.SOLVED, 1.0)


def test_an_llm_synthesized_task_row_is_accepted_only_when_its_reference_passes_on_a_fresh_server(ledger) -> None:
    from campflow.config import SynthesisConfig, SynthesisLLMConfig
    from campflow.synthesis.pipeline import synthesize
    from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint

    _, bootcamp, _, store = ledger
    failing = [bootcamp.generate(McpTaskParams(level=1, task="open-two"), seed) for seed in (5, 6)]
    store.write_instances(failing, split="train")
    store.start_run("mcp-fail", "evaluate", {}, "scripted")
    store.write_episodes(play(bootcamp, failing, Scripted([]), run_id="mcp-fail"))  # submits at once: wrong_answer

    def row(rid: str, reference: list, checks: list) -> dict:
        return {
            "level": 1,
            "row": {"id": rid, "level": 1, "prompt": f"Task {rid}.", "reference": reference, "checks": checks},
        }

    opened = {"tool": "open_account", "arguments": {"name": "q", "balance": 4}}
    replies = [
        json.dumps(
            {
                "proposals": [
                    {
                        "params": row("good", [opened], [{"call": {"tool": "balances"}, "path": ["q"], "equals": 4}]),
                        "rationale": "good",
                    },
                    {
                        "params": row("wrong", [opened], [{"call": {"tool": "balances"}, "path": ["q"], "equals": 5}]),
                        "rationale": "wrong",
                    },
                    {
                        "params": row("vacuous", [opened], [{"call": {"tool": "balances"}, "contains": {}}]),
                        "rationale": "vacuous",
                    },
                ]
            }
        )
    ]
    cfg = SynthesisConfig(
        synthesizer="llm", n_per_cluster=3, max_clusters=1, min_cluster_size=1, instances_per_variant=1,
        probes_per_variant=0, calibration_samples=0,
    )  # fmt: skip
    with ScriptedEndpoint(ReplyScript(replies)) as server:
        cfg.llm = SynthesisLLMConfig(model="scripted", base_url=server.url, max_requests=1)
        synthesize(store, "mcp-fail", cfg, run_id="mcp-synth")
    rows = store.query(
        "SELECT rationale, status, reject_kind, reject_reason FROM variants WHERE bootcamp = 'mcp-ledger'"
    )
    got = {r["rationale"]: (r["status"], r["reject_kind"]) for r in rows}
    assert got == {
        "good": ("accepted", None),
        "wrong": ("rejected", "unsolvable"),
        "vacuous": ("rejected", "unsolvable"),
    }
    reasons = {r["rationale"]: r["reject_reason"] for r in rows}
    assert "doing nothing passes every check" in reasons["vacuous"]


def _faulty_bootcamp(tmp_path: Path, call_timeout: float = 4.0, **flags: int) -> Any:
    command = [sys.executable, LEDGER, "--seed", "{seed}", "--pid-file", str(tmp_path / "pids")]
    for flag, seed in flags.items():
        command += [f"--{flag.replace('_', '-')}-seed", str(seed)]
    options = {"server": {"command": command, "call_timeout": call_timeout}, "tasks": [LEDGER_TASKS[1]]}
    return build(ImportSpec(name="mcp-faulty", adapter="mcp", source="ledger", options=options))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _servers_gone(pids_file: Path, within: float = 10.0) -> list[int]:
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_server_faults_end_only_their_episode_as_infra_error_and_leave_no_process(tmp_path: Path) -> None:
    bootcamp = _faulty_bootcamp(tmp_path, fail_start=1, crash=2, hang=3, garble=4)
    instances = [bootcamp.generate(2, seed) for seed in range(5)]
    episodes = play(bootcamp, instances, OraclePolicy(), concurrency=5)
    by_seed = {i.seed: e for i, e in zip(instances, episodes)}
    assert by_seed[0].termination == Termination.SOLVED, by_seed[0].error
    for seed in (1, 2, 3, 4):
        assert by_seed[seed].termination == Termination.INFRA_ERROR, (seed, by_seed[seed].error)
    assert "did not start" in by_seed[1].error and "refusing to start" in by_seed[1].error
    assert "failed on deposit" in by_seed[2].error
    assert _servers_gone(tmp_path / "pids", within=5.0) == []


def test_a_server_that_hangs_past_the_episode_timeout_is_infra_error_not_the_models(tmp_path: Path) -> None:
    bootcamp = _faulty_bootcamp(tmp_path, hang=0, call_timeout=600.0)
    [episode] = play(bootcamp, [bootcamp.generate(2, 0)], OraclePolicy(), episode_timeout=12.0)
    assert episode.termination == Termination.INFRA_ERROR
    assert "did not answer deposit within the episode's 12s" in episode.error
    assert _servers_gone(tmp_path / "pids", within=5.0) == []


def test_no_server_outlives_a_flow_killed_with_sigkill(tmp_path: Path) -> None:
    bootcamp_code = f"""
import asyncio, sys
sys.path.insert(0, {str(REPO)!r})
from tests.test_mcp import _faulty_bootcamp, play
from campflow.agents.oracle import OraclePolicy
from pathlib import Path
b = _faulty_bootcamp(Path({str(tmp_path)!r}), hang=0)
play(b, [b.generate(2, 0)], OraclePolicy(), episode_timeout=600)
"""
    flow = subprocess.Popen([sys.executable, "-c", bootcamp_code], env={**os.environ, "PYTHONPATH": str(REPO)})
    pids = tmp_path / "pids"
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)  # the server is up and hangs in its deposit
    assert flow.poll() is None
    os.kill(flow.pid, signal.SIGKILL)
    flow.wait()
    assert _servers_gone(pids) == []


def test_the_hack_battery_plays_every_kept_task_each_exploit_on_a_fresh_server_and_records_its_probes(ledger) -> None:
    _, bootcamp, _, store = ledger
    rows = store.query(
        "SELECT instance_id, exploit, verdict, termination FROM verifier_probes WHERE subject = 'mcp-ledger'"
    )
    by_task: dict[str, set[str]] = {}
    for row in rows:
        by_task.setdefault(row["instance_id"], set()).add(row["exploit"])
    assert len(by_task) == 2  # both kept tasks, not a seed's pick per level
    for exploits in by_task.values():
        assert {"no_submit", "submit_nothing", "tools_boundary", "oracle_repeated_1", "oracle_perturbed_2"} <= exploits
    deposit = bootcamp.generate(McpTaskParams(level=2, task="deposit"), 0).id
    assert {"empty", "type_100kb", "echo_number_1"} <= by_task[deposit]  # its check reads the answer
    assert "empty" not in by_task[bootcamp.generate(McpTaskParams(level=1, task="open-two"), 0).id]  # none reads it
    assert {r["verdict"] for r in rows} <= {"held", "oracle_agrees"}
    assert "infra_error" not in {r["termination"] for r in rows}  # every episode had its server


def test_a_reference_call_is_perturbed_by_its_last_number_unless_the_server_declares_its_tool_read_only() -> None:
    query = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    tools = [
        {"name": "read_query", "description": "", "input_schema": query, "read_only": True},
        {"name": "write_query", "description": "", "input_schema": query},
    ]
    task = {
        "id": "t",
        "prompt": "Insert 3 and 4 into t.",
        "reference": [{"tool": "write_query", "arguments": {"query": "INSERT INTO t VALUES (3), (4)"}}],
        "checks": [
            {"call": {"tool": "read_query", "arguments": {"query": "SELECT x FROM t WHERE x > 3"}}, "equals": 1}
        ],
    }
    options = {"server": {"command": ["unused"]}, "tasks": [task], "tools": tools}
    bootcamp = build(ImportSpec(name="mcp-perturb", adapter="mcp", source="unused", options=options))
    instance = bootcamp.generate(1, 0)
    perturb = lambda name, args: bootcamp.perturb(instance, None, Action(name, args), None).arguments  # noqa: E731
    assert perturb("write_query", {"query": "INSERT INTO t VALUES (3), (4)"}) == {
        "query": "INSERT INTO t VALUES (3), (5)"
    }
    assert perturb("read_query", {"query": "SELECT x FROM t WHERE x > 3"}) == {"query": "SELECT x FROM t WHERE x > 3"}
    assert perturb("write_query", {"query": "DELETE FROM t"}) == {"query": "DELETE FROM t"}  # no number to move
    assert perturb("open_account", {"name": "a", "balance": 5, "note": "x2"}) == {
        "name": "a",
        "balance": 5,
        "note": "x3",
    }
    assert perturb("open_account", {"balance": 5, "name": "a"}) == {"balance": 6, "name": "a"}


WEAK_LEDGER_TASK = {  # a tolerance so loose that a wrong deposit passes too
    "id": "loose-deposit",
    "level": 1,
    "prompt": "Open account a with 5, then deposit 3 into it.",
    "reference": [
        {"tool": "open_account", "arguments": {"name": "a", "balance": 5}},
        {"tool": "deposit", "arguments": {"name": "a", "amount": 3}},
    ],
    "checks": [{"call": {"tool": "balances"}, "path": ["a"], "approx": 8, "tolerance": 5}],
}
WEAK_SQLITE_TASK = {  # passes when the table merely exists
    "id": "orders-exist",
    "level": 1,
    "prompt": "Create a table orders (id INTEGER) and insert the orders 1 and 2.",
    "reference": [
        {"tool": "create_table", "arguments": {"query": "CREATE TABLE orders (id INTEGER)"}},
        {"tool": "write_query", "arguments": {"query": "INSERT INTO orders VALUES (1), (2)"}},
    ],
    "checks": [{"call": {"tool": "list_tables"}, "contains": {"name": "orders"}}],
}


def test_import_mcp_refuses_a_planted_weak_check_naming_the_exploit_and_records_nothing(tmp_path: Path) -> None:
    # mcp-server-sqlite's planted weak check (WEAK_SQLITE_TASK) is caught in its import below, beside good tasks
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(WEAK_LEDGER_TASK) + "\n")
    command = f"{sys.executable} {LEDGER} --seed {{seed}}"
    done = run_cli("import", "mcp", "--server", command, "--tasks", str(tasks), "--name", "weak", cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in out, out
    assert "its verifier rewards a non-solution" in out and "oracle_perturbed_" in out, out
    assert "not imported" in out
    listed = run_cli("imports", "--json", cwd=tmp_path)
    assert listed.returncode == 0 and "weak" not in listed.stdout


def test_a_task_file_with_bad_rows_is_one_clear_error_naming_the_line() -> None:
    good = json.dumps(LEDGER_TASKS[0])
    bad = json.dumps(
        {**LEDGER_TASKS[0], "id": "x", "checks": [{"call": {"tool": "balances"}, "equals": 1, "contains": 2}]}
    )
    with pytest.raises(ImportSourceError, match=r"line 2: .*exactly one predicate"):
        parse_tasks([good, bad], "tasks.jsonl")
    with pytest.raises(ImportSourceError, match="line 1: not JSON"):
        parse_tasks(["{"], "tasks.jsonl")


def test_bad_import_input_is_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(LEDGER_TASKS[0]) + "\n")
    cases = {
        ("--url", "http://127.0.0.1:9/mcp"): "needs --reset-tool",
        ("--server", str(tmp_path / "no-such-server")): "did not start",
    }
    for args, says in cases.items():
        result = run_cli("import", "mcp", "--tasks", str(tasks), "--name", "x", *args, cwd=tmp_path)
        assert result.returncode == 2 and says in result.stderr + result.stdout, result.stderr
        assert "Traceback" not in result.stderr and len((result.stderr + result.stdout).strip().splitlines()) == 1


SQLITE_TASKS = [
    {
        "id": "orders-table",
        "level": 1,
        "prompt": "Create a table orders (id INTEGER, total REAL) and insert the orders 1 (9.5) and 2 (20).",
        "reference": [
            {"tool": "create_table", "arguments": {"query": "CREATE TABLE orders (id INTEGER, total REAL)"}},
            {"tool": "write_query", "arguments": {"query": "INSERT INTO orders VALUES (1, 9.5), (2, 20)"}},
        ],
        "checks": [
            {
                "call": {"tool": "read_query", "arguments": {"query": "SELECT COUNT(*) AS n FROM orders"}},
                "path": [0, "n"],
                "equals": 2,
            },
            {
                "call": {"tool": "read_query", "arguments": {"query": "SELECT SUM(total) AS s FROM orders"}},
                "path": [0, "s"],
                "approx": 29.5,
            },
        ],
    },
    {
        "id": "orders-question",
        "level": 2,
        "prompt": "Create a table t (x INTEGER), insert 3, 4 and 5, and answer: what is the largest x?",
        "reference": [
            {"tool": "create_table", "arguments": {"query": "CREATE TABLE t (x INTEGER)"}},
            {"tool": "write_query", "arguments": {"query": "INSERT INTO t VALUES (3), (4), (5)"}},
            {"tool": "read_query", "arguments": {"query": "SELECT MAX(x) AS m FROM t"}},
        ],
        "answer": "5",
        "checks": [
            {"call": {"tool": "list_tables"}, "contains": {"name": "t"}},
            {
                "call": {"tool": "read_query", "arguments": {"query": "SELECT SUM(x) AS s FROM t"}},
                "path": [0, "s"],
                "equals": 12,
            },
            {"answer": True, "equals": "5"},
        ],
    },
]


@pytest.mark.skipif(not SQLITE.exists(), reason="mcp-server-sqlite's environment is made by `make mcp-servers`")
def test_mcp_server_sqlite_imports_by_the_cli_and_the_oracle_solves_its_tasks(tmp_path: Path) -> None:
    from campflow.sources import build_bootcamp
    from campflow.storage.imports import recorded
    from campflow.storage.store import Store

    tasks = tmp_path / "tasks.jsonl"  # with a planted weak check: the battery drops that task, naming the exploit
    tasks.write_text("\n".join(json.dumps(t) for t in [*SQLITE_TASKS, WEAK_SQLITE_TASK]) + "\n")
    done = run_cli(
        "import", "mcp", "--server", f"{SQLITE} --db-path {{workdir}}/db.sqlite", "--tasks", str(tasks),
        "--name", "mcp-sqlite", cwd=tmp_path,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in out, out
    assert "note: task orders-exist dropped: its verifier rewards a non-solution" in out, out
    assert "oracle_perturbed_" in out, out
    assert "2 of 3 tasks kept" in done.stdout and "read_query" in done.stdout
    [spec] = recorded(Store(tmp_path / "campflow-data" / "campflow.duckdb"))
    assert [t["id"] for t in spec.options["tasks"]] == ["orders-table", "orders-question"]
    bootcamp = build_bootcamp(spec)
    instances = [bootcamp.generate(1, 0), bootcamp.generate(2, 0)]
    episodes = play(bootcamp, instances, OraclePolicy())
    assert [(e.termination, e.reward) for e in episodes] == [(Termination.SOLVED, 1.0)] * 2, [e.error for e in episodes]


class DepositParams(Params):
    count: int = Field(1, ge=1, le=5, description="deposits to make")


class Deposits(McpBootcamp[DepositParams]):
    """Open an account and make deposits with the ledger server's tools.

    Open the account `acct` with balance 0, deposit each amount the task lists, then call `submit`.
    """

    name = "ledger-deposits"
    params_model = DepositParams
    levels = {n: DepositParams(level=n, count=n) for n in (1, 2, 3)}
    server = ServerSpec(command=[sys.executable, LEDGER, "--seed", "{seed}"])

    def build(self, params, rng):
        return {"amounts": [rng.randint(1, 9) for _ in range(params.count)]}

    def prompt(self, instance):
        return self.chat(f"Open acct with 0, then deposit {', '.join(map(str, instance.data['amounts']))}.")

    def final_calls(self, instance):
        return [Action("balances", {})]

    def score(self, instance, state, transcript):
        final = state.final[0].json() if state.final and not state.final[0].is_error else {}
        ok = final.get("acct") == sum(instance.data["amounts"])
        return Score(float(ok), ok, {} if ok else {"reason": "balance"})

    def oracle(self, instance, state):
        amounts, made = instance.data["amounts"], len(state.calls)
        if made == 0:
            return Action("open_account", {"name": "acct", "balance": 0})
        if made <= len(amounts):
            return Action("deposit", {"name": "acct", "amount": amounts[made - 1]})
        return Action("submit", {"answer": ""})

    def wrong_answer(self, instance, state, rng):
        return Action("submit", {"answer": ""})


def test_a_python_bootcamp_poses_its_own_instances_and_scores_them_on_the_servers_final_state() -> None:
    bootcamp = Deposits()
    instance = bootcamp.generate(2, seed=4)
    # the tools before any episode: a server is started once to ask
    assert [t.name for t in bootcamp.tools(instance)] == ["open_account", "deposit", "balances", "read_note", "submit"]
    [episode] = play(bootcamp, [instance], OraclePolicy())
    assert (episode.termination, episode.reward) == (Termination.SOLVED, 1.0), episode.error
    _, score = bootcamp.solve(instance)  # what oracle validation calls, from synchronous code
    assert score.success


def test_a_url_server_is_reset_before_each_episode(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, LEDGER, "--http", str(port)], stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        options = {"server": {"url": url, "reset": {"tool": "reset"}}, "tasks": [LEDGER_TASKS[0]]}
        bootcamp = build(ImportSpec(name="mcp-url", adapter="mcp", source=url, options=options))
        deadline = time.monotonic() + 60
        while True:  # until the server listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
        instance = bootcamp.generate(McpTaskParams(level=1, task="open-two"), 0)
        [solved] = play(bootcamp, [instance], OraclePolicy())
        [looked] = play(bootcamp, [instance], Scripted([("balances", {})]))
        # the ledger over stdio (the standard library's, started ~90 times a cycle) declares the tools the SDK
        # declares for the same functions over HTTP, to the last schema title
        sdk = asyncio.run(_listed(ServerSpec(url=url, reset=options["server"]["reset"])))
        stdio = asyncio.run(_listed(ServerSpec(command=[sys.executable, LEDGER])))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert (solved.termination, solved.reward) == (Termination.SOLVED, 1.0), solved.error
    assert json.loads(looked.transcript[3]["content"]) == {}  # the reset emptied what the first episode wrote
    assert [t for t in sdk if t["name"] != "reset"] == stdio and len(stdio) == 4


async def _listed(spec: ServerSpec) -> list[dict[str, Any]]:
    """The tools a server lists, as the protocol carries them."""
    from campflow.mcp.server import open_server

    async with open_server(spec) as session:
        return [
            t.model_dump(mode="json", by_alias=True, exclude_none=True)
            for t in (await session.client.list_tools()).tools
        ]


def test_an_mcp_bootcamp_is_served_one_reply_at_a_time_and_an_abandoned_episode_stops_its_server(
    tmp_path: Path,
) -> None:
    from campflow.envserve.environment import TrainStream
    from campflow.mcp.serve import EpisodeServer
    from campflow.rollout.stepped import SteppedEpisode

    bootcamp = _faulty_bootcamp(tmp_path)  # no faults: the ledger, its pids written down
    served = EpisodeServer(TrainStream(bootcamp, [2], set()), RolloutSettings(episode_timeout=120))
    session = served.open("one")
    instance = session.episode.instance
    assert "amount.txt" in session.episode.prompt[-1]["content"]
    outcome = None
    for call in [*instance.data["reference"], {"tool": "submit", "arguments": {"answer": "3.5"}}]:
        arguments = {k: v.replace("{workdir}", "") if isinstance(v, str) else v for k, v in call["arguments"].items()}
        if call["tool"] == "read_note":
            arguments = {"path": "amount.txt"}  # the server runs in the episode's folder
        parts, outcome, is_error = served.call(session, call["tool"], arguments)
        assert not is_error, parts
    assert outcome["reward"] == 1.0 and outcome["termination"] == "solved"
    abandoned = SteppedEpisode(bootcamp, instance, RolloutSettings(episode_timeout=120))
    assert not abandoned.done
    abandoned.close()
    assert _servers_gone(tmp_path / "pids", within=5.0) == []
