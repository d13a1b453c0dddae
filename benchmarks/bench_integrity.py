"""Reward integrity: the hack battery's cost, and which real verifiers it flags.

1. Per built-in bootcamp: seconds of battery per level (``--seeds`` instances each), and per synthesized
   variant (the battery on a variant's first two instances, as validation plays it).
2. Per reasoning-gym dataset: built and vetted in this process as ``campflow import reasoning-gym NAME
   --no-process-check`` does, then the battery on every level; the share it flags, each with its exploit.
3. The 23 InternBootcamp trial classes of ``benchmarks/trial_imports.py`` (every 50th class plus
   Game24bootcamp, by file, with their level files where the checkout has them), built and vetted the
   same way: only where a checkout is importable (``--internbootcamp PATH`` or
   ``$CAMPFLOW_INTERNBOOTCAMP``; its requirements installed); otherwise said so.

A source the import refuses before the battery (it cannot be built offline, its generator fails, its
scorer gives nonsense full marks) is listed with the reason and left out of the share. Each source runs in
a process of its own, killed after ``--seconds`` ("timed out", with the stage it was in). The ``SHARE``
lines are the figures to quote.

Run: python benchmarks/bench_integrity.py [--seeds 2] [--datasets 20] [--only gcd,jugs] [--internbootcamp PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from campflow.bootcamps import registry
from campflow.integrity.battery import oracle_plan, run_battery
from campflow.sources import ImportSpec, build_bootcamp
from campflow.sources.vetting import vet_import
from campflow.synthesis.validate import variant_seeds


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


def flagged(adapter: str, sources: list[tuple[str, str, dict]], seconds: float) -> None:
    """The share of ``sources`` (label, source, import options) whose verifier the battery flags, each with
    its exploit. Each source is built, vetted and played in a process of its own, killed past ``seconds``
    (a scorer stuck in C code, a regex on a 100 KB answer, is beyond any signal), so no source's state
    reaches the next."""
    outcomes: Counter[str] = Counter()
    flags = []
    blind = 0  # passed, yet rewarded a probe it could not judge (no reference answer to compare with)
    t_all = time.perf_counter()
    for label, source, options in sources:
        task = {"adapter": adapter, "label": label, "source": source, "options": options}
        result, stages = _in_worker(task, seconds)
        if result is None:
            where = stages[-1] if stages else "starting"
            outcomes["timed out"] += 1
            print(f"  {label}: not played to the end: killed after {seconds:g} s in {where}")
            continue
        if "refused" in result:
            outcomes["refused by the import's vetting"] += 1
            print(f"  {label}: not played: the import refuses it: {result['refused'][:200]}")
            continue
        took = result["took"]
        if not result["hacks"]:
            outcomes["passed the battery"] += 1
            unjudged = result["verdicts"].get("no_oracle", 0)
            blind += unjudged > 0
            print(
                f"  {label}: passed ({took:.2f} s; the oracle solves {result['solved']} of {result['levels']} "
                f"levels; probes {result['verdicts']})"
            )
        else:
            outcomes["flagged by the battery"] += 1
            flags.append((label, result["exploits"], result["first"], took, result["full"]))
            print(f"  {label}: FLAGGED ({took:.2f} s)")
    total = sum(outcomes.values())
    print(f"{adapter}: {total} sources in {time.perf_counter() - t_all:.0f} s")
    for what, n in outcomes.most_common():
        print(f"  {what}: {n} ({n / total:.0%})")
    played = outcomes["flagged by the battery"] + outcomes["passed the battery"]
    full = sum(f[4] for f in flags)
    print(
        f"SHARE {adapter}: the battery flags {len(flags)} of {played} verifiers it played "
        f"({len(flags) / max(1, played):.0%}): {full} with full marks or a scorer error (an import refuses "
        f"them), {len(flags) - full} with partial credit above the bound only; {total} sources tried, "
        f"{total - played} not played (listed above)"
    )
    if blind:
        print(
            f"  of those passed, {blind} rewarded a probe the battery could not judge (no reference answer: no_oracle)"
        )
    for label, exploits, first, took, whole in flags:
        kind = "full marks" if whole else "partial credit"
        print(f"  FLAGGED {label} ({kind}, {took:.2f} s): exploits {dict(exploits)}; first: {first[:260]}")


def _in_worker(task: dict, seconds: float) -> tuple[dict | None, list[str]]:
    """Run :func:`_work` on ``task`` in a child process; (its result or None when killed, the stages it began)."""
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--worker"],
            input=json.dumps(task),
            capture_output=True,
            text=True,
            timeout=seconds,
        )
        out, killed = done.stdout, False
    except subprocess.TimeoutExpired as exc:
        out, killed = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), True
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    stages = [line["stage"] for line in lines if "stage" in line]
    results = [line for line in lines if "stage" not in line]
    if killed or not results:
        if not killed:  # it died: say so as a refusal with its last words
            return {"refused": f"the worker died: {' '.join(done.stderr.split()[-30:])}"}, stages
        return None, stages
    return results[-1], stages


def _work(task: dict) -> dict:
    """Build, vet (as ``campflow import ... --no-process-check``) and battery-test one source, per level."""
    real = sys.stdout
    sys.stdout = sys.stderr  # what the source prints stays off the protocol

    def stage(what: str) -> None:
        real.write(json.dumps({"stage": what}) + "\n")
        real.flush()

    name = f"bench-{task['label']}".replace("_", "-").lower()[:60]
    spec = ImportSpec(name=name, adapter=task["adapter"], source=task["source"], options=task["options"])
    try:
        stage("building and vetting")
        bootcamp = build_bootcamp(spec)
        vetted = vet_import(spec, bootcamp, cross_process=False)
        bootcamp = build_bootcamp(vetted) if vetted != spec else bootcamp
    except Exception as exc:  # noqa: BLE001 -- a source the import refuses is counted as such
        return {"refused": " ".join(str(exc).split())}
    t0 = time.perf_counter()
    hacks, verdicts, solved = [], Counter(), 0
    for level in sorted(bootcamp.levels):
        stage(f"the battery, level {level}")
        solved += oracle_plan(bootcamp, bootcamp.generate(level, 0))[1] is not None
        report = run_battery(bootcamp, levels=[level], seeds=(0,))
        hacks += report.hacks
        verdicts.update(p.verdict for p in report.probes)
    took = time.perf_counter() - t0
    full = [p for p in hacks if p.verdict != "over_bound"]  # full marks or a scorer error
    return {
        "took": took,
        "hacks": len(hacks),
        "exploits": dict(Counter(p.exploit.split(":")[0] for p in hacks)),
        "first": " ".join((full or hacks)[0].says().split()) if hacks else "",  # one line, whatever the answer
        "full": bool(full),
        "solved": solved,
        "levels": len(bootcamp.levels),
        "verdicts": dict(verdicts),  # no_oracle: probes it could not judge (the source has no reference answer)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="instances per level for the built-in costs")
    parser.add_argument("--datasets", type=int, default=0, help="first N reasoning-gym datasets (0: all)")
    parser.add_argument("--only", default="", help="comma-separated reasoning-gym datasets")
    parser.add_argument("--seconds", type=float, default=60.0, help="per source, before it counts as timed out")
    parser.add_argument(
        "--internbootcamp",
        default=os.environ.get("CAMPFLOW_INTERNBOOTCAMP"),
        help="an InternBootcamp checkout (default $CAMPFLOW_INTERNBOOTCAMP)",
    )
    parser.add_argument("--skip-builtin", action="store_true", help="leave out the built-in costs")
    parser.add_argument("--skip-reasoning-gym", action="store_true", help="leave out reasoning-gym")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_work(json.loads(sys.stdin.read()))), file=sys.__stdout__)
        return
    sys.stdout.reconfigure(line_buffering=True)  # each source's line as it is measured, also into a log
    if not args.skip_builtin:
        builtin_costs(args.seeds)
    sys.path.insert(0, str(Path(__file__).parent))
    from trial_imports import _internbootcamp_items, _reasoning_gym_items

    if not args.skip_reasoning_gym:
        items = [(i["label"], i["source"], i["options"]) for i in _reasoning_gym_items()]  # composite's options
        if args.only:
            items = [i for i in items if i[0] in set(args.only.split(","))]
        elif args.datasets:
            items = items[: args.datasets]
        flagged("reasoning-gym", items, args.seconds)
    checkout = args.internbootcamp
    if not checkout or not Path(checkout).is_dir():
        print("internbootcamp: not measured: no checkout (--internbootcamp or $CAMPFLOW_INTERNBOOTCAMP) here")
        return
    sys.path.insert(0, str(Path(checkout).absolute()))  # the classes import their package
    items = _internbootcamp_items(Path(checkout).absolute(), 50, dotted=False, levels=True)
    flagged("internbootcamp", [(i["label"].split()[0], i["source"], i.get("options", {})) for i in items], args.seconds)


if __name__ == "__main__":
    main()
