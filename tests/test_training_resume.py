"""SFT and GRPO resume mid-run: a run killed (SIGKILL) at a step after a save continues from its last
checkpoint and ends as the uninterrupted run ends.

Both runs use one CPU thread in float32. Same weights, optimizer moments, scheduler step, data order
and RNG states should give the same floats; the tolerance (1e-5 relative on a loss, 1e-6 absolute on a
weight) is there only for what a resumed process may do differently at the kernel level (oneDNN
picks its algorithms by memory alignment, which differs between processes), far below what one
optimizer step moves (a step at these learning rates moves weights by ~1e-3).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import train_instances
from campflow.config import RLSettings, SFTSettings, load_config
from campflow.hardware import resolve_hardware
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.store import Store
from campflow.training.base import ensure_base
from campflow.training.filtering import build_sft_dataset
from tests.conftest import REPO

LOSS_RTOL, WEIGHT_ATOL = 1e-5, 1e-6
SFT = SFTSettings(max_steps=8, batch_size=2, learning_rate=1e-3)
RL = RLSettings(
    max_steps=3,
    num_generations=2,
    prompts_per_step=1,
    max_completion_length=32,
    max_tool_calling_iterations=2,
    learning_rate=1e-3,
)

# trains as the spec says and SIGKILLs itself at the end of step ``kill_at`` (after the save before it)
KILLED = """
import json, os, signal, sys
from transformers import TrainerCallback
import campflow.training.rl as rl
import campflow.training.sft as sft
from campflow.bootcamps import registry
from campflow.config import RLSettings, SFTSettings
from campflow.hardware import resolve_hardware
from campflow.storage.store import Store

spec = json.loads(sys.argv[1])

class KillAt(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == spec["kill_at"]:
            os.kill(os.getpid(), signal.SIGKILL)

sft.progress_callback = rl.progress_callback = lambda key, description: KillAt()
if spec.get("kill_in"):  # a kill after training ended: while the run is marked finished, or as the store records it
    import campflow.training.checkpoints as checkpoints
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    if spec["kill_in"] == "mark_trained":
        sft.mark_trained = rl.mark_trained = die
    else:
        checkpoints.register = die
store, ws = Store(spec["db"]), __import__("pathlib").Path(spec["ws"])
hardware = resolve_hardware("cpu", "fp32", cpu_threads=1)
if spec["kind"] == "sft":
    sft.train_sft(store, ws, spec["base"], spec["dataset"], SFTSettings(**spec["cfg"]), hardware=hardware, save_steps=2)
else:
    made = [registry.make(b).generate(p, s) for b, p, s in spec["instances"]]
    rl.train_rl(store, ws, spec["base"], ["calculator"], RLSettings(**spec["cfg"]), hardware=hardware,
                instances=made, save_steps=1)
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A workspace with the tiny model and an SFT dataset of oracle calculator episodes, and a copy of it
    (the uninterrupted runs train in the copy)."""
    root = tmp_path_factory.mktemp("resume")
    ws = root / "ws"
    cfg = load_config(
        None,
        {
            "workspace.path": str(ws),
            "training.tiny.corpus_per_level": 6,
            "training.tiny.vocab_size": 600,
            "training.tiny.hidden_size": 64,
            "training.tiny.intermediate_size": 128,
            "training.tiny.layers": 2,
            "training.tiny.heads": 2,
            "training.tiny.kv_heads": 1,
            "training.tiny.max_positions": 1024,
            "training.tiny.pretrain.steps": 0,
        },
        env={},
    )
    store = Store(cfg.workspace.db_path)
    base = ensure_base(store, cfg)
    calc = registry.make("calculator")
    made = train_instances(calc, 12, levels=[1])
    store.write_instances(made, split="train")
    store.start_run("teacher", "collect", {}, "oracle")
    store.write_episodes(
        asyncio.run(run_episodes([EpisodeSpec(calc, i) for i in made], OraclePolicy(), run_id="teacher"))
    )
    dataset = build_sft_dataset(store, ws, ["teacher"], cfg.training.filter).dataset_id
    shutil.copytree(ws, root / "reference")
    return ws, root / "reference", base.model_id, dataset, made[:4]


def _killed_run(ws: Path, spec: dict) -> None:
    full = {**spec, "ws": str(ws), "db": str(ws / "campflow.duckdb")}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED, json.dumps(full)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-3000:]


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= WEIGHT_ATOL, f"weights differ by up to {worst}"


def _assert_same_curve(resumed: list, reference: list, start: int) -> None:
    assert [s for s, _ in resumed] == [s for s, _ in reference]
    for (step, a), (_, b) in zip(resumed, reference, strict=True):
        if step >= start:
            assert a == pytest.approx(b, rel=LOSS_RTOL), (step, a, b)


def test_sft_killed_after_a_save_resumes_from_it_and_matches_the_uninterrupted_run(prepared) -> None:
    from campflow.training.sft import train_sft

    ws, reference, base, dataset, _ = prepared
    hardware = resolve_hardware("cpu", "fp32", cpu_threads=1)
    _killed_run(ws, {"kind": "sft", "base": base, "dataset": dataset, "cfg": SFT.model_dump(), "kill_at": 5})
    partial = next((ws / "models").glob("sft-*.partial"))
    assert sorted(p.name for p in (partial / "trainer").glob("checkpoint-*")) == ["checkpoint-4"]
    resumed = train_sft(Store(ws / "campflow.duckdb"), ws, base, dataset, SFT, hardware=hardware, save_steps=2)
    straight = train_sft(
        Store(reference / "campflow.duckdb"), reference, base, dataset, SFT, hardware=hardware, save_steps=2
    )
    assert resumed.metrics["resumed_from_step"] == 4 and straight.metrics["resumed_from_step"] is None
    assert resumed.metrics["steps"] == straight.metrics["steps"] == 8
    _assert_same_curve(resumed.metrics["loss_curve"], straight.metrics["loss_curve"], start=5)
    _assert_same_weights(resumed.checkpoint.path, straight.checkpoint.path)
    assert not partial.exists() and not list(resumed.checkpoint.path.glob("**/checkpoint-*"))


def test_grpo_killed_after_a_save_resumes_from_it_and_matches_the_uninterrupted_run(prepared) -> None:
    from campflow.training.rl import train_rl

    ws, reference, base, _, made = prepared
    hardware = resolve_hardware("cpu", "fp32", cpu_threads=1)
    rows = [(i.bootcamp, i.params.model_dump(mode="json"), i.seed) for i in made]
    _killed_run(ws, {"kind": "rl", "base": base, "instances": rows, "cfg": RL.model_dump(), "kill_at": 2})
    partial = next((ws / "models").glob("rl-*.partial"))
    assert sorted(p.name for p in (partial / "trainer").glob("checkpoint-*")) == ["checkpoint-1"]

    def train(where: Path):
        return train_rl(
            Store(where / "campflow.duckdb"),
            where,
            base,
            ["calculator"],
            RL,
            hardware=hardware,
            instances=made,
            save_steps=1,
        )

    resumed, straight = train(ws), train(reference)
    assert resumed.metrics["resumed_from_step"] == 1 and straight.metrics["resumed_from_step"] is None
    assert resumed.metrics["steps"] == straight.metrics["steps"] == 3
    # the rollouts sampled after the resume are the uninterrupted run's: same prompts, same RNG state, so
    # the same tokens and the same entropy of them (the tiny untrained model earns no reward here, so the
    # weights move only where a group's rewards differ; they must match either way)
    entropies = resumed.metrics["entropy_curve"]
    assert len({round(e, 6) for _, e in entropies}) == len(entropies) == 3, entropies
    _assert_same_curve(entropies, straight.metrics["entropy_curve"], start=2)
    _assert_same_curve(resumed.metrics["reward_curve"], straight.metrics["reward_curve"], start=2)
    _assert_same_weights(resumed.checkpoint.path, straight.checkpoint.path)


@pytest.mark.parametrize("kill_in", ["mark_trained", "register"])
def test_sft_killed_after_its_last_step_is_not_trained_again(prepared, kill_in) -> None:
    """A kill after the last step (while the finished model is staged, or between its move into place and the
    store's row) loses no training: the rerun resumes from the last save (at the last step) or records the
    model that is in place, byte for byte, without a training step."""
    from campflow.training.sft import train_sft

    ws, _, base, dataset, _ = prepared
    cfg = SFTSettings(max_steps=4 if kill_in == "register" else 6, batch_size=2, learning_rate=1e-3)
    _killed_run(
        ws,
        {"kind": "sft", "base": base, "dataset": dataset, "cfg": cfg.model_dump(), "kill_at": -1, "kill_in": kill_in},
    )
    store = Store(ws / "campflow.duckdb")
    hardware = resolve_hardware("cpu", "fp32", cpu_threads=1)
    if kill_in == "mark_trained":
        partial = next(p for p in (ws / "models").glob("sft-*.partial") if (p / "model.safetensors").exists())
        assert sorted(p.name for p in (partial / "trainer").glob("checkpoint-*")) == ["checkpoint-6"]
        again = train_sft(store, ws, base, dataset, cfg, hardware=hardware, save_steps=2)
        assert again.metrics["resumed_from_step"] == 6 and again.metrics["steps"] == 6
        assert not partial.exists()
    else:
        placed = [p for p in (ws / "models").glob("sft-*") if (p / "campflow-trained.json").exists()]
        unrecorded = [
            p for p in placed if store.scalar("SELECT count(*) FROM checkpoints WHERE model_id = ?", [p.name]) == 0
        ]
        assert len(unrecorded) == 1, placed
        before = (unrecorded[0] / "model.safetensors").read_bytes()
        again = train_sft(store, ws, base, dataset, cfg, hardware=hardware, save_steps=2)
        assert again.reused and again.checkpoint.path == unrecorded[0]
        assert again.metrics["steps"] == 4 and again.metrics["resumed_from_step"] is None
        assert (again.checkpoint.path / "model.safetensors").read_bytes() == before
    assert store.scalar("SELECT kind FROM checkpoints WHERE model_id = ?", [again.checkpoint.model_id]) == "sft"
    assert not list(again.checkpoint.path.glob("**/checkpoint-*")) and not (again.checkpoint.path / "trainer").exists()
