"""How many SFT steps `make run` needs: the same base and dataset trained for several step counts and seeds,
each checkpoint evaluated on the eval split, side by side.

Takes the workspace of a finished `make run` (its base model and SFT dataset, read from its store), copies
them into one scratch workspace per arm, and runs `campflow train sft --steps N` then `campflow eval` on the
eval split there, ``--parallel`` arms at a time, each at one thread (``CAMPFLOW_CPU_THREADS=1``), so the
arms share the cores evenly; the seconds printed are comparable with each other, not with a run alone.
Prints one line per arm (steps, seed, SFT seconds, pass rate per bootcamp) and the mean per step count.

Run: python benchmarks/bench_sft_steps.py [--from-workspace campflow-data] [--steps 300 500 800] [--seeds 0 1]
     [--parallel 2] [--keep DIR]
(~7 min an 800-step arm on 2 cores, two at a time)
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "default.yaml"
CAMPFLOW = [sys.executable, "-m", "campflow.cli"]


def source(workspace: Path) -> tuple[str, str]:
    """(base model id, SFT dataset id) of the workspace's latest cycle."""
    import duckdb

    con = duckdb.connect(str(workspace / "campflow.duckdb"), read_only=True)
    try:
        base = con.execute(
            "SELECT model_id FROM checkpoints WHERE kind = 'base' ORDER BY created_at LIMIT 1"
        ).fetchone()
        data = con.execute(
            "SELECT dataset_id FROM datasets WHERE kind = 'sft' ORDER BY created_at DESC LIMIT 1"
        ).fetchone()
    finally:
        con.close()
    if base is None or data is None:
        raise SystemExit(f"--from-workspace {workspace}: expected a workspace with a base model and an SFT dataset")
    return base[0], data[0]


def arm(workspace: Path, scratch: Path, base: str, dataset: str, steps: int, seed: int) -> dict:
    """Train and evaluate one arm in its own copy of the workspace; its figures."""
    run = scratch / f"steps{steps}-seed{seed}"
    data = run / "campflow-data"  # the store's paths are relative to where the cycle ran: keep that layout
    (data / "models").mkdir(parents=True)
    (data / "datasets").mkdir()
    shutil.copy(workspace / "campflow.duckdb", data)
    shutil.copytree(workspace / "models" / base, data / "models" / base)
    shutil.copytree(workspace / "datasets" / dataset, data / "datasets" / dataset)
    env = {
        **os.environ,
        "CAMPFLOW_CPU_THREADS": "1",
        "CAMPFLOW__TRAINING__SFT__SEED": str(seed),
        "PREFECT_HOME": str(run / "prefect"),
    }
    started = time.perf_counter()
    train = [*CAMPFLOW, "train", "sft", "-c", str(CONFIG), "--from", base, "--dataset", dataset, "--steps", str(steps)]
    subprocess.run(train, cwd=run, env=env, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    model = next(p for p in (data / "models").glob("sft-*") if not p.name.endswith(".partial"))
    evaluate = [*CAMPFLOW, "eval", "-c", str(CONFIG), "--policy", "local", "--model", str(model)]
    out = subprocess.run(
        [*evaluate, "-b", "calculator,maze", "--run-id", "eval-steps"],
        cwd=run,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rates = {b: float(m.group(1)) for b in ("calculator", "maze") if (m := re.search(rf"{b}\s+([0-9.]+)", out))}
    return {"steps": steps, "seed": seed, "seconds": seconds, **rates}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--from-workspace", type=Path, default=ROOT / "campflow-data", help="a finished `make run`'s workspace"
    )
    ap.add_argument("--steps", type=int, nargs="+", default=[300, 500, 800])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="keep the arms' workspaces here")
    args = ap.parse_args()
    if min(args.steps) < 1 or args.parallel < 1:
        raise SystemExit(f"--steps {args.steps} / --parallel {args.parallel}: expected positive numbers")
    if not (args.from_workspace / "campflow.duckdb").exists():
        raise SystemExit(
            f"--from-workspace {args.from_workspace}: no store there; run `make run` first (it leaves one)"
        )
    base, dataset = source(args.from_workspace)
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="sft-steps-"))
    scratch.mkdir(parents=True, exist_ok=True)
    arms = list(itertools.product(args.steps, args.seeds))
    print(f"base {base}, dataset {dataset}: {len(arms)} arms, {args.parallel} at a time, one thread each", flush=True)
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda a: arm(args.from_workspace, scratch, base, dataset, *a), arms))
    for r in results:
        print(
            f"  {r['steps']:>5} steps, seed {r['seed']}: SFT {r['seconds']:.0f} s; "
            f"calculator {r.get('calculator', float('nan')):.1%}, maze {r.get('maze', float('nan')):.1%}"
        )
    for steps in args.steps:
        rows = [r for r in results if r["steps"] == steps]
        calc = sum(r.get("calculator", 0.0) for r in rows) / len(rows)
        maze = sum(r.get("maze", 0.0) for r in rows) / len(rows)
        print(f"RESULT {steps} steps, mean of {len(rows)} seeds: calculator {calc:.1%}, maze {maze:.1%}")
    if args.keep is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
