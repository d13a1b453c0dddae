"""``campflow train`` under the launchers TRL users run it with: accelerate launch, and torchrun with 2 processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from campflow.config import TinyModelConfig
from tests import fixed_chats

BIN = Path(sys.executable).parent


@pytest.fixture
def trained_workspace(tmp_path: Path) -> Path:
    """A workspace with the fixed-chat tiny model registered as ``base-fixed`` and dataset ``sft-fixed``."""
    from campflow.storage.store import Store
    from campflow.training import checkpoints, tinymodel

    store = Store(tmp_path / "campflow.duckdb")
    tinymodel.build_tiny_model(tmp_path / "base", TinyModelConfig(**fixed_chats.TINY), ["fixed"],
                               texts=fixed_chats.corpus(tinymodel.chat_template()))
    checkpoints.register(store, "base-fixed", "base", tmp_path / "base")
    fixed_chats.save_sft_dataset(store, tmp_path / "ds")
    return tmp_path


def _launch(launcher: list[str], ws: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(ws / "prefect"), "CAMPFLOW__WORKSPACE__PATH": str(ws), "COLUMNS": "200"}
    for leftover in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_CPU"):
        env.pop(leftover, None)
    return subprocess.run([*launcher, "-m", "campflow.cli", "train", "sft", "--from", "base-fixed", "--dataset",
                           "sft-fixed", "--steps", "2"], cwd=ws, env=env, capture_output=True, text=True, timeout=300)


def _sft_rows(ws: Path) -> list[dict]:
    from campflow.storage.store import Store

    return Store(ws / "campflow.duckdb").query("SELECT model_id, path, metrics FROM checkpoints WHERE kind = 'sft'")


def test_accelerate_launch_trains_and_records_one_checkpoint(trained_workspace: Path) -> None:
    ws = trained_workspace
    done = _launch([str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "1"], ws)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _sft_rows(ws)
    assert len(rows) == 1 and Path(rows[0]["path"]).exists()
    assert '"loss_curve"' in rows[0]["metrics"]
    assert sorted(p.name for p in (ws / "models").iterdir()) == [rows[0]["model_id"]]


def test_two_processes_train_and_only_the_main_one_writes_the_store_and_checkpoint(trained_workspace: Path) -> None:
    ws = trained_workspace
    done = _launch([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"], ws)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _sft_rows(ws)
    assert len(rows) == 1, "one checkpoint row, written once"
    assert sorted(p.name for p in (ws / "models").iterdir()) == [rows[0]["model_id"]], "no second or partial folder"
    assert done.stdout.count("evaluate it:") == 1, "one process reports"
    single = _launch([str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "1"], ws)
    assert single.returncode == 0, single.stderr[-2000:]
    assert len({r["model_id"] for r in _sft_rows(ws)}) == 2, "two processes see twice the batch: another model"
