"""Imports end to end: recorded in the store, registered by name, evaluated, trained on, and driven from the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import train_instances
from campflow.errors import ImportSourceError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.sources import ImportSpec, default_name, ensure_registered, parse_options
from campflow.storage.imports import forget, import_bootcamp, recorded, register_recorded
from tests.conftest import run_cli

pytest.importorskip("reasoning_gym")
pytest.importorskip("gymnasium")

ROW = {
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [
        {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    ],
    "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
}
TASK_CLASS = '''
import random


class Double:
    """Double a number."""

    def case_generator(self):
        return {"n": random.randint(1, 99)}

    def prompt_func(self, identity):
        return f"What is twice {identity['n']}?"

    def verify_score(self, model_output, identity):
        return model_output.strip() == str(2 * identity["n"])

    def solve(self, identity):
        return str(2 * identity["n"])
'''


@pytest.fixture(autouse=True)
def forget_imports():
    """Imports registered by a test leave the process registry as they found it."""
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)


@pytest.fixture
def sources(tmp_path: Path) -> list[ImportSpec]:
    """One import of each adapter, from real packages and files written here."""
    (tmp_path / "calls.jsonl").write_text(json.dumps(ROW) + "\n")
    (tmp_path / "double.py").write_text(textwrap.dedent(TASK_CLASS))
    return [
        ImportSpec(name="rg-gcd", adapter="reasoning-gym", source="gcd", options={"min_numbers": 2}),
        ImportSpec(name="gym-FrozenLake-v1", adapter="gymnasium", source="FrozenLake-v1"),
        ImportSpec(name="fc-calls", adapter="function-calling", source=str(tmp_path / "calls.jsonl")),
        ImportSpec(name="ib-Double", adapter="internbootcamp", source=f"{tmp_path / 'double.py'}:Double"),
    ]


def test_an_import_is_recorded_in_the_store_and_registered_as_imported(store, sources) -> None:
    for spec in sources:
        saved, bootcamp = import_bootcamp(spec, store)
        assert saved.version == bootcamp.version != ""
        entry = next(e for e in registry.entries() if e.name == spec.name)
        assert entry.origin == "imported" and registry.make(spec.name).name == spec.name
    rows = store.query("SELECT name, adapter, source, version, options FROM imported_bootcamps ORDER BY name")
    assert [(r["name"], r["adapter"]) for r in rows] == [
        ("fc-calls", "function-calling"),
        ("gym-FrozenLake-v1", "gymnasium"),
        ("ib-Double", "internbootcamp"),
        ("rg-gcd", "reasoning-gym"),
    ]
    assert json.loads(next(r for r in rows if r["name"] == "rg-gcd")["options"]) == {"min_numbers": 2}
    assert {s.name: s.version for s in recorded(store)} == {r["name"]: r["version"] for r in rows}

    for spec in sources:
        registry.unregister(spec.name)  # a fresh process knows only the built-in bootcamps
    assert {s.name for s in register_recorded(store)} == {s.name for s in sources}
    assert all(p.min_numbers == 2 for p in registry.make("rg-gcd").levels.values())


def test_names_are_checked_before_anything_is_recorded(store, sources) -> None:
    import_bootcamp(sources[0], store)
    with pytest.raises(ImportSourceError, match="already imported; pass --replace"):
        import_bootcamp(sources[0], store)
    import_bootcamp(sources[0].model_copy(update={"options": {"max_value": 200_000}}), store, replace=True)
    assert registry.make("rg-gcd").levels[1].max_value == 200_000
    with pytest.raises(ImportSourceError, match="level 1 of its curriculum .* max_value must be > min_value"):
        import_bootcamp(sources[0].model_copy(update={"options": {"max_value": 50}}), store, replace=True)
    with pytest.raises(ImportSourceError, match="belongs to a builtin bootcamp"):
        import_bootcamp(sources[0].model_copy(update={"name": "calculator"}), store)
    with pytest.raises(ImportSourceError, match="no dataset"):
        import_bootcamp(ImportSpec(name="rg-x", adapter="reasoning-gym", source="nonsense"), store)
    assert [s.name for s in recorded(store)] == ["rg-gcd"], "a failed import records nothing"
    assert forget(store, "rg-gcd") and "rg-gcd" not in registry.names() and recorded(store) == []


def test_default_names_and_options_from_the_command_line() -> None:
    assert default_name("reasoning-gym", "basic_arithmetic") == "rg-basic_arithmetic"
    assert default_name("gymnasium", "FrozenLake-v1") == "gym-FrozenLake-v1"
    assert default_name("function-calling", "/data/bfcl simple.jsonl") == "fc-bfcl_simple"
    assert default_name("internbootcamp", "pkg.tasks:Sudoku") == "ib-Sudoku"
    assert parse_options(["max_terms=4", "operators=[+, '-']", "is_slippery=true", "word=abc"]) == {
        "max_terms": 4,
        "operators": ["+", "-"],
        "is_slippery": True,
        "word": "abc",
    }
    with pytest.raises(ImportSourceError, match="key=value"):
        parse_options(["max_terms"])
    with pytest.raises(ValueError, match="bootcamp name"):
        ImportSpec(name="rg a,b", adapter="reasoning-gym", source="gcd")


def test_a_fresh_worker_process_rebuilds_the_same_instances_from_the_specs(sources) -> None:
    ensure_registered(sources)
    here = {
        s.name: [registry.make(s.name).generate(level, seed).id for level in (1, 3) for seed in (0, 7)] for s in sources
    }
    code = (
        "import json, sys\n"
        "from campflow.bootcamps import registry\n"
        "from campflow.sources import ImportSpec, ensure_registered\n"
        "specs = [ImportSpec.model_validate(s) for s in json.loads(sys.argv[1])]\n"
        "ensure_registered(specs)\n"
        "print(json.dumps({s.name: [registry.make(s.name).generate(lv, sd).id for lv in (1, 3) for sd in (0, 7)]"
        " for s in specs}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps([s.model_dump() for s in sources])],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert json.loads(out.stdout) == here


def test_a_rollout_shard_registers_the_imports_it_is_given(sources) -> None:
    from campflow.config import PolicyConfig, RolloutConfig
    from campflow.tasks.rollout import rollout_shard, shard_items

    ensure_registered(sources)
    instances = [registry.make(s.name).generate(1, seed) for s in sources for seed in range(3)]
    items = shard_items(instances, samples=1)
    for spec in sources:
        registry.unregister(spec.name)  # as in a Ray worker
    episodes = rollout_shard.fn(items, PolicyConfig(kind="oracle"), RolloutConfig(), "run", imports=sources)
    assert len(episodes) == 12 and all(e.success and e.reward == 1.0 for e in episodes)


def test_an_evaluation_of_imported_bootcamps_lands_in_the_store(prefect_harness, workspace, sources) -> None:
    from campflow.config import load_config
    from campflow.flows.evaluate import evaluate
    from campflow.storage.store import Store

    store = Store(workspace / "campflow.duckdb")
    for spec in sources:
        import_bootcamp(spec, store)
        registry.unregister(spec.name)  # the flow must find them in the store, as a new process would
    names = [s.name for s in sources]
    cfg = load_config(
        None,
        {
            "workspace.path": str(workspace),
            "policy.kind": "oracle",
            "eval.bootcamps": names,
            "eval.n": 6,
            "rollout.shard_size": 5,
        },
    )
    summary = evaluate(cfg, run_id="imported")
    assert summary.pass_rates == {name: 1.0 for name in names} and summary.ran == 24
    rows = store.query(
        "SELECT bootcamp, count(*) AS n, min(reward) AS r FROM episodes WHERE run_id = 'imported' "
        "GROUP BY bootcamp ORDER BY bootcamp"
    )
    assert [(r["bootcamp"], r["n"], r["r"]) for r in rows] == [(n, 6, 1.0) for n in sorted(names)]
    assert store.scalar("SELECT count(*) FROM instances WHERE split = 'eval' AND bootcamp LIKE 'gym-%'") == 6


def test_an_sft_dataset_builds_from_teacher_episodes_on_imported_bootcamps(store, workspace, sources) -> None:
    datasets = pytest.importorskip("datasets")
    from campflow.config import FilterConfig
    from campflow.training.filtering import build_sft_dataset

    names = []
    for spec in sources[:3]:
        import_bootcamp(spec, store)
        names.append(spec.name)
    instances = [i for n in names for i in train_instances(registry.make(n), 8, levels=[1])]
    store.write_instances(instances, split="train")
    store.start_run("teacher", "collect", {}, "oracle")
    store.write_episodes(
        asyncio.run(
            run_episodes(
                [EpisodeSpec(registry.make(i.bootcamp), i) for i in instances], OraclePolicy(), run_id="teacher"
            )
        )
    )
    store.finish_run("teacher", "completed", {})
    built = build_sft_dataset(store, workspace, ["teacher"], FilterConfig(balance=False, dedupe=False))
    assert built.per_bootcamp == {n: 8 for n in names}
    rows = datasets.load_from_disk(str(built.path))
    first = next(r for r in rows if r["bootcamp"] == "fc-calls")
    assert json.loads(first["tools"])[0]["function"]["name"] == "get_weather"


def test_the_command_line_imports_lists_and_reports_bad_sources_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text(json.dumps(ROW) + "\n" + json.dumps({**ROW, "tools": None}) + "\n")
    (tmp_path / "tasks.py").write_text(
        "class NoVerify:\n    def case_generator(self): return {}\n    def prompt_func(self, identity): return '?'\n"
    )
    ok = run_cli(
        "import", "reasoning-gym", "basic_arithmetic", "--set", "operators=[+, -]", "--as", "sums", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    assert "imported sums" in ok.stdout
    for argv, message in [
        (("reasoning-gym", "basic_arithmetc"), "no dataset 'basic_arithmetc'; did you mean basic_arithmetic"),
        (("gymnasium", "Pendulum-v1"), "Pendulum-v1 has continuous actions"),
        (("function-calling", "bad.jsonl"), "line 2: missing field 'tools'"),
        (("class", "tasks.py:NoVerify"), "has no verify_score()"),
    ]:
        bad = run_cli("import", *argv, cwd=tmp_path)
        assert bad.returncode == 2 and message in bad.stderr, (argv, bad.stderr)
        assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    listing = run_cli("bootcamps", "list", cwd=tmp_path)
    line = next(ln for ln in listing.stdout.splitlines() if "sums" in ln)
    assert "imported" in line and "calculator" in listing.stdout
    imports = run_cli("imports", cwd=tmp_path)
    assert "sums" in imports.stdout and "reasoning-gym" in imports.stdout
    assert '"operators": ["+", "-"]' in imports.stdout
    evaluated = run_cli("eval", "--policy", "oracle", "--bootcamps", "sums", "-n", "4", "--run-id", "cli", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    rates = json.loads(
        run_cli("sql", "SELECT bootcamp, episodes, pass_rate FROM pass_rates", "-f", "json", cwd=tmp_path).stdout
    )
    assert rates == [{"bootcamp": "sums", "episodes": 4, "pass_rate": 1.0}]


def test_help_imports_neither_adapter_package() -> None:
    code = (
        "import sys\nfrom campflow.cli import main\nsys.argv = ['campflow', 'import', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED=' + ','.join(m for m in ('reasoning_gym', 'gymnasium', 'datasets', 'prefect') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "reasoning-gym" in out.stdout and out.stdout.strip().splitlines()[-1] == "LOADED=", out.stdout + out.stderr
