"""Your own tasks in: a bootcamp file a user wrote from base.py alone, in a folder of its own, checked,
imported and used by every command through ``--workspace``, never from the folder that holds the store.

The good file is tests/data/own_bootcamp/warehouse.py (order picking: list_bins, look, pick, put_back,
submit; three levels; oracle and grounded demonstrator). The broken ones are it with one thing wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

WAREHOUSE = REPO / "tests" / "data" / "own_bootcamp" / "warehouse.py"
SEEDS = "8"  # instances per level the checks use here (the default is author.instances)

BROKEN = {
    # the oracle submits an empty basket at level 3
    "oracle": (
        'return self._next_pick(instance.data["order"], state, state.bins) or Action("submit", {})',
        'if instance.params.level == 3:\n            return Action("submit", {})\n'
        '        return self._next_pick(instance.data["order"], state, state.bins) or Action("submit", {})',
    ),
    # the demonstrator acts on the hidden bins: it passes bin ids nothing showed
    "grounded": (
        '        order = instance.data["order"]  # the prompt shows it\n',
        "        return self.oracle(instance, state)\n",
    ),
    # the generator draws bin ids from the clock
    "deterministic": (
        "ids = rng.sample(range(10, 100), params.bins)",
        "ids = __import__('random').Random(__import__('time').time_ns()).sample(range(10, 100), params.bins)",
    ),
}


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _broken(folder: Path, check: str) -> Path:
    old, new = BROKEN[check]
    text = WAREHOUSE.read_text(encoding="utf-8")
    assert old in text, check
    return _write(folder, f"warehouse_{check}.py", text.replace(old, new))


def _ok(result) -> str:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The good file checked and imported from its own folder into a workspace elsewhere."""
    home = tmp_path_factory.mktemp("user")
    source = _write(home / "tasks", "warehouse.py", WAREHOUSE.read_text(encoding="utf-8"))
    ws = home / "ws"
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    checked = _ok(run_cli("bootcamps", "check", str(source), "-n", SEEDS, cwd=elsewhere))
    out = _ok(run_cli("import", "bootcamp", str(source), "-n", SEEDS, "--workspace", str(ws), cwd=elsewhere))
    return {"home": home, "source": source, "ws": ws, "cwd": elsewhere, "checked": checked, "imported": out}


def test_a_good_file_checks_every_level_and_imports(imported) -> None:
    checked = imported["checked"]
    checks = (
        "imports",
        "declarations",
        "deterministic",
        "oracle",
        "wrong_answer",
        "battery",
        "grounded",
        "across_processes",
    )
    for check in checks:
        assert f"ok   {check}" in checked, check
    for level in (1, 2, 3):
        assert f"ok   grounded level {level}" in checked
    assert "warehouse: all 20 checks hold" in checked  # the battery is one check per level
    assert "imported warehouse" in imported["imported"]
    assert not (imported["cwd"] / "campflow-data").exists()  # nothing lands where the command ran
    listed = _ok(run_cli("imports", "--workspace", str(imported["ws"]), cwd=imported["cwd"]))
    assert "warehouse" in listed and "bootcamp" in listed


@pytest.fixture(scope="module")
def prefect_api(prefect_harness) -> dict[str, str]:
    """The session's Prefect API, for the commands' subprocesses (each would start its own otherwise)."""
    from prefect.settings import PREFECT_API_URL

    return {"PREFECT_API_URL": str(PREFECT_API_URL.value())}


@pytest.mark.slow
def test_an_imported_file_evaluates_mines_collects_builds_a_dataset_and_trains_a_step(
    imported, prefect_api, tmp_path
) -> None:
    ws, cwd = str(imported["ws"]), imported["cwd"]
    config = _write(
        tmp_path,
        "tiny.yaml",
        "training:\n  bootcamps: [warehouse]\n  tiny:\n    vocab_size: 600\n    hidden_size: 32\n"
        "    intermediate_size: 64\n    layers: 1\n    heads: 2\n    kv_heads: 1\n    corpus_per_level: 4\n"
        "    pretrain:\n      steps: 2\npolicy:\n  noise:\n    p_wrong_answer: 0.8\n",
    )
    base = ["--workspace", ws, "--config", str(config)]
    _ok(
        run_cli(
            "eval",
            "-b",
            "warehouse",
            "-p",
            "oracle",
            "-n",
            "3",
            "--run-id",
            "own-oracle",
            *base,
            cwd=cwd,
            env=prefect_api,
        )
    )
    from campflow.storage.store import Store

    rewards = Store(imported["ws"] / "campflow.duckdb").query(
        "SELECT bootcamp, reward FROM episodes WHERE run_id = 'own-oracle'"
    )
    assert len(rewards) >= 3 and all(r["bootcamp"] == "warehouse" and r["reward"] == 1.0 for r in rewards), rewards
    _ok(
        run_cli(
            "eval",
            "-b",
            "warehouse",
            "-p",
            "noisy",
            "-n",
            "6",
            "--run-id",
            "own-noisy",
            *base,
            cwd=cwd,
            env=prefect_api,
        )
    )
    mined = _ok(run_cli("failures", "--run", "own-noisy", *base, cwd=cwd, env=prefect_api))
    assert "warehouse" in mined
    _ok(run_cli("collect", "-b", "warehouse", "-n", "6", "--run-id", "own-teacher", *base, cwd=cwd, env=prefect_api))
    built = _ok(run_cli("dataset", "build", "--runs", "own-teacher", *base, cwd=cwd, env=prefect_api))
    dataset = re.search(r"dataset (\S+):", built).group(1)
    made = _ok(run_cli("train", "base", "-b", "warehouse", *base, cwd=cwd, env=prefect_api))
    model = re.search(r"base (base-\S+) at", made).group(1)
    trained = _ok(
        run_cli("train", "sft", "--from", model, "--dataset", dataset, "--steps", "1", *base, cwd=cwd, env=prefect_api)
    )
    assert re.search(rf"sft (sft-\S+) \(from {model}\)", trained), trained
    sft = Store(imported["ws"] / "campflow.duckdb").query("SELECT dataset_id FROM checkpoints WHERE kind = 'sft'")
    assert [r["dataset_id"] for r in sft] == [dataset]
    assert not (cwd / "campflow-data").exists()


def test_an_edited_file_is_refused_naming_the_command_that_imports_it_again(imported, tmp_path) -> None:
    folder = tmp_path / "mine"
    source = _write(folder, "warehouse.py", WAREHOUSE.read_text(encoding="utf-8"))
    ws = tmp_path / "ws"
    _ok(run_cli("import", "bootcamp", str(source), "-n", "4", "-w", str(ws), cwd=tmp_path))
    source.write_text(source.read_text() + "\n# a later edit\n")
    again = f"campflow import bootcamp {source}:Warehouse --replace"
    out = run_cli("bootcamps", "show", "warehouse", "-w", str(ws), cwd=tmp_path)
    assert out.returncode != 0 and "has changed since it was imported" in out.stderr and again in out.stderr
    for argv in (["eval", "-b", "warehouse", "-p", "oracle"], ["collect", "-b", "warehouse"]):
        out = run_cli(*argv, "-w", str(ws), cwd=tmp_path)  # refused before any flow starts: one line
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and again in out.stderr, out.stderr
    _ok(run_cli(*again.split()[1:], "-n", "4", "-w", str(ws), cwd=tmp_path))
    _ok(run_cli("bootcamps", "show", "warehouse", "-w", str(ws), cwd=tmp_path))
    removed = _ok(run_cli("imports", "--remove", "warehouse", "-w", str(ws), cwd=tmp_path))
    assert "removed warehouse" in removed
    gone = run_cli("bootcamps", "show", "warehouse", "-w", str(ws), cwd=tmp_path)
    assert gone.returncode == 2 and f"searched the workspace {ws}" in gone.stderr
    assert "campflow import bootcamp FILE.py" in gone.stderr


@pytest.mark.parametrize("check", sorted(BROKEN))
def test_a_broken_file_is_refused_by_check_and_by_import_naming_the_check(check: str, tmp_path) -> None:
    source = _broken(tmp_path / "mine", check)
    ws = tmp_path / "ws"
    checked = run_cli("bootcamps", "check", str(source), "-n", SEEDS, cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    failed = [ln for ln in checked.stdout.splitlines() if ln.startswith("FAIL")]
    assert failed and all(ln.startswith(f"FAIL {check}") for ln in failed), failed
    assert "seed:" in checked.stdout  # the evidence names the seed
    if check == "grounded":
        assert "step: ungrounded: turn 0 pick(bin_id)" in checked.stdout
    refused = run_cli("import", "bootcamp", str(source), "-n", SEEDS, "-w", str(ws), cwd=tmp_path)
    assert refused.returncode == 1 and f"first: {check} level" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1
    assert not ws.exists() and not (tmp_path / "campflow-data").exists()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "does not exist"),
        ("two", "defines 2 Bootcamp subclasses (Warehouse, Depot); name the one to use"),
        ("syntax", "syntax error at line"),
        ("not_bootcamp", "is not a Bootcamp subclass"),
        ("no_class", "defines no class 'Nope'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case: str, expected: str, tmp_path) -> None:
    text = WAREHOUSE.read_text(encoding="utf-8")
    folder = tmp_path / "mine"
    target = {
        "missing": str(folder / "nope.py"),
        "two": str(_write(folder, "two.py", text + "\n\nclass Depot(Warehouse):\n    name = 'depot'\n")),
        "syntax": str(_write(folder, "syntax.py", text + "\ndef broken(:\n")),
        "not_bootcamp": f"{_write(folder, 'plain.py', text)}:PickArgs",
        "no_class": f"{_write(folder, 'plain.py', text)}:Nope",
    }[case]
    ws = tmp_path / "ws"
    for argv in (["bootcamps", "check", target], ["import", "bootcamp", target, "-w", str(ws)]):
        out = run_cli(*argv, cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and expected in out.stderr, out.stderr
    assert not ws.exists() and not (tmp_path / "campflow-data").exists()


def test_every_builtin_bootcamp_passes_every_check() -> None:
    # through the Python API, the report `campflow bootcamps check NAME` prints (one process, not one each;
    # the command's printing of a report is the warehouse's tests')
    import campflow
    from campflow.bootcamps import registry

    for name in registry.BUILTIN:
        report = campflow.check(name, instances=4)
        failed = [(v.check, v.level, v.reason) for v in report.verdicts if v.passed is False]
        assert report.passed and f"{name}: all " in report.summary(), (name, failed)
        assert any(v.check == "grounded" and v.level is not None and v.passed for v in report.verdicts), name


def test_the_workspace_comes_from_campflow_workspace_too(imported, tmp_path) -> None:
    out = _ok(run_cli("imports", cwd=tmp_path, env={"CAMPFLOW_WORKSPACE": str(imported["ws"])}))
    assert "warehouse" in out
    assert not (tmp_path / "campflow-data").exists()


def test_the_python_api_checks_a_file_as_the_command_does(tmp_path) -> None:
    import campflow

    source = _write(tmp_path, "warehouse.py", WAREHOUSE.read_text(encoding="utf-8"))
    report = campflow.check(f"{source}:Warehouse", instances=4)
    assert report.passed and report.file.name == "warehouse" and report.file.class_name == "Warehouse"
    assert {v.check for v in report.verdicts} >= {"oracle", "grounded", "deterministic", "across_processes"}


def test_the_bounds_of_a_field_reach_the_schema_the_agent_sees(imported, tmp_path) -> None:
    shown = _ok(run_cli("bootcamps", "show", "warehouse", "-w", str(imported["ws"]), cwd=tmp_path))
    assert "pick" in shown
    from campflow.sources import ImportSpec
    from campflow.sources.authored import build_own
    from campflow.storage.imports import recorded
    from campflow.storage.store import Store

    spec = next(s for s in recorded(Store(imported["ws"] / "campflow.duckdb")) if s.name == "warehouse")
    bootcamp = build_own(ImportSpec.model_validate(json.loads(spec.model_dump_json())))
    schema = next(s for s in bootcamp.tool_schemas(bootcamp.generate(1, 0)) if s["function"]["name"] == "pick")
    count = schema["function"]["parameters"]["properties"]["count"]
    assert (count["type"], count["minimum"], count["maximum"]) == ("integer", 1, 50)


def test_every_command_that_touches_a_store_takes_workspace() -> None:
    import importlib
    import inspect

    from campflow.cli import COMMAND_MODULES, app
    from campflow.cli.common import add_workspace_option

    for name in COMMAND_MODULES:
        importlib.import_module(f"campflow.cli.{name}")
    add_workspace_option(app)
    add_workspace_option(app)  # idempotent: main() may run twice in one process

    def commands(group, prefix=""):
        for info in group.registered_commands:
            yield prefix + (info.name or info.callback.__name__), inspect.signature(info.callback).parameters
        for sub in group.registered_groups:
            yield from commands(sub.typer_instance, f"{prefix}{sub.name} ")

    found = dict(commands(app))
    assert {"eval", "collect", "failures", "imports", "import bootcamp", "train sft", "dataset build"} <= set(found)
    for command, params in found.items():
        if "db" in params:
            assert "workspace" in params, command


def test_import_class_on_a_bootcamp_file_points_to_import_bootcamp_and_writes_nothing(tmp_path) -> None:
    source = _write(tmp_path / "mine", "warehouse.py", WAREHOUSE.read_text(encoding="utf-8"))
    out = run_cli("import", "class", f"{source}:Warehouse", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert f"`campflow import bootcamp {source}:Warehouse`" in out.stderr
    assert not (tmp_path / "campflow-data").exists()


def test_the_guide_quotes_the_example_file_as_it_is() -> None:
    # docs/own-bootcamp.md shows an excerpt of warehouse.py: every line it quotes is the file's
    guide = (REPO / "docs" / "own-bootcamp.md").read_text(encoding="utf-8")
    excerpt = re.search(r"```python\n(.*?)```", guide, re.S).group(1)
    source = WAREHOUSE.read_text(encoding="utf-8").splitlines()
    quoted = [ln for ln in excerpt.splitlines() if ln.strip() and ln.strip() != "..."]
    assert len(quoted) > 20
    assert [ln for ln in quoted if ln not in source] == []
