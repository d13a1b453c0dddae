"""The miniature: base -> SFT on oracle trajectories -> RL, measured on the held-out eval split.

Fixed seeds; the two easiest levels of calculator and maze. Builds the embedded tiny model, evaluates
it, collects oracle episodes on train-split instances, filters them into an SFT dataset, fine-tunes,
evaluates, runs GRPO from the SFT checkpoint, evaluates again, and prints the three success rates
(overall and per bootcamp) with the wall time of every stage.

Run: python benchmarks/bench_miniature.py [--workspace DIR] [--sft-steps 1000] [--rl-steps 30] [--eval-n 50]
(about 15 minutes on 2 cores; measured: 0% -> 32% -> 33%)
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
    ap.add_argument("--collect-n", type=int, default=1500, help="train instances per bootcamp")
    ap.add_argument("--sft-steps", type=int, default=1000)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-lr", type=float, default=2e-3)
    ap.add_argument("--rl-steps", type=int, default=30)
    ap.add_argument("--eval-n", type=int, default=50, help="eval instances per bootcamp")
    args = ap.parse_args()

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets

    datasets.disable_progress_bars()

    from campflow.config import load_config
    from campflow.flows.collect import collect
    from campflow.flows.evaluate import evaluate
    from campflow.storage.workspace import Workspace
    from campflow.training.base import ensure_base
    from campflow.training.filtering import build_sft_dataset
    from campflow.training.rl import train_rl
    from campflow.training.sft import train_sft

    ws = args.workspace or Path(tempfile.mkdtemp(prefix="miniature-"))
    cfg = load_config(
        None,
        {
            "workspace.path": str(ws),
            "training.bootcamps": ["calculator", "maze"],
            "training.levels": [1, 2],
            "training.collect_n": args.collect_n,
            "training.sft.max_steps": args.sft_steps,
            "training.sft.batch_size": args.sft_batch,
            "training.sft.learning_rate": args.sft_lr,
            "training.rl.max_steps": max(1, args.rl_steps),
            "eval.bootcamps": ["calculator", "maze"],
            "eval.levels": [1, 2],
            "eval.n": args.eval_n,
            "policy.max_tokens": 96,
            "rollout.concurrency": 64,
            "rollout.workers": 1,
            "rollout.shard_size": 1000,
        },
        env={},
    )
    store = Workspace.from_config(cfg).store
    times: dict[str, float] = {}
    started = time.perf_counter()

    def stage(name: str):
        class _Timer:
            def __enter__(self):
                self.t0 = time.perf_counter()
                print(f"-- {name}", flush=True)

            def __exit__(self, *exc):
                times[name] = time.perf_counter() - self.t0
                print(f"   {name}: {times[name]:.0f}s", flush=True)

        return _Timer()

    def evaluate_model(model_id: str, path: Path) -> dict[str, float]:
        c = cfg.model_copy(deep=True)
        c.policy.kind, c.policy.model = "local", str(path)
        summary = evaluate(c, run_id=f"eval-{model_id}")
        rows = store.query(
            "SELECT bootcamp, avg(success::INTEGER) AS rate FROM episodes WHERE run_id = ? GROUP BY bootcamp",
            [summary.run_id],
        )
        rates = {r["bootcamp"]: float(r["rate"]) for r in rows}
        rates["overall"] = float(
            store.scalar("SELECT avg(success::INTEGER) FROM episodes WHERE run_id = ?", [summary.run_id])
        )
        print(f"   {model_id}: {rates}", flush=True)
        return rates

    with stage("build base"):
        base = ensure_base(store, cfg)
    with stage("evaluate base"):
        before = evaluate_model(base.model_id, base.path)
    with stage("collect oracle"):
        c = cfg.model_copy(deep=True)
        c.policy.kind = "oracle"
        teacher = collect(c, run_id="miniature-teacher")
    with stage("dataset"):
        build = build_sft_dataset(store, ws, [teacher.run_id], cfg.training.filter)
    with stage("SFT"):
        sft = train_sft(store, ws, base.model_id, build.dataset_id, cfg.training.sft)
    with stage("evaluate SFT"):
        after_sft = evaluate_model(sft.checkpoint.model_id, sft.checkpoint.path)
    rl, after_rl = None, after_sft
    if args.rl_steps:
        with stage("RL"):
            rl = train_rl(store, ws, sft.checkpoint.model_id, cfg.training.bootcamps, cfg.training.rl, [1, 2])
        with stage("evaluate RL"):
            after_rl = evaluate_model(rl.checkpoint.model_id, rl.checkpoint.path)
    total = time.perf_counter() - started

    print(
        f"\nworkspace {ws}; dataset {build.rows} rows; SFT final loss {sft.metrics.get('final_loss')}; "
        f"RL reward {rl.metrics.get('first_reward') if rl else None} -> {rl.metrics.get('last_reward') if rl else None}"
    )
    print(f"{'model':8s} {'overall':>8s} {'calculator':>11s} {'maze':>6s}")
    for label, r in (("base", before), ("sft", after_sft), ("rl", after_rl)):
        print(f"{label:8s} {r['overall']:8.1%} {r.get('calculator', 0):11.1%} {r.get('maze', 0):6.1%}")
    print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
    print(
        f"RATIO miniature: success base {before['overall']:.1%} -> SFT {after_sft['overall']:.1%} -> "
        f"RL {after_rl['overall']:.1%}; wall time {total / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
