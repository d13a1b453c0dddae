"""``campflow gc``: a dry run lists, the real run frees, a promoted model's lineage and what an unfinished
cycle needs survive. Checkpoints are folders registered as training registers them (their contents do not
matter to gc), cycles are recorded as the improve flow records them."""

from __future__ import annotations

from pathlib import Path

import pytest

from campflow.storage import cycles
from campflow.storage.lock import WorkspaceLock
from campflow.storage.workspace import Workspace
from campflow.training import checkpoints
from campflow.training.pruning import collect_garbage, folder_bytes
from tests.conftest import run_cli


def _checkpoint(ws: Workspace, model_id: str, kind: str, parent: str | None, size: int, where: Path | None = None):
    path = where or checkpoints.models_dir(ws.path) / model_id
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.safetensors").write_bytes(b"\0" * size)
    return checkpoints.register(ws.store, model_id, kind, path, parent=parent)


def _cycle(ws: Workspace, cycle_id: str, start: str, candidate: str, promoted: bool, finish: bool = True):
    cycle = cycles.start(ws.store, cycle_id)
    cycle.base_model_id = start
    cycles.save_step(ws.store, cycle, "start", model=start, sft_model=candidate)
    if finish:
        cycles.decide(
            ws.store, cycle, candidate=candidate, metric="pass_rate", before=0.1, after=0.2, promoted=promoted
        )
        cycles.finish(ws.store, cycle)


@pytest.fixture
def history(tmp_path) -> Workspace:
    """Three cycles: c1 promoted rl-1 (sft-1, base-0 its lineage), c2's rl-2 (from sft-2) and c3's sft-3 were
    not promoted; a model folder adopted from outside the workspace; a .partial left by a killed run."""
    ws = Workspace(tmp_path / "ws")
    _checkpoint(ws, "base-0", "base", None, 1000)
    _checkpoint(ws, "sft-1", "sft", "base-0", 2000)
    _checkpoint(ws, "rl-1", "rl", "sft-1", 3000)
    _cycle(ws, "c1", "base-0", "rl-1", promoted=True)
    _checkpoint(ws, "sft-2", "sft", "rl-1", 4000)
    _checkpoint(ws, "rl-2", "rl", "sft-2", 5000)
    _cycle(ws, "c2", "rl-1", "rl-2", promoted=False)
    _checkpoint(ws, "outside", "base", None, 100, where=tmp_path / "my-model")
    _checkpoint(ws, "sft-3", "sft", "rl-1", 6000)
    _cycle(ws, "c3", "rl-1", "sft-3", promoted=False)
    dead = checkpoints.models_dir(ws.path) / "sft-9.partial"
    dead.mkdir()
    (dead / "optimizer.pt").write_bytes(b"\0" * 700)
    (dead / checkpoints.OWNER_LOCK).touch()  # its writer died: nobody holds the lock
    return ws


def _gone(ws: Workspace, *names: str) -> set[str]:
    return {n for n in names if not (checkpoints.models_dir(ws.path) / n).exists()}


def test_a_dry_run_lists_what_would_go_and_removes_nothing(history) -> None:
    ws = history
    plan = collect_garbage(ws.store, ws.path, ws.db_path, keep_newest=1)
    assert not plan.applied
    assert sorted((r.path.name, r.kind) for r in plan.removals) == [
        ("rl-2", "rl"),
        ("sft-2", "sft"),
        ("sft-9.partial", "partial"),
    ]
    assert plan.bytes == sum(folder_bytes(r.path) for r in plan.removals) > 5000 + 4000 + 700
    # base-0 is c1's start, and first found up the promoted rl-1's lineage; "my-model" is a base too
    assert plan.kept == {"promoted": 1, "ancestor (promoted)": 2, "newest 1": 1, "base": 1}
    assert not _gone(ws, "rl-2", "sft-2", "sft-9.partial")


def test_the_real_run_frees_the_bytes_and_keeps_a_promoted_lineage(history) -> None:
    ws = history
    models = checkpoints.models_dir(ws.path)
    before = folder_bytes(models)
    done = collect_garbage(ws.store, ws.path, ws.db_path, keep_newest=1, apply=True)
    assert done.applied and before - folder_bytes(models) == done.bytes > 9700
    assert _gone(ws, "rl-2", "sft-2", "sft-9.partial", "rl-1", "sft-1", "base-0", "sft-3") == {
        "rl-2",
        "sft-2",
        "sft-9.partial",
    }
    assert (ws.path.parent / "my-model").exists()  # a model folder the user brought is never removed
    lineage = ws.store.query("SELECT ancestor_id FROM checkpoint_lineage WHERE model_id = 'rl-1' ORDER BY depth")
    assert [r["ancestor_id"] for r in lineage] == ["rl-1", "sft-1", "base-0"]
    assert checkpoints.find(ws.store, "rl-1") is not None
    assert checkpoints.find(ws.store, "rl-2") is None  # its row stays; a step that needs it trains it again
    assert ws.store.scalar("SELECT count(*) FROM checkpoints WHERE model_id = 'rl-2'") == 1
    assert not collect_garbage(ws.store, ws.path, ws.db_path, keep_newest=1, apply=True).removals


def test_an_unfinished_cycle_keeps_its_checkpoints_and_a_live_partial_is_never_removed(history) -> None:
    ws = history
    _checkpoint(ws, "sft-4", "sft", "rl-1", 100)
    _checkpoint(ws, "sft-5", "sft", "rl-1", 100)
    _cycle(ws, "c4", "rl-1", "sft-4", promoted=False, finish=False)  # killed: --resume needs sft-4
    plan = collect_garbage(ws.store, ws.path, ws.db_path, keep_newest=0)
    assert sorted(r.path.name for r in plan.removals) == ["rl-2", "sft-2", "sft-3", "sft-5"]
    assert (
        plan.kept["an unfinished cycle needs it"] == 1 and plan.kept["a .partial an unfinished cycle may resume"] == 1
    )
    cycles.finish(ws.store, cycles.load(ws.store, "c4"))
    with checkpoints.staging(checkpoints.models_dir(ws.path) / "sft-6", resume=True):  # a run writing now
        plan = collect_garbage(ws.store, ws.path, ws.db_path, keep_newest=0)
        assert plan.kept["a .partial being written"] == 1
        assert "sft-6.partial" not in {r.path.name for r in plan.removals}
        assert "sft-9.partial" in {r.path.name for r in plan.removals}


def test_the_gc_command_lists_then_frees_and_waits_for_no_cycle(history) -> None:
    ws = history
    size = f"{collect_garbage(ws.store, ws.path, ws.db_path, keep_newest=1).bytes:,} bytes"
    config = ws.path.parent / "gc.yaml"
    config.write_text(f"workspace:\n  path: {ws.path}\n")
    dry = run_cli("gc", "--config", str(config), "--keep", "1", timeout=120)
    assert dry.returncode == 0, dry.stderr
    out = " ".join(dry.stdout.split())
    assert f"would free {size}" in out and "`campflow gc --yes` deletes them" in out and "rl-2" in out
    assert not _gone(ws, "rl-2")
    with WorkspaceLock(ws.db_path, "c9"):
        busy = run_cli("gc", "--config", str(config), "--yes", timeout=120)
    assert busy.returncode == 3 and "cycle c9 has held this workspace" in busy.stderr
    freed = run_cli("gc", "--config", str(config), "--keep", "1", "--yes", timeout=120)
    assert freed.returncode == 0, freed.stderr
    assert f"freed {size}" in " ".join(freed.stdout.split())
    assert _gone(ws, "rl-2", "sft-2", "sft-9.partial") == {"rl-2", "sft-2", "sft-9.partial"}
