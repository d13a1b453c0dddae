"""``campflow author``: an LLM (a scripted local server speaking the real protocol) writes modules, the
contract judges them in a sandbox, failures go back with their evidence, and the store keeps every verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from campflow.authoring.author import author_bootcamp
from campflow.authoring.contract_run import run_contract
from campflow.authoring.prompt import read_module
from campflow.bootcamps import registry
from campflow.config import CampflowConfig, SandboxConfig, load_config
from campflow.errors import ImportSourceError
from campflow.sources.authored import source_sha256
from campflow.storage.query import run_sql
from campflow.storage.workspace import Workspace
from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint
from tests import authored_modules as modules
from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "examples" / "author"


class RecordingScript(ReplyScript):
    """Canned replies, keeping every request the client sent."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        return super().__call__(request)


def _config(tmp_path: Path, url: str, **overrides: Any) -> CampflowConfig:
    return load_config(
        None,
        {
            "workspace.path": str(tmp_path / "ws"),
            "author.llm.model": "scripted",
            "author.llm.base_url": url,
            "author.sandbox.root": str(tmp_path / "sandboxes"),
            **overrides,
        },
        env={},
    )


@pytest.fixture
def task(tmp_path: Path) -> Path:
    path = tmp_path / "reverse.md"
    path.write_text("# Reverse a word\n\nThe agent is given a word and submits it spelled backwards.\n")
    return path


@pytest.fixture(autouse=True)
def _forget_authored_names():
    yield
    for entry in registry.entries():
        if entry.origin == "imported":
            registry.unregister(entry.name)


def _author(tmp_path: Path, task: Path, replies: list[str], **kwargs: Any):
    script = RecordingScript(replies)
    with ScriptedEndpoint(script) as endpoint:
        lines: list[str] = []
        result = author_bootcamp(task, cfg=_config(tmp_path, endpoint.url), say=lines.append, **kwargs)
    return result, script, lines


REPAIRED = [
    modules.reply(modules.SYNTAX_ERROR),
    modules.reply(modules.ORACLE_FAILS_AT_LEVEL_3),
    modules.reply(modules.GOOD),
]


@pytest.fixture(scope="module")
def repaired(tmp_path_factory: pytest.TempPathFactory):
    """One authoring run: a syntax error, then an oracle that fails at level 3, then a good module."""
    tmp_path = tmp_path_factory.mktemp("repaired")
    task = tmp_path / "reverse.md"
    task.write_text("# Reverse a word\n\nThe agent is given a word and submits it spelled backwards.\n")
    result, script, lines = _author(tmp_path, task, REPAIRED, name="au-reverse")
    registry.unregister("au-reverse")
    return tmp_path, result, script, lines


def test_a_module_is_accepted_after_two_repairs_with_the_evidence_sent_back(repaired) -> None:
    _, result, script, lines = repaired
    assert [r.accepted for r in result.rounds] == [False, False, True] and result.accepted
    first, second, _ = result.rounds
    imports = next(v for v in first.verdicts if v.check == "imports")
    assert imports.passed is False and "SyntaxError" in imports.reason and "def broken(:" in imports.reason
    assert all(v.passed is None for v in first.verdicts if v.check not in ("reply", "imports"))
    failed = [(v.check, v.level) for v in second.verdicts if v.passed is False]
    assert failed == [("oracle", 3)]
    oracle = next(v for v in second.verdicts if v.passed is False)
    assert "seed 0" in oracle.reason and "expected 1.0" in oracle.reason

    system, task_message = script.requests[0]["messages"][:2]
    assert "class Echo(Bootcamp" in system["content"] and "```python" in system["content"]
    assert "check_oracle_solves" in system["content"] or "oracle solves every level" in system["content"]
    assert "Reverse a word" in task_message["content"] and 'name = "au-reverse"' in system["content"]
    repair_1 = script.requests[1]["messages"][-1]["content"]
    assert "imports: SyntaxError" in repair_1 and "traceback (last lines)" in repair_1
    repair_2 = script.requests[2]["messages"][-1]["content"]
    assert "oracle level 3" in repair_2 and "instance identity" in repair_2 and '"word"' in repair_2
    assert "Passed: imports, declarations, deterministic (levels 1, 2, 3), oracle (levels 1, 2)" in repair_2
    assert len(script.requests) == 3 and lines[-1].startswith("round 3: module") and "all" in lines[-1]


def test_every_verdict_is_queryable_with_sql(repaired) -> None:
    tmp_path, result, _, _ = repaired
    replies = REPAIRED
    db = tmp_path / "ws" / "campflow.duckdb"
    rounds = run_sql(
        db,
        f"SELECT round, failed_checks, accepted FROM author_rounds WHERE attempt_id = '{result.attempt_id}' ORDER BY round",
    ).rows
    assert rounds == [(1, "imports", False), (2, "oracle", False), (3, None, True)]
    verdicts = run_sql(
        db,
        "SELECT round, check_name, level, passed, reason, source_sha256 FROM author_verdicts "
        f"WHERE attempt_id = '{result.attempt_id}' ORDER BY round, check_name, level",
    ).rows
    hashes = [source_sha256(read_module(r)[0]) for r in replies]
    assert {(r[0], r[5]) for r in verdicts} == {(1, hashes[0]), (2, hashes[1]), (3, hashes[2])}
    last = sorted((check, level or 0, passed) for rnd, check, level, passed, _, _ in verdicts if rnd == 3)
    per_level = [
        (c, lv, True)
        for c in ("deterministic", "oracle", "wrong_answer", "battery", "across_processes")
        for lv in (1, 2, 3)
    ]
    assert last == sorted([("reply", 0, True), ("imports", 0, True), ("declarations", 0, True), *per_level])
    assert all(reason for rnd, check, level, passed, reason, _ in verdicts if passed is not True)
    attempt = run_sql(db, "SELECT status, rounds, source_sha256, module_path FROM author_attempts").rows
    assert attempt == [("accepted", 3, hashes[2], attempt[0][3])]
    assert source_sha256(Path(attempt[0][3]).read_text()) == hashes[2]


def test_an_accepted_bootcamp_is_recorded_like_an_import_and_resolves_by_name(tmp_path: Path, task: Path) -> None:
    result, _, _ = _author(tmp_path, task, [modules.reply(modules.GOOD)], name="au-reverse")
    registry.unregister("au-reverse")  # as a fresh process would start: only the store knows it
    ws = Workspace(tmp_path / "ws")
    row = ws.store.query("SELECT adapter, source, version, options FROM imported_bootcamps WHERE name = 'au-reverse'")[
        0
    ]
    assert row["adapter"] == "authored" and json.loads(row["options"])["sha256"] == result.rounds[-1].sha256
    bootcamp = ws.bootcamp("au-reverse")
    assert bootcamp.name == "au-reverse" and bootcamp.version == row["version"] == result.spec.version
    for level in (1, 2, 3):
        _, score = bootcamp.solve(bootcamp.generate(level, seed=11))
        assert score.success


def test_a_module_changed_after_acceptance_is_refused(tmp_path: Path, task: Path) -> None:
    result, _, _ = _author(tmp_path, task, [modules.reply(modules.GOOD)], name="au-reverse")
    path = Path(result.spec.source)
    path.write_text(path.read_text().replace('"abcdefgh"', '"abc"'))
    registry.unregister("au-reverse")
    with pytest.raises(ImportSourceError, match="has changed since it was accepted"):
        Workspace(tmp_path / "ws").bootcamp("au-reverse")


def test_a_module_that_never_passes_is_rejected_and_kept_with_its_reasons(tmp_path: Path, task: Path) -> None:
    result, script, _ = _author(tmp_path, task, [modules.reply(modules.ORACLE_FAILS_AT_LEVEL_3)], rounds=1)
    assert not result.accepted and len(result.rounds) == 2 and len(script.requests) == 2
    assert result.reasons and result.reasons[0].startswith("oracle level 3:")
    ws = Workspace(tmp_path / "ws")
    attempt = ws.store.query("SELECT status, reasons, module_path FROM author_attempts")[0]
    assert attempt["status"] == "rejected" and "oracle level 3" in attempt["reasons"]
    assert Path(attempt["module_path"]).read_text() == read_module(modules.reply(modules.ORACLE_FAILS_AT_LEVEL_3))[0]
    assert ws.store.query("SELECT * FROM imported_bootcamps") == [] and "au-reverse" not in registry.names()


def test_a_reply_without_a_module_goes_back_as_a_failed_round(tmp_path: Path, task: Path) -> None:
    result, script, _ = _author(tmp_path, task, ["I would write a bootcamp like this.", modules.reply(modules.GOOD)])
    assert [r.accepted for r in result.rounds] == [False, True]
    assert (
        result.rounds[0].verdicts[0].check == "reply"
        and "no ```python code block" in result.rounds[0].verdicts[0].reason
    )
    assert "Your reply could not be used" in script.requests[1]["messages"][-1]["content"]


def _contract(source: str, examples: list[dict[str, Any]] | None = None, tmp_path: Path | None = None):
    return run_contract(
        source, name="au-reverse", examples=examples or [], instances=200, limits=SandboxConfig(root=tmp_path)
    )


def test_examples_must_reproduce_their_answers(tmp_path: Path) -> None:
    examples = [{"input": "abc", "answer": "cba"}, {"input": "stop", "answer": "stop"}]
    report = _contract(modules.GOOD, examples, tmp_path)
    failed = report.failures
    assert [(v.check, v.level) for v in failed] == [("examples", None)]
    assert "example 2" in failed[0].reason and "pots" in failed[0].reason
    assert _contract(modules.GOOD, examples[:1], tmp_path).accepted
    missing = _contract(modules.NO_EXAMPLE_IDENTITY, examples[:1], tmp_path).failures
    assert [v.check for v in missing] == ["examples"] and "example_identity" in missing[0].reason


def test_generation_that_depends_on_the_hash_seed_is_refused_across_processes(tmp_path: Path) -> None:
    report = _contract(modules.HASH_SEEDED, tmp_path=tmp_path)
    assert all(v.passed for v in report.verdicts if v.check == "deterministic"), "one process cannot see it"
    across = [v for v in report.failures if v.check == "across_processes"]
    assert across and all("hash seed" in v.reason for v in across)


@pytest.mark.parametrize(
    ("task_file", "replies", "first_failures"),
    [
        ("unit_conversion", ["unit_conversion.reply.md"], []),
        ("inventory", ["inventory.reply.md"], []),
        ("inventory", ["inventory.first_reply.md", "inventory.reply.md"], [("examples", None)]),
    ],
    ids=["unit_conversion", "inventory", "inventory repaired"],
)
def test_the_shipped_example_tasks_are_accepted_with_their_examples(
    tmp_path: Path, task_file: str, replies: list[str], first_failures: list[tuple[str, int | None]]
) -> None:
    result, _, _ = _author(
        tmp_path,
        EXAMPLES / f"{task_file}.md",
        [(EXAMPLES / r).read_text() for r in replies],
        examples=EXAMPLES / f"{task_file}.jsonl",
    )
    assert result.accepted and len(result.rounds) == len(replies), result.reasons
    assert [(v.check, v.level) for v in result.rounds[0].verdicts if v.passed is False] == first_failures
    checks = [(v.check, v.level) for v in result.rounds[-1].verdicts]
    assert ("examples", None) in checks and ("across_processes", 3) in checks and len(checks) == 19


def _one_error_line(out: Any) -> str:
    assert out.returncode != 0, out.stdout
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


def test_bad_input_gets_one_line_and_a_non_zero_exit(tmp_path: Path, task: Path) -> None:
    bad_examples = tmp_path / "bad.jsonl"
    bad_examples.write_text('{"input": "abc", "answer": "cba"}\n{"input": "abc"\n')
    db = ["--db", str(tmp_path / "ws" / "c.duckdb")]
    cases = [
        (["author", str(tmp_path / "missing.md"), "--model", "m"], "task description"),
        (["author", str(task), "--model", "m", "--examples", str(tmp_path / "nope.jsonl")], "examples file"),
        (["author", str(task), "--model", "m", "--examples", str(bad_examples)], "bad.jsonl line 2: not JSON"),
        (["author", str(task)], "author.llm.model is required"),
        (["author", str(task), "--model", "m", "--name", "calculator"], "belongs to a builtin bootcamp"),
        (["author", str(task), "--model", "m", "--name", "no spaces"], "bootcamp name 'no spaces'"),
        (["author", str(task), "--model", "m", "--base-url", "http://127.0.0.1:9/v1"], "cannot reach"),
    ]
    for args, message in cases:
        line = _one_error_line(run_cli(*args, *db, cwd=tmp_path))
        assert message in line, (args, line)
    with ScriptedEndpoint(ReplyScript(["Sorry, I cannot write code today."])) as endpoint:
        out = run_cli(
            "author", str(task), "--model", "m", "--base-url", endpoint.url, "--rounds", "0", *db, cwd=tmp_path
        )
    line = _one_error_line(out)
    assert "rejected after 1 round(s): reply: the reply holds no ```python code block" in line


def test_the_command_line_authors_a_bootcamp_that_later_commands_use_by_name(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "ws" / "c.duckdb")]
    with ScriptedEndpoint(ReplyScript([(EXAMPLES / "unit_conversion.reply.md").read_text()])) as endpoint:
        out = run_cli(
            "author",
            str(EXAMPLES / "unit_conversion.md"),
            "--examples",
            str(EXAMPLES / "unit_conversion.jsonl"),
            "--model",
            "scripted",
            "--base-url",
            endpoint.url,
            *db,
            cwd=tmp_path,
        )
    assert out.returncode == 0, out.stderr
    assert "round 1: module" in out.stdout and "accepted au-unit_conversion" in out.stdout
    listed = run_cli("bootcamps", "sample", "au-unit_conversion", *db, cwd=tmp_path)
    assert listed.returncode == 0 and "demonstration: solved" in listed.stdout, listed.stderr


@pytest.mark.parametrize(
    ("reply", "module", "problem"),
    [
        ("Sure.\n```python\nclass A(Bootcamp):\n    pass\n```\n", "class A(Bootcamp):\n    pass\n", ""),
        (
            "<think>try ```python\nx = 1\n```</think>\n```py\nclass B(Bootcamp): ...\n```",
            "class B(Bootcamp): ...\n",
            "",
        ),
        (
            "```python\nimport os\n```\nand the module:\n```python\nclass C(Bootcamp): ...\n```",
            "class C(Bootcamp): ...\n",
            "",
        ),
        ("```\nclass D(Bootcamp): ...\n```", "class D(Bootcamp): ...\n", ""),
        ("```python\nclass E(Bootcamp):\n    def build(self", None, "is not closed"),
        ("I cannot help with that.", None, "holds no ```python code block ('I cannot help with that.')"),
        ("", None, "the reply was empty"),
    ],
    ids=["plain", "reasoning ignored", "last bootcamp block", "unlabelled", "cut off", "prose", "empty"],
)
def test_the_module_is_read_from_the_reply(reply: str, module: str | None, problem: str) -> None:
    found, why = read_module(reply)
    assert found == module and problem in why
