"""``campflow train`` under the launchers TRL users run it with: accelerate launch, and torchrun with 2 processes."""

from __future__ import annotations

import json
import os
import socket
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
    tinymodel.build_tiny_model(
        tmp_path / "base",
        TinyModelConfig(**fixed_chats.TINY),
        ["fixed"],
        texts=fixed_chats.corpus(tinymodel.chat_template()),
    )
    checkpoints.register(store, "base-fixed", "base", tmp_path / "base")
    fixed_chats.save_sft_dataset(store, tmp_path / "ds")
    return tmp_path


def _env(ws: Path) -> dict[str, str]:
    env = {**os.environ, "PREFECT_HOME": str(ws / "prefect"), "CAMPFLOW__WORKSPACE__PATH": str(ws), "COLUMNS": "200"}
    for leftover in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_CPU"):
        env.pop(leftover, None)
    return env


def _train(launcher: list[str], steps: int = 2) -> list[str]:
    return [*launcher, "-m", "campflow.cli", "train", "sft", "--from", "base-fixed", "--dataset", "sft-fixed"] + [
        "--steps",
        str(steps),
    ]


def _launch(launcher: list[str], ws: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_train(launcher), cwd=ws, env=_env(ws), capture_output=True, text=True, timeout=300)


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


def test_two_machines_on_one_host_train_a_step_and_only_machine_0_writes_the_checkpoint(
    trained_workspace: Path,
) -> None:
    """`accelerate launch` once per machine (``--num_machines 2``, each its ``--machine_rank``), meeting at
    machine 0's address; here both "machines" are this host and share the workspace, as two hosts share a
    workspace path. Without GPUs the processes talk over gloo."""
    ws = trained_workspace
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    machines = [
        subprocess.Popen(
            _train(
                [
                    str(BIN / "accelerate"),
                    "launch",
                    "--multi_gpu",  # torchrun's launcher, on CPUs too
                    "--num_machines",
                    "2",
                    "--num_processes",
                    "2",
                    "--machine_rank",
                    str(rank),
                    "--main_process_ip",
                    "127.0.0.1",
                    "--main_process_port",
                    str(port),
                ],
                steps=1,
            ),
            cwd=ws,
            env=_env(ws),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [m.communicate(timeout=300) for m in machines]
    finally:
        for m in machines:
            m.kill()
    for m, (_, err) in zip(machines, outputs, strict=True):
        assert m.returncode == 0, err[-3000:]
    rows = _sft_rows(ws)
    assert len(rows) == 1, "one checkpoint row, written once"
    assert sorted(p.name for p in (ws / "models").iterdir()) == [rows[0]["model_id"]], "no second or partial folder"
    assert [out.count("evaluate it:") for out, _ in outputs] == [1, 0], "machine 0 reports, machine 1 does not"
    assert json.loads(rows[0]["metrics"])["steps"] == 1


def test_grpos_scale_options_pass_from_the_config_to_trl_and_are_off_by_default(tmp_path: Path) -> None:
    from campflow.config import load_config
    from campflow.hardware import Capability, resolve_hardware
    from campflow.training.rl import EpisodeLimits, grpo_arguments

    cpu = resolve_hardware("auto", "auto", Capability())
    defaults = load_config(None, {}, env={}).training.rl
    with pytest.raises(ValueError, match="needs limits"):  # null limits are derived from the prompts in train_rl
        grpo_arguments(defaults, cpu, tmp_path)
    default = grpo_arguments(defaults, cpu, tmp_path, limits=EpisodeLimits(384, 12))
    assert (default.max_completion_length, default.max_tool_calling_iterations) == (384, 12)
    assert (default.use_vllm, default.gradient_accumulation_steps) == (False, 1)
    assert default.per_device_train_batch_size == 8 * 4  # num_generations x prompts_per_step
    scale = load_config(Path(__file__).resolve().parent.parent / "configs" / "scale.yaml", env={}).training.rl
    server = scale.model_copy(
        update={
            "vllm_mode": "server",
            "vllm_server_base_url": "http://vllm-trl:8000",
            "vllm_gpu_memory_utilization": 0.5,
        }
    )
    args = grpo_arguments(server, cpu, tmp_path, limits=EpisodeLimits(384, 12), run_name="rl-abc")
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_base_url) == (True, "server", "http://vllm-trl:8000")
    assert (args.vllm_gpu_memory_utilization, args.gradient_accumulation_steps) == (0.5, 2)
    assert (args.per_device_train_batch_size, args.num_generations, args.run_name) == (16, 8, "rl-abc")
