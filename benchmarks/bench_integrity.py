"""Reward integrity: the hack battery's cost, and which real verifiers it flags.

1. Per built-in bootcamp: seconds of battery per level (``--seeds`` instances each), and per synthesized
   variant (the battery on a variant's first two instances, as validation plays it).
2. Per reasoning-gym dataset: built and vetted in this process as ``campflow import reasoning-gym NAME
   --no-process-check`` does, then the battery on every level; the share it flags, each with its exploit.
3. InternBootcamp trial classes (``benchmarks/trial_imports.py``): only where the checkout is installed
   (``$CAMPFLOW_INTERNBOOTCAMP``); otherwise said so.

Each source gets ``--seconds`` (SIGALRM) before it counts as "timed out".

Run: python benchmarks/bench_integrity.py [--seeds 2] [--datasets 20] [--only gcd,jugs]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from campflow.bootcamps import registry
from campflow.integrity.battery import run_battery
from campflow.sources import ImportSpec, build_bootcamp
from campflow.sources.vetting import vet_import
from campflow.synthesis.validate import variant_seeds


class _TimedOut(Exception):
    pass


def _alarm(_signum: int, _frame: object) -> None:
    raise _TimedOut


def builtin_costs(seeds: int) -> None:
    """Seconds of battery per level and per synthesized variant, for every built-in bootcamp."""
    print(f"{'bootcamp':<12} {'levels':>6} {'probes/level':>12} {'s/level':>8} {'s/variant':>9}")
    for name in sorted(registry.BUILTIN):
        bootcamp = registry.make(name)
        t0 = time.perf_counter()
        report = run_battery(bootcamp, seeds=range(seeds))
        per_level = (time.perf_counter() - t0) / len(bootcamp.levels)
        params = bootcamp.levels[max(bootcamp.levels)]
        instances = [bootcamp.generate(params, s) for s in variant_seeds(f"bench:{name}", 2)]
        t0 = time.perf_counter()
        variant = run_battery(bootcamp, instances=instances)
        per_variant = time.perf_counter() - t0
        assert report.passed and variant.passed, report.refusal() or variant.refusal()
        print(
            f"{name:<12} {len(bootcamp.levels):>6} {len(report.probes) / len(bootcamp.levels):>12.0f} "
            f"{per_level:>8.3f} {per_variant:>9.3f}"
        )


def flagged(adapter: str, sources: list[str], seconds: float) -> None:
    """The share of ``sources`` whose verifier the battery flags, each with its exploit."""
    signal.signal(signal.SIGALRM, _alarm)
    outcomes: Counter[str] = Counter()
    flags = []
    t_all = time.perf_counter()
    for source in sources:
        spec = ImportSpec(name=f"bench-{source}".replace("_", "-").lower()[:60], adapter=adapter, source=source)
        signal.alarm(int(seconds))
        try:
            bootcamp = build_bootcamp(spec)
            vetted = vet_import(spec, bootcamp, cross_process=False)
            bootcamp = build_bootcamp(vetted) if vetted != spec else bootcamp
            t0 = time.perf_counter()
            report = run_battery(bootcamp, seeds=(0,))
            took = time.perf_counter() - t0
        except _TimedOut:
            outcomes["timed out"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 -- a source the import refuses is counted as such
            outcomes["refused by the import's vetting"] += 1
            print(f"  {source}: not vetted: {str(exc)[:150]}")
            continue
        finally:
            signal.alarm(0)
        if report.passed:
            outcomes["passed the battery"] += 1
            print(f"  {source}: passed ({took:.2f} s)")
        else:
            outcomes["flagged by the battery"] += 1
            exploits = Counter(p.exploit.split(":")[0] for p in report.hacks)
            flags.append((source, exploits, report.hacks[0].says(), took))
            print(f"  {source}: FLAGGED ({took:.2f} s)")
    total = sum(outcomes.values())
    print(f"{adapter}: {total} sources in {time.perf_counter() - t_all:.0f} s")
    for what, n in outcomes.most_common():
        print(f"  {what}: {n} ({n / total:.0%})")
    for source, exploits, first, took in flags:
        print(f"  FLAGGED {source} ({took:.2f} s): exploits {dict(exploits)}; first: {first[:260]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="instances per level for the built-in costs")
    parser.add_argument("--datasets", type=int, default=0, help="first N reasoning-gym datasets (0: all)")
    parser.add_argument("--only", default="", help="comma-separated reasoning-gym datasets")
    parser.add_argument("--seconds", type=float, default=60.0, help="per source, before it counts as timed out")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each source's line as it is measured, also into a log
    builtin_costs(args.seeds)
    import reasoning_gym

    names = sorted(reasoning_gym.factory.DATASETS)
    if args.only:
        names = [n for n in names if n in set(args.only.split(","))]
    elif args.datasets:
        names = names[: args.datasets]
    flagged("reasoning-gym", names, args.seconds)
    checkout = os.environ.get("CAMPFLOW_INTERNBOOTCAMP")
    if not checkout or not Path(checkout).is_dir():
        print("internbootcamp: not measured: no checkout ($CAMPFLOW_INTERNBOOTCAMP) on this machine")
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from trial_imports import _internbootcamp_items

    items = _internbootcamp_items(Path(checkout), 50, dotted=True, levels=False)
    flagged("internbootcamp", [i["source"] for i in items], args.seconds)


if __name__ == "__main__":
    main()
