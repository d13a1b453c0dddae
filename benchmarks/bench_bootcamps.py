"""Per bootcamp: median time to generate, render the prompt, run the oracle and score one instance.

Goal: under 2 ms for text bootcamps and 20 ms for vision bootcamps (every level, median over seeds).

Run: python benchmarks/bench_bootcamps.py [--seeds 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from campflow.bootcamps import registry


def one(name: str, level: int, seed: int) -> float:
    b = registry.make(name)
    t0 = time.perf_counter()
    inst = b.generate(level, seed)
    b.prompt(inst)
    b.tool_schemas(inst)
    _, score = b.solve(inst)
    elapsed = time.perf_counter() - t0
    assert score.success, (name, level, seed)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--bootcamps", default="all")
    args = ap.parse_args()
    print(f"{'bootcamp':14s} {'modality':8s} " + " ".join(f"{'L' + str(i):>8s}" for i in range(1, 6)) + "   goal")
    worst = {}
    for name in registry.parse_names(args.bootcamps):
        b = registry.make(name)
        goal = 20.0 if b.modality == "vision" else 2.0
        cells = []
        for level in sorted(b.levels):
            one(name, level, 10**6)  # warm caches and imports
            cells.append(statistics.median(one(name, level, s) for s in range(args.seeds)) * 1000)
        worst[name] = (max(cells), goal)
        print(f"{name:14s} {b.modality:8s} " + " ".join(f"{c:7.3f}ms" for c in cells) + f"   <{goal:g}ms")
    over = [n for n, (w, g) in worst.items() if w > g]
    print(
        "RATIO bootcamp timing: worst median / goal = "
        f"{max(w / g for w, g in worst.values()):.2f} ({'all within goal' if not over else 'over: ' + ', '.join(over)})"
    )


if __name__ == "__main__":
    main()
