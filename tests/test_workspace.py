"""The workspace: one path from a name to a bootcamp, built-in or imported, for every command and flow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from campflow.bootcamps import registry
from campflow.errors import UnknownBootcampError
from campflow.sources import ImportSpec
from campflow.storage.imports import import_bootcamp, recorded
from campflow.storage.workspace import Workspace
from tests.conftest import run_cli

pytest.importorskip("reasoning_gym")

GCD = ImportSpec(name="rg-gcd", adapter="reasoning-gym", source="gcd", options={"min_numbers": 2})


@pytest.fixture(autouse=True)
def forget_imports():
    """Imports registered by a test leave the process registry as they found it."""
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)
    registry.set_resolver(None)


def new_process() -> None:
    """Forget the import, as a fresh process (a new command, a resumed flow) would not know it."""
    registry.unregister(GCD.name)


def test_eval_collect_dataset_synthesis_rl_environments_and_report_resolve_an_import_through_the_workspace(
    prefect_harness, tmp_path: Path
) -> None:
    pytest.importorskip("datasets")
    from campflow.config import load_config
    from campflow.flows.collect import collect
    from campflow.flows.evaluate import evaluate
    from campflow.storage import cycles
    from campflow.tasks.synthesis import mine_failures_task, synthesize_task
    from campflow.tasks.training import build_dataset_task
    from campflow.training.environments import environment_factories
    from campflow.training.rl import rl_instances

    ws = Workspace(tmp_path / "ws")
    import_bootcamp(GCD, ws.store)
    settings = {
        "workspace.path": str(ws.path),
        "eval.bootcamps": [GCD.name],
        "eval.n": 12,
        "policy.kind": "noisy",
        "policy.noise.p_wrong_answer": 0.5,
        "training.bootcamps": [GCD.name],
        "training.collect_n": 4,
        "synthesis.min_cluster_size": 1,
        "synthesis.calibration_samples": 0,
    }
    cfg = load_config(None, settings)

    new_process()
    failed = evaluate(cfg, run_id="eval")
    assert failed.ran == 12 and 0 < failed.pass_rates[GCD.name] < 1
    new_process()
    assert sum(mine_failures_task.fn(cfg, "eval").values()) == failed.terminations["wrong_answer"]
    new_process()
    synthesized = synthesize_task.fn(cfg, "eval")
    assert synthesized["accepted"] > 0
    new_process()
    taught = collect(load_config(None, {**settings, "policy.kind": "oracle"}), run_id="teach")
    assert taught.ran == 4 and taught.pass_rates == {GCD.name: 1.0}  # training.collect_n of them
    from_variants = ws.store.scalar(
        "SELECT count(*) FROM episodes JOIN instances i USING (instance_id) "
        "WHERE run_id = 'teach' AND i.origin = 'synthesized' AND i.split = 'train'"
    )
    assert from_variants == 2  # synthesis.share = 0.5 of them
    new_process()
    dataset_id = build_dataset_task.fn(cfg, ["teach"])
    assert ws.store.scalar("SELECT rows FROM datasets WHERE dataset_id = ?", [dataset_id]) == 4

    new_process()
    instances = rl_instances(Workspace.from_config(cfg).store, [GCD.name], per_bootcamp=3, seed=0)
    env = environment_factories([GCD.name])[GCD.name]()
    for inst in instances:
        env.reset(params=inst.params.model_dump(mode="json"), seed=inst.seed, instance_id=inst.id)
        action = env.bootcamp.oracle(inst, env.state)
        getattr(env, action.name)(**action.arguments)
        assert env.get_reward() == 1.0

    cycle = cycles.start(ws.store, "cycle-imported")
    cycles.save_step(ws.store, cycle, "variants", eval_before="eval", eval_after="teach")
    config = tmp_path / "campflow.yaml"
    config.write_text(
        yaml.safe_dump({"workspace": {"path": str(ws.path)}, "improve": {"reports_dir": str(tmp_path / "reports")}})
    )
    report = run_cli("report", "--cycle", "cycle-imported", "--config", str(config), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert GCD.name in report.stdout and (tmp_path / "reports" / "cycle-imported" / "index.html").exists()
    listed = run_cli("failures", "--run", "eval", "--bootcamps", GCD.name, "--config", str(config), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "wrong_answer" in listed.stdout


def test_a_fresh_process_that_opens_the_workspace_resolves_imports_with_plain_registry_make(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    import_bootcamp(GCD, ws.store)
    here = [registry.make(GCD.name).generate(level, 3).id for level in (1, 2)]
    code = (
        "import json, sys\n"
        "from campflow.bootcamps import registry\n"
        "from campflow.storage.workspace import Workspace\n"
        "Workspace(sys.argv[1])\n"
        f"print(json.dumps([registry.make({GCD.name!r}).generate(lv, 3).id for lv in (1, 2)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ws.path)], capture_output=True, text=True, check=True, cwd="/"
    )
    assert json.loads(out.stdout) == here


def test_an_unknown_name_is_one_line_naming_the_built_in_and_imported_bootcamps(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    import_bootcamp(GCD, ws.store)
    new_process()
    with pytest.raises(UnknownBootcampError) as err:
        Workspace(ws.path).names("calculator,rg-gdc")
    message = str(err.value)
    assert "\n" not in message and message.startswith("unknown bootcamp 'rg-gdc'; expected one of:")
    assert "calculator" in message and GCD.name in message
    assert Workspace(ws.path).names("all")[-1] == GCD.name


def test_built_in_names_resolve_without_reading_or_creating_a_store(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    assert [b.name for b in ws.bootcamps("calculator,maze")] == ["calculator", "maze"]
    with pytest.raises(UnknownBootcampError, match="unknown bootcamp 'rg-gcd'"):
        ws.bootcamp(GCD.name)
    assert not ws.db_path.exists() and not ws.path.exists()


def test_a_bootcamp_imported_into_one_workspace_is_unknown_in_another(tmp_path: Path) -> None:
    first = Workspace(tmp_path / "first")
    import_bootcamp(GCD, first.store)
    new_process()
    assert first.bootcamp(GCD.name).name == GCD.name
    other = Workspace(tmp_path / "other")
    assert recorded(other.store) == [], "a store with no imports on record"
    with pytest.raises(UnknownBootcampError):
        other.bootcamp(GCD.name)
    assert first.bootcamp(GCD.name).name == GCD.name, "the first workspace resolves its import again"
