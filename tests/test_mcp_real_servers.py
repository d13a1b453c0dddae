"""Task files over servers campflow did not write, whose replies differ on every run: vetting judges what
each check decides, not the text it read, and the hack battery judges each task, not the file.

- ``mcp-server-git`` from PyPI in its own environment (``.venv-mcp-git``), its repository made by its start
  command (``git init``): replies carry commit hashes and dates;
- the reference filesystem server from npm (``.mcp-npm``), run by node: replies carry times and the
  episode's own folder;
- ``tests/mcp_servers/stamped_server.py`` (the SDK's MCPServer, FastMCP's name in mcp 2.x): every reply
  carries a fresh uuid, the time and the server's folder.

``make mcp-servers`` builds the first two (CI runs it before the tests); where they are not built their
tests are skipped, as the mcp-server-sqlite tests are. Each import is made once per module.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.mcp.server import ServerSpec
from campflow.mcp.tasks import parse_tasks, task_instances
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
from campflow.rollout.episode import Termination
from tests.conftest import REPO, run_cli

GIT = REPO / ".venv-mcp-git" / "bin" / "mcp-server-git"
FILESYSTEM = REPO / ".mcp-npm" / "node_modules" / ".bin" / "mcp-server-filesystem"
STAMPED = REPO / "tests" / "mcp_servers" / "stamped_server.py"
BUILT_BY_MAKE = "made by `make mcp-servers`"


def git(tool: str, repo: str = "{workdir}", **arguments: object) -> dict:
    return {"tool": tool, "arguments": {"repo_path": repo, **arguments}}


GIT_TASKS = [
    {
        "id": "commit-notes",
        "level": 1,
        "prompt": "{workdir} is a git repository. Stage notes.txt and commit it with the message 'add notes'.",
        "fixtures": {"notes.txt": "remember the milk\n"},
        "reference": [git("git_add", files=["notes.txt"]), git("git_commit", message="add notes")],
        "checks": [
            {"call": git("git_log"), "contains": "Message: add notes"},
            {"call": git("git_status"), "contains": "nothing to commit"},
        ],
    },
]


def shared_repo_task(shared: Path) -> dict:
    """A task whose author wrote a fixed repository instead of ``{workdir}`` for half of it: every server
    checks out the commit before HEAD in the same repository, so each moves it one commit further back."""
    return {
        "id": "step-back-elsewhere",
        "level": 1,
        "prompt": f"Commit notes.txt in {{workdir}} as 'add notes', then check out the commit before HEAD in {shared}.",
        "fixtures": {"notes.txt": "remember the milk\n"},
        "reference": [
            git("git_add", files=["notes.txt"]),
            git("git_commit", message="add notes"),
            git("git_checkout", str(shared), branch_name="HEAD~1"),
        ],
        "checks": [
            {"call": git("git_status"), "contains": "nothing to commit"},
            {"call": git("git_log", str(shared), max_count=1), "contains": "Message: second"},
        ],
    }


def import_tasks(name: str, command: str, tasks: list[dict], tmp: Path):
    """Import ``tasks`` over ``command`` into a fresh store: (spec, bootcamp, notes, store)."""
    from campflow.storage.imports import import_mcp_tasks
    from campflow.storage.store import Store

    store = Store(tmp / "campflow.duckdb")
    notes: list[str] = []
    rows = parse_tasks([json.dumps(t) for t in tasks], f"{name}.jsonl")
    spec, bootcamp = import_mcp_tasks(name, ServerSpec.from_command(command), rows, store, say=notes.append)
    return spec, bootcamp, notes, store


def kept(spec) -> list[str]:
    return [t["id"] for t in spec.options["tasks"]]


def oracle_episodes(bootcamp) -> list:
    specs = [EpisodeSpec(bootcamp, i) for i in task_instances(bootcamp)]
    return asyncio.run(run_episodes(specs, OraclePolicy(), RolloutSettings(episode_timeout=60.0)))


@pytest.fixture(scope="module")
def git_import(tmp_path_factory):
    if not GIT.exists():
        pytest.skip(f"mcp-server-git's environment is {BUILT_BY_MAKE}")
    shared = tmp_path_factory.mktemp("shared-repo")
    subprocess.run(["git", "init", "-q", str(shared)], check=True)
    for message in ("first", "second", "third"):
        commit = ["git", "-C", str(shared), "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q"]
        subprocess.run([*commit, "--allow-empty", "-m", message], check=True)
    command = f"sh -c 'git init -q . && exec {GIT}'"
    return import_tasks("mcp-git", command, [*GIT_TASKS, shared_repo_task(shared)], tmp_path_factory.mktemp("git"))


def test_git_tasks_are_kept_though_every_reply_carries_a_new_commit_hash_and_date(git_import) -> None:
    spec, _, notes, store = git_import
    assert kept(spec) == ["commit-notes"], notes
    probes = store.query("SELECT verdict, termination FROM verifier_probes WHERE subject = 'mcp-git'")
    assert probes and {p["verdict"] for p in probes} <= {"held", "oracle_agrees"}, probes
    assert "infra_error" not in {p["termination"] for p in probes}


def test_the_oracle_solves_every_kept_git_task_in_an_evaluation(git_import) -> None:
    _, bootcamp, _, _ = git_import
    [episode] = oracle_episodes(bootcamp)
    assert (episode.termination, episode.reward) == (Termination.SOLVED, 1.0), episode.error


def test_a_git_task_whose_reference_ends_otherwise_on_a_second_server_is_dropped_naming_the_check(git_import) -> None:
    _, _, notes, _ = git_import
    [note] = [n for n in notes if n.startswith("task step-back-elsewhere dropped")]
    assert "a second fresh server decides check 1 (git_log" in note and "contains 'Message: second'" in note, note
    assert "it passed on the first" in note and "Message: first" in note and "state kept between servers" in note


STAMPED_TASKS = [
    {
        "id": "add-note",
        "level": 1,
        "prompt": "Add the note 'buy milk'.",
        "reference": [{"tool": "add_note", "arguments": {"text": "buy milk"}}],
        "checks": [{"call": {"tool": "list_notes"}, "path": ["notes"], "equals": ["buy milk"]}],
    },
    {  # the server numbers tickets in a file every server shares: the second server hands out ticket 2
        "id": "ticket",
        "level": 1,
        "prompt": "Take a ticket.",
        "reference": [{"tool": "take_ticket"}],
        "checks": [{"call": {"tool": "my_tickets"}, "path": ["tickets"], "equals": [1]}],
    },
]


@pytest.fixture(scope="module")
def stamped_import(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stamped")
    return import_tasks("mcp-stamped", f"{sys.executable} {STAMPED} --tickets {tmp / 'tickets'}", STAMPED_TASKS, tmp)


def test_a_server_stamping_every_reply_with_a_uuid_the_time_and_its_folder_is_importable(stamped_import) -> None:
    spec, bootcamp, notes, _ = stamped_import
    assert kept(spec) == ["add-note"], notes
    [episode] = oracle_episodes(bootcamp)
    assert (episode.termination, episode.reward) == (Termination.SOLVED, 1.0), episode.error


def test_a_task_whose_check_decides_otherwise_on_a_second_server_is_dropped_naming_the_check(stamped_import) -> None:
    _, _, notes, _ = stamped_import
    [note] = [n for n in notes if n.startswith("task ticket dropped")]
    assert "a second fresh server decides check 0 (my_tickets{}['tickets'] equals [1]) otherwise" in note, note
    assert "it passed on the first" in note and "'tickets': [2]" in note, note


FILESYSTEM_TASKS = [  # the server's structured reply is {"content": text}: checks look under "content"
    {  # no number in the prompt: the battery's several_all holds the right answer alone
        "id": "count-rows",
        "level": 1,
        "prompt": "How many data rows does {workdir}/cities.csv hold, not counting its header line? Submit the number.",
        "fixtures": {"cities.csv": "city,population\nLyon,522250\nNice,342669\nLille,236710\n"},
        "reference": [{"tool": "read_text_file", "arguments": {"path": "{workdir}/cities.csv"}}],
        "answer": "3",
        "checks": [{"answer": True, "equals": "3"}],
    },
    {
        "id": "write-total",
        "level": 2,
        "prompt": "Write the text 'total: 1101629' into {workdir}/total.txt.",
        "reference": [
            {"tool": "write_file", "arguments": {"path": "{workdir}/total.txt", "content": "total: 1101629"}}
        ],
        "checks": [
            {
                "call": {"tool": "read_text_file", "arguments": {"path": "{workdir}/total.txt"}},
                "path": ["content"],
                "equals": "total: 1101629",
            },
            {
                "call": {"tool": "get_file_info", "arguments": {"path": "{workdir}/total.txt"}},
                "path": ["content"],
                "contains": "isFile: true",
            },
        ],
    },
    {  # planted: the check passes when the file merely exists, whatever it holds
        "id": "write-sum-weak",
        "level": 2,
        "prompt": "Write the text 'sum: 12' into {workdir}/sum.txt.",
        "reference": [{"tool": "write_file", "arguments": {"path": "{workdir}/sum.txt", "content": "sum: 12"}}],
        "checks": [
            {
                "call": {"tool": "list_directory", "arguments": {"path": "{workdir}"}},
                "path": ["content"],
                "contains": "sum.txt",
            }
        ],
    },
]


@pytest.fixture(scope="module")
def filesystem_import(tmp_path_factory):
    if not FILESYSTEM.exists():
        pytest.skip(f"the npm filesystem server is {BUILT_BY_MAKE}")
    tmp = tmp_path_factory.mktemp("filesystem")
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps(t) for t in FILESYSTEM_TASKS) + "\n")
    done = run_cli(
        "import", "mcp", "--server", f"{FILESYSTEM} {{workdir}}", "--tasks", str(tasks), "--name", "mcp-files", cwd=tmp
    )
    return done, tmp


def test_the_npm_filesystem_server_imports_an_answer_task_whose_prompt_has_no_number(filesystem_import) -> None:
    from campflow.storage.store import Store

    done, tmp = filesystem_import
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "2 of 3 tasks kept" in out, out
    store = Store(tmp / "campflow-data" / "campflow.duckdb")
    [hedge] = store.query("SELECT answer, verdict, detail FROM verifier_probes WHERE exploit = 'several_all'")
    assert hedge["answer"] == '{"answer": "3"}' and hedge["verdict"] == "oracle_agrees", hedge


def test_a_planted_weak_check_drops_its_task_naming_the_exploit_and_the_others_are_imported(filesystem_import) -> None:
    from campflow.sources import build_bootcamp
    from campflow.storage.imports import recorded
    from campflow.storage.store import Store

    done, tmp = filesystem_import
    out = done.stdout + done.stderr
    assert "note: task write-sum-weak dropped: its verifier rewards a non-solution" in out, out
    assert "oracle_perturbed_1" in out and "the oracle's next action there is write_file" in out, out
    [spec] = recorded(Store(tmp / "campflow-data" / "campflow.duckdb"))
    assert kept(spec) == ["count-rows", "write-total"]
    episodes = oracle_episodes(build_bootcamp(spec))
    assert [(e.termination, e.reward) for e in episodes] == [(Termination.SOLVED, 1.0)] * 2, [e.error for e in episodes]
