"""The vision miniature: the embedded tiny VLM on gridworld level 1, base -> SFT, in image and in text mode.

Fixed seeds; the held-out eval split of gridworld level 1. For each observation mode (``image``: the
model reads the PNG frames; ``text``: the same model family, the same tiny Qwen3-VL, reads the text
map instead) it builds the tiny VLM, evaluates it, collects grounded-demonstrator episodes on
train-split instances in that mode, filters them into an SFT dataset (images kept in TRL's form),
fine-tunes with TRL's SFTTrainer, evaluates again, and prints the success rates with the wall time of
every stage.

Run: python benchmarks/bench_vision.py [--workspace DIR] [--modes image,text] [--sft-steps 400] [--eval-n 40]
     [--read-steps N] [--read-instances N] (the base's reading pretraining, campflow/training/reading.py;
     default the config's: 1,000 steps on 1,000 instances; 0 turns it off)
     [--max-image-pixels N] (image tokens per frame: N / 1024 at 16-pixel patches merged 2x2)
(measured on 2 CPU cores, mostly shared with one other job: image 0% -> 82.5%, base 5.6 min with its
reading pretraining, SFT 13.7 min; benchmarks/RESULTS.md, Vision, has the runs that led there)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, default=None)
    ap.add_argument("--modes", default="image,text", help="observation modes, in order")
    ap.add_argument("--collect-n", type=int, default=800, help="train instances for the demonstrator")
    ap.add_argument("--sft-steps", type=int, default=400)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-lr", type=float, default=2e-3)
    ap.add_argument("--eval-n", type=int, default=40, help="eval-split instances of gridworld level 1")
    ap.add_argument("--read-steps", type=int, default=None, help="reading pretraining steps of the base (config's)")
    ap.add_argument("--read-instances", type=int, default=None, help="train instances it reads (config's)")
    ap.add_argument(
        "--max-image-pixels", type=int, default=None, help="the tiny VLM's image budget (config's: 36864, 192x192)"
    )
    args = ap.parse_args()
    for flag in ("collect_n", "sft_steps", "sft_batch", "eval_n", "read_instances", "max_image_pixels"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SystemExit(f"--{flag.replace('_', '-')} = {value}: expected a positive number")
    if (args.read_steps is not None and args.read_steps < 0) or args.sft_lr <= 0:
        raise SystemExit(
            f"--read-steps {args.read_steps} / --sft-lr {args.sft_lr}: expected steps >= 0 and a positive rate"
        )

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    from campflow.config import load_config
    from campflow.flows.collect import collect
    from campflow.flows.evaluate import evaluate
    from campflow.storage.workspace import Workspace
    from campflow.training.base import ensure_vision_base
    from campflow.training.filtering import build_sft_dataset
    from campflow.training.sft import train_sft

    root = args.workspace or Path(tempfile.mkdtemp(prefix="bench-vision-"))
    results: dict[str, dict[str, float]] = {}
    reading_exact: float | None = None
    times: dict[str, float] = {}

    def timed(name: str, fn, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        print(f"-- {name}", flush=True)
        t0 = time.perf_counter()
        out = fn(*a, **k)
        times[name] = time.perf_counter() - t0
        print(f"   {name}: {times[name]:.0f}s", flush=True)
        return out

    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        cfg = load_config(
            None,
            {
                "workspace.path": str(root / mode),
                "training.bootcamps": ["gridworld"],
                "training.levels": [1],
                "training.collect_n": args.collect_n,
                "training.sft.max_steps": args.sft_steps,
                "training.sft.batch_size": args.sft_batch,
                "training.sft.learning_rate": args.sft_lr,
                "training.device": "auto",
                "training.precision": "auto",
                "eval.bootcamps": ["gridworld"],
                "eval.levels": [1],
                "eval.n": args.eval_n,
                "rollout.observation": mode,
                "rollout.concurrency": 32,
                "rollout.workers": 1,
                "rollout.shard_size": 1000,
                "policy.max_tokens": 96,  # image mode: what the frame shows (14 tokens at level 1), then the call
                "policy.batch_size": 32,
                **({"training.tiny_vl.read.steps": args.read_steps} if args.read_steps is not None else {}),
                **({"training.tiny_vl.read.instances": args.read_instances} if args.read_instances else {}),
                "training.tiny_vl.read.levels": [1],  # the frames the benchmark trains and evaluates on
                **(
                    {"training.tiny_vl.max_image_pixels": args.max_image_pixels}
                    if args.max_image_pixels is not None
                    else {}
                ),
            },
            env={},
        )
        store = Workspace.from_config(cfg).store

        def pass_rate(path: Path, run_id: str, cfg=cfg, store=store) -> float:  # noqa: ANN001
            c = cfg.model_copy(deep=True)
            c.policy.kind, c.policy.model = "local", str(path)
            summary = evaluate(c, run_id=run_id)
            value = store.scalar("SELECT avg(success::INTEGER) FROM episodes WHERE run_id = ?", [summary.run_id])
            return float(value or 0.0)

        base = timed(f"{mode}: build base", ensure_vision_base, store, cfg)
        if mode == "image" and cfg.training.tiny_vl.read.steps:
            read = timed(f"{mode}: base reads held-out frames", reading_check, base.path, cfg.training.tiny_vl.seed)
            print(f"   the base writes what {read:.1%} of 100 held-out frames show exactly", flush=True)
            reading_exact = read
        before = timed(f"{mode}: evaluate base", pass_rate, base.path, f"{mode}-base")
        teacher_cfg = cfg.model_copy(deep=True)
        teacher_cfg.policy.kind = "demonstrator"
        teacher = timed(f"{mode}: collect", collect, teacher_cfg, run_id=f"{mode}-teacher")
        build = timed(
            f"{mode}: dataset", build_sft_dataset, store, cfg.workspace.path, [teacher.run_id], cfg.training.filter
        )
        sft = timed(
            f"{mode}: SFT", train_sft, store, cfg.workspace.path, base.model_id, build.dataset_id, cfg.training.sft
        )
        after = timed(f"{mode}: evaluate SFT", pass_rate, sft.checkpoint.path, f"{mode}-sft")
        curve = sft.metrics.get("loss_curve") or []
        results[mode] = {
            "base": before,
            "sft": after,
            "rows": build.rows,
            "first_loss": curve[0][1] if curve else float("nan"),
            "final_loss": sft.metrics.get("final_loss") or float("nan"),
            "sft_seconds": sft.metrics.get("seconds") or 0.0,
            "tokens_per_second": sft.metrics.get("tokens_per_second") or 0.0,
        }
        print(f"   {mode}: {results[mode]}", flush=True)

    print(
        f"\nworkspace {root}; gridworld level 1, eval split n={args.eval_n}; parameters {base.metrics['parameters']:,}"
    )
    print(f"{'mode':6s} {'base':>6s} {'SFT':>6s} {'rows':>5s} {'loss':>13s} {'SFT s':>6s} {'tok/s':>6s}")
    for mode, r in results.items():
        print(
            f"{mode:6s} {r['base']:6.1%} {r['sft']:6.1%} {r['rows']:5.0f} "
            f"{r['first_loss']:6.3f}->{r['final_loss']:5.3f} {r['sft_seconds']:6.0f} {r['tokens_per_second']:6.0f}"
        )
    if reading_exact is not None:
        print(f"reading pretraining: the base writes what {reading_exact:.1%} of 100 held-out frames show exactly")
    print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
    for mode, r in results.items():
        print(f"RATIO vision-{mode}: gridworld L1 success base {r['base']:.1%} -> SFT {r['sft']:.1%}")


def reading_check(path: Path, seed: int) -> float:
    """How many of 100 reading rows of train seeds the base never read (another seed) it writes exactly."""
    from transformers import AutoModelForImageTextToText

    from campflow.agents.vision import load_processor
    from campflow.training.reading import reading_accuracy, reading_rows

    rows = reading_rows(["gridworld"], 100, seed + 1, levels=[1])
    return reading_accuracy(AutoModelForImageTextToText.from_pretrained(path), load_processor(path), rows)


if __name__ == "__main__":
    main()
