"""GPU check: campflow SFT against a bare PyTorch loop on CUDA in bf16, GPU against CPU, batched evaluation.

Builds a ~100M-parameter model of the embedded architecture (Qwen3, the tokenizer trained here, no
download) and an SFT dataset of oracle episodes, then, on CUDA in bf16:

- SFT for a fixed number of steps through campflow (its TRL trainer and arguments, as `campflow train
  sft` runs them) and through a bare PyTorch loop (forward, backward, clip, AdamW; float32 weights
  under bf16 autocast, as the Trainer's mixed precision) on the same batches; tokens/s of each after
  a warm-up step (the bare loop runs before and after campflow, its faster pass counts), and RATIO
  campflow/bare (goal: >= 0.9);
- the same campflow SFT on the CPU for a few steps (a small slice), and RATIO GPU/CPU tokens/s (goal:
  >= 20 at ~100M parameters);
- a batched local-policy evaluation (campflow's LocalPolicy through the rollout engine) on the GPU and,
  on a small slice, on the CPU: generated tokens/s and RATIO GPU/CPU;
- peak GPU memory of SFT and of evaluation.

Without a CUDA GPU it says so, runs the CPU rows at a small model size (the embedded default's) on a
small slice, campflow SFT against the bare loop on the CPU, and exits 0. Runs in under 10 minutes.

Run: python benchmarks/bench_gpu.py [--steps 30] [--batch 8] [--cpu-steps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# ~100M parameters at the tiny model's 4096-token vocabulary; the embedded default is the small size.
GPU_SIZE = {"hidden_size": 768, "intermediate_size": 2560, "layers": 13, "heads": 12, "kv_heads": 4}
SMALL_SIZE: dict[str, int] = {}


def prepare(ws: Path, size: dict[str, int], per_bootcamp: int) -> tuple[Path, Path]:
    """A model of ``size`` and an SFT dataset of oracle episodes; returns (model folder, dataset folder)."""
    from campflow.agents.oracle import OraclePolicy
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import train_instances
    from campflow.config import load_config
    from campflow.rollout.engine import EpisodeSpec, run_episodes
    from campflow.storage.workspace import Workspace
    from campflow.training.base import ensure_base
    from campflow.training.filtering import build_sft_dataset

    overrides = {
        "workspace.path": str(ws),
        "training.levels": [1, 2],
        "training.device": "cpu",
        "training.precision": "fp32",
        "training.tiny.corpus_per_level": 8,
        **{f"training.tiny.{k}": v for k, v in size.items()},
    }
    cfg = load_config(None, overrides, env={})
    store = Workspace.from_config(cfg).store
    base = ensure_base(store, cfg)
    instances = [
        i for b in ("calculator", "maze") for i in train_instances(registry.make(b), per_bootcamp, levels=[1, 2])
    ]
    store.write_instances(instances, split="train")
    store.start_run("teacher", "collect", {}, "oracle")
    store.write_episodes(
        asyncio.run(
            run_episodes(
                [EpisodeSpec(registry.make(i.bootcamp), i) for i in instances], OraclePolicy(), run_id="teacher"
            )
        )
    )
    build = build_sft_dataset(store, ws, ["teacher"], cfg.training.filter)
    print(f"model: {base.metrics['parameters'] / 1e6:.1f}M parameters; dataset: {build.rows} episodes", flush=True)
    return base.path, build.path


def campflow_trainer(
    model_path: Path, data: Path, hardware: Any, steps: int, batch: int, out: Path
) -> tuple[Any, list]:
    """campflow's SFT trainer (its TRL trainer and arguments) and the first ``steps`` batches it trains on."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from campflow.config import SFTSettings
    from campflow.training.sft import quiet, sft_arguments, sft_trainer

    cfg = SFTSettings(max_steps=steps, batch_size=batch, learning_rate=1e-4)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=hardware.load_dtype(trainable=True))
    trainer = quiet(
        sft_trainer(
            cfg.fused_loss,
            model=model,
            args=sft_arguments(cfg, hardware, out, 2048),
            train_dataset=datasets.load_from_disk(str(data)),
            processing_class=tokenizer,
        )
    )
    batches: list[dict[str, Any]] = []
    for b in trainer.get_train_dataloader():
        batches.append({k: v for k, v in b.items() if k in ("input_ids", "attention_mask", "labels")})
        if len(batches) == steps:
            break
    return trainer, batches


def campflow_sft(trainer: Any, hardware: Any) -> float:
    """Tokens/s of campflow's SFT trainer after its first step."""
    import torch
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003
            if hardware.kind == "cuda":
                torch.cuda.synchronize()
            if state.global_step == 1:
                self.start, self.tokens = time.perf_counter(), trainer.tokens_seen
            self.end = time.perf_counter()

    clock = StepClock()
    trainer.add_callback(clock)
    trainer.train()
    return (trainer.tokens_seen - clock.tokens) / (clock.end - clock.start)


def bare_sft(model_path: Path, batches: list[dict[str, Any]], hardware: Any) -> float:
    """Tokens/s of a bare loop on ``batches`` (after the first): forward, backward, clip, AdamW."""
    import torch
    from transformers import AutoModelForCausalLM

    device = torch.device(hardware.device)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    autocast = torch.autocast(device.type, dtype=hardware.torch_dtype(), enabled=hardware.precision != "fp32")
    start, tokens = 0.0, 0
    for k, batch in enumerate(batches):
        batch = {key: v.to(device) for key, v in batch.items()}
        with autocast:
            loss = model(**batch, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if hardware.kind == "cuda":
            torch.cuda.synchronize()
        if k == 0:
            start = time.perf_counter()
        else:
            tokens += int(batch["attention_mask"].sum())
    return tokens / (time.perf_counter() - start)


def evaluation(model_path: Path, hardware: Any, n: int, batch_size: int) -> float:
    """Generated tokens/s of a batched local-policy evaluation of ``n`` eval instances per bootcamp."""
    from campflow.agents.local import LocalPolicy
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import eval_instances
    from campflow.rollout.engine import EpisodeSpec, run_episodes

    specs = [
        EpisodeSpec(registry.make(b), i)
        for b in ("calculator", "maze")
        for i in eval_instances(registry.make(b), n, levels=[1, 2])
    ]
    policy = LocalPolicy(
        model_path, batch_size=batch_size, max_new_tokens=64, device=hardware.device, precision=hardware.precision
    )
    asyncio.run(run_episodes(specs[:2], policy, concurrency=2))  # load and warm up, not timed
    policy = LocalPolicy(
        model_path, batch_size=batch_size, max_new_tokens=64, device=hardware.device, precision=hardware.precision
    )
    started = time.perf_counter()
    episodes = asyncio.run(run_episodes(specs, policy, concurrency=batch_size))
    return sum(e.completion_tokens for e in episodes) / (time.perf_counter() - started)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="SFT steps on the GPU (the first is not timed)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--cpu-steps", type=int, default=3, help="SFT steps on the CPU slice")
    ap.add_argument("--eval-n", type=int, default=64, help="eval instances per bootcamp on the GPU")
    args = ap.parse_args()

    import datasets
    import torch

    from campflow.hardware import resolve_hardware

    datasets.disable_progress_bars()
    cpu = resolve_hardware("cpu", "fp32")
    ws = Path(tempfile.mkdtemp(prefix="campflow-bench-gpu-"))
    if not torch.cuda.is_available():
        print(
            "no CUDA GPU on this machine: the GPU rows (campflow vs bare on CUDA in bf16, GPU/CPU, peak "
            "memory) are not run; CPU rows at the embedded model's size on a small slice follow"
        )
        model_path, data = prepare(ws, SMALL_SIZE, 24)
        trainer, batches = campflow_trainer(model_path, data, cpu, args.cpu_steps + 1, args.batch, ws / "trl")
        # the bare loop runs before and after campflow and its faster pass counts: a busy neighbour or a
        # first pass over new shapes then slows neither side alone
        bare_before = bare_sft(model_path, batches, cpu)
        ours = campflow_sft(trainer, cpu)
        bare = max(bare_before, bare_sft(model_path, batches, cpu))
        print(
            f"CPU SFT, {args.cpu_steps} timed steps of batch {args.batch}: campflow {ours:,.0f} tok/s, "
            f"bare loop {bare:,.0f} tok/s"
        )
        print(f"RATIO CPU SFT throughput: campflow/bare = {ours / bare:.2f}")
        return 0

    gpu = resolve_hardware("cuda", "bf16")
    print(f"GPU: {torch.cuda.get_device_name(0)}", flush=True)
    model_path, data = prepare(ws, GPU_SIZE, 64)
    trainer, batches = campflow_trainer(model_path, data, gpu, args.steps, args.batch, ws / "trl-gpu")
    bare_before = bare_sft(model_path, batches, gpu)  # before and after campflow, the faster pass counts
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    ours = campflow_sft(trainer, gpu)
    sft_peak = torch.cuda.max_memory_allocated() / 2**30
    del trainer
    torch.cuda.empty_cache()
    bare = max(bare_before, bare_sft(model_path, batches, gpu))
    print(
        f"GPU SFT (bf16), {args.steps - 1} timed steps of batch {args.batch}: campflow {ours:,.0f} tok/s, "
        f"bare loop {bare:,.0f} tok/s",
        flush=True,
    )
    cpu_ours = campflow_sft(
        campflow_trainer(model_path, data, cpu, args.cpu_steps + 1, args.batch, ws / "trl-cpu")[0], cpu
    )
    print(f"CPU SFT (fp32), {args.cpu_steps} timed steps: campflow {cpu_ours:,.0f} tok/s", flush=True)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    gpu_eval = evaluation(model_path, gpu, args.eval_n, 64)
    eval_peak = torch.cuda.max_memory_allocated() / 2**30
    cpu_eval = evaluation(model_path, cpu, 4, 8)
    print(f"evaluation (local policy, batched): GPU {gpu_eval:,.0f} generated tok/s, CPU slice {cpu_eval:,.0f}")
    print(f"PEAK GPU memory: SFT {sft_peak:.2f} GiB, evaluation {eval_peak:.2f} GiB")
    print(f"RATIO GPU SFT throughput: campflow/bare = {ours / bare:.2f} (goal >= 0.9)")
    print(f"RATIO SFT tokens/s: GPU/CPU = {ours / cpu_ours:.1f} (goal >= 20)")
    print(f"RATIO evaluation tokens/s: GPU/CPU = {gpu_eval / cpu_eval:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
