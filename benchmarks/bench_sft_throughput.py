"""SFT throughput: tokens/s through TRL's SFTTrainer vs a bare PyTorch loop, same model, same batches.

Both start from the same base weights and see the same batches (TRL's own tokenized dataset and data
collator), with AdamW at the same learning rate; the bare loop is forward, backward, step. The ratio
is TRL's throughput over the bare loop's (1.0 means TRL costs nothing extra).

Run: python benchmarks/bench_sft_throughput.py [--steps 30] [--batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()

    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from campflow.agents.oracle import OraclePolicy
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import train_instances
    from campflow.config import load_config
    from campflow.rollout.engine import EpisodeSpec, run_episodes
    from campflow.storage.store import Store
    from campflow.training.base import ensure_base
    from campflow.training.filtering import build_sft_dataset

    datasets.disable_progress_bars()
    ws = Path(tempfile.mkdtemp())
    cfg = load_config(None, {"workspace.path": str(ws), "training.levels": [1, 2]}, env={})
    store = Store(cfg.workspace.db_path)
    base = ensure_base(store, cfg)
    instances = [i for b in ("calculator", "maze") for i in train_instances(registry.make(b), 64, levels=[1, 2])]
    store.write_instances(instances, split="train")
    store.start_run("teacher", "collect", {}, "oracle")
    store.write_episodes(asyncio.run(run_episodes([EpisodeSpec(registry.make(i.bootcamp), i) for i in instances],
                                                  OraclePolicy(), run_id="teacher")))
    build = build_sft_dataset(store, ws, ["teacher"], cfg.training.filter)
    tokenizer = AutoTokenizer.from_pretrained(base.path)
    train = datasets.load_from_disk(str(build.path))
    torch.set_num_threads(torch.get_num_threads())

    sft_args = SFTConfig(output_dir=str(ws / "trl"), max_steps=args.steps, per_device_train_batch_size=args.batch,
                         learning_rate=1e-3, lr_scheduler_type="constant", logging_steps=args.steps, report_to=[],
                         save_strategy="no", bf16=False, use_cpu=True, assistant_only_loss=True, seed=0,
                         disable_tqdm=True, dataloader_num_workers=0)
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(base.path), args=sft_args, train_dataset=train,
                         processing_class=tokenizer)
    loader = trainer.get_train_dataloader()
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == args.steps:
            break
    while len(batches) < args.steps:
        batches += batches[: args.steps - len(batches)]
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)

    t0 = time.perf_counter()
    trainer.train()
    trl_s = time.perf_counter() - t0
    trl_tokens = next(h["num_tokens"] for h in reversed(trainer.state.log_history) if "num_tokens" in h)

    model = AutoModelForCausalLM.from_pretrained(base.path)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    t0 = time.perf_counter()
    for batch in batches:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    bare_s = time.perf_counter() - t0
    trl_rate, bare_rate = trl_tokens / trl_s, tokens / bare_s
    print(f"{args.steps} steps of batch {args.batch}: TRL {trl_tokens:.0f} tokens in {trl_s:.1f}s "
          f"({trl_rate:,.0f} tok/s); bare loop {tokens} tokens in {bare_s:.1f}s ({bare_rate:,.0f} tok/s)")
    print(f"RATIO SFT throughput: TRL/bare = {trl_rate / bare_rate:.2f}")


if __name__ == "__main__":
    main()
