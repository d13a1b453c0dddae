"""Generation threads as a cycle meets them: what ``cpu_threads: auto`` chooses, beside one and two fixed.

A trained checkpoint (default: the newest SFT checkpoint of ./campflow-data, which `make run` leaves) plays
the 80 eval instances of calculator and maze greedily, then 64 train instances of each x 2 samples at
temperature 1 (as the band calibration does), with torch's threads fixed at 1, fixed at 2, and ``auto``
(the tuner of ``campflow.threads``), each setting twice, alternating; the faster pass of each counts.
Batches here differ in prompt length several-fold (a maze prompt is ~4x a calculator one), which is
what the tuner's unit of work has to even out. Prints seconds per setting, what ``auto`` chose, and
the ratio of ``auto`` to the best fixed setting. Run it on an idle machine: beside other work, one
thread is the better choice and the tuner should find that instead.

Run: python benchmarks/bench_generation_threads.py [--model PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent


def newest_sft(workspace: Path) -> Path:
    found = sorted(
        (p for p in (workspace / "models").glob("sft-*") if not p.name.endswith(".partial")),
        key=lambda p: p.stat().st_mtime,
    )
    if not found:
        raise SystemExit(f"no SFT checkpoint under {workspace / 'models'}; run `make run` first, or pass --model")
    return found[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="a local model folder (default: newest SFT checkpoint)")
    args = ap.parse_args()
    model = args.model or newest_sft(ROOT / "campflow-data")
    if not (model / "config.json").exists():
        raise SystemExit(f"--model {model}: expected a model folder (with config.json)")

    from campflow.agents.factory import build_policy
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import eval_instances, train_instances
    from campflow.config import PolicyConfig
    from campflow.rollout.engine import EpisodeSpec, run_episodes

    def play(threads: str, temperature: float) -> tuple[float, dict]:
        os.environ.pop("CAMPFLOW_CPU_THREADS", None)
        policy = build_policy(
            PolicyConfig(
                kind="local",
                model=str(model),
                temperature=temperature,
                max_tokens=64,
                batch_size=32,
                cpu_threads=threads if threads == "auto" else int(threads),
            )
        )
        specs = []
        for name in ("calculator", "maze"):
            camp = registry.make(name)
            if temperature == 0:
                specs += [EpisodeSpec(camp, i) for i in eval_instances(camp, 40, [1, 2])]
            else:
                specs += [EpisodeSpec(camp, i, s) for i in train_instances(camp, 64, levels=[1]) for s in range(2)]
        started = time.perf_counter()
        asyncio.run(run_episodes(specs, policy, run_id="threads", concurrency=64))
        return time.perf_counter() - started, policy.threads.summary() if policy.threads else {}

    for temperature, what in ((0.0, "80 eval episodes, greedy"), (1.0, "256 train episodes, temperature 1")):
        best: dict[str, float] = {}
        chose: dict = {}
        for _ in range(2):
            for threads in ("1", "2", "auto"):
                seconds, summary = play(threads, temperature)
                best[threads] = min(best.get(threads, float("inf")), seconds)
                if threads == "auto":
                    chose = summary
        print(
            f"{what}: 1 thread {best['1']:.1f}s, 2 threads {best['2']:.1f}s, auto {best['auto']:.1f}s "
            f"(chose {chose.get('cpu_threads')}, switches {chose.get('thread_switches')})"
        )
        print(f"RATIO generation, {what}: auto / best fixed = {best['auto'] / min(best['1'], best['2']):.2f}")


if __name__ == "__main__":
    main()
