"""SFT throughput: tokens/s through TRL's SFTTrainer vs a bare PyTorch loop, same model, same batches;
and campflow's labelled-positions loss vs the model's own loss on every position.

Both start from the same base weights and see the same batches (TRL's own tokenized dataset and data
collator), with AdamW at the same learning rate; the bare loop is forward, backward, step. The ratio
is TRL's throughput, as campflow runs it, over the bare loop's (1.0 means TRL costs nothing extra);
TRL's default loss (a chunked, fused lm-head kernel) is timed too. The first step of each run is a
warm-up and not timed; the bare loop runs before and after TRL and its faster pass counts, so a noisy
neighbour slows neither side alone.

The second ratio is campflow's default (:mod:`campflow.training.labelled_loss`: length-sorted sub-batches,
the output projection only at labelled positions) over the model's own loss on every padded position,
both through TRL, run alternately twice each (the faster pass of each counts), with the loss of every
step compared: the same objective, so the losses agree to float rounding.

Run: python benchmarks/bench_sft_throughput.py [--steps 30] [--batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()

    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig

    from campflow.agents.oracle import OraclePolicy
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import train_instances
    from campflow.config import load_config
    from campflow.hardware import resolve_hardware
    from campflow.rollout.engine import EpisodeSpec, run_episodes
    from campflow.storage.workspace import Workspace
    from campflow.training.base import ensure_base
    from campflow.training.filtering import build_sft_dataset
    from campflow.training.sft import checkpointing_arg, sft_trainer

    datasets.disable_progress_bars()
    ws = Path(tempfile.mkdtemp())
    cfg = load_config(None, {"workspace.path": str(ws), "training.levels": [1, 2]}, env={})
    store = Workspace.from_config(cfg).store
    base = ensure_base(store, cfg)
    instances = [i for b in ("calculator", "maze") for i in train_instances(registry.make(b), 64, levels=[1, 2])]
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
    tokenizer = AutoTokenizer.from_pretrained(base.path)
    train = datasets.load_from_disk(str(build.path))
    torch.set_num_threads(torch.get_num_threads())

    sft_args = SFTConfig(
        output_dir=str(ws / "trl"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        logging_steps=args.steps,
        report_to=[],
        save_strategy="no",
        assistant_only_loss=True,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
        **resolve_hardware("cpu").trainer_args,
        **checkpointing_arg(SFTConfig, False),
    )  # as campflow runs it (training.sft)

    def trainer_for(fused_loss: bool, labelled: bool = False) -> Any:
        return sft_trainer(
            fused_loss,
            labelled,
            model=AutoModelForCausalLM.from_pretrained(base.path),
            args=sft_args,
            train_dataset=train,
            processing_class=tokenizer,
        )

    loader = trainer_for(False).get_train_dataloader()
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == args.steps:
            break
    while len(batches) < args.steps:
        batches += batches[: args.steps - len(batches)]

    def bare_pass() -> float:
        model = AutoModelForCausalLM.from_pretrained(base.path)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        start = 0.0
        for k, batch in enumerate(batches):
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if k == 0:
                start = time.perf_counter()
        return time.perf_counter() - start

    def trl_pass(fused_loss: bool, labelled: bool = False, losses: list[float] | None = None) -> tuple[int, float]:
        """(tokens, seconds) of one TRL run after its warm-up step; its loss per step into ``losses``."""
        trainer = trainer_for(fused_loss, labelled)

        class StepClock(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003
                if state.global_step == 1:
                    self.start, self.tokens = time.perf_counter(), trainer.tokens_seen
                self.end = time.perf_counter()

        clock = StepClock()
        trainer.add_callback(clock)
        if losses is not None:
            trainer.args.logging_steps = 1
        trainer.train()
        if losses is not None:
            losses[:] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        return trainer.tokens_seen - clock.tokens, clock.end - clock.start

    bare_before = bare_pass()
    trl_tokens, trl_s = trl_pass(fused_loss=False)
    fused_tokens, fused_s = trl_pass(fused_loss=True)
    bare_s = min(bare_before, bare_pass())
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[1:])
    fused_rate = fused_tokens / fused_s
    trl_rate, bare_rate = trl_tokens / trl_s, tokens / bare_s
    print(
        f"{args.steps} steps of batch {args.batch} (the first one not timed): bare loop {tokens} tokens in "
        f"{bare_s:.1f}s ({bare_rate:,.0f} tok/s)"
    )
    print(f"  TRL as campflow runs it (model's loss): {trl_s:.1f}s ({trl_rate:,.0f} tok/s)")
    print(
        f"  TRL's default fused lm-head loss:       {fused_s:.1f}s ({fused_rate:,.0f} tok/s, "
        f"{fused_rate / bare_rate:.2f} of bare)"
    )
    print(f"RATIO SFT throughput: TRL/bare = {trl_rate / bare_rate:.2f}")

    every_losses: list[float] = []
    labelled_losses: list[float] = []
    every = [trl_pass(False, False, every_losses)[1]]
    labelled = [trl_pass(False, True, labelled_losses)[1]]
    every.append(trl_pass(False, False)[1])
    labelled.append(trl_pass(False, True)[1])
    worst = max(abs(a - b) / max(abs(a), 1e-8) for a, b in zip(every_losses, labelled_losses, strict=True))
    print(
        f"  the model's loss on every position: {min(every):.1f}s; on labelled positions (campflow's default): "
        f"{min(labelled):.1f}s; per-step losses agree within {worst:.1e} relative over {len(every_losses)} steps"
    )
    print(f"RATIO SFT step time: every position / labelled positions = {min(every) / min(labelled):.2f}")


if __name__ == "__main__":
    main()
