"""Synthesis: mining and clustering 100,000 failures, and validation throughput in proposals per second.

A run of 150,000 episodes (100,000 of them model failures of every kind, on 20,000 calculator and maze
instances with independently drawn knobs) is written to a fresh store first, untimed. Then timed:
mining (read the failures' transcript tails, categorize, upsert ``failures``), clustering (vectors,
k-means for every k, traits against the run, ``clusters`` and ``failures.cluster_id`` written), and
validating random proposals (params model, duplicates, eval split, generation and the oracle on 4
fresh seeds each), without and with calibration (4 noisy-oracle episodes per variant). Goals: mining
and clustering under 60 s together; validation above 200 proposals/s uncalibrated.

Run: python benchmarks/bench_synthesis.py [--failures 100000] [--proposals 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from campflow.agents.oracle import NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.rollout.episode import Episode, Termination
from campflow.storage.store import Store
from campflow.storage.workspace import Workspace
from campflow.synthesis.clustering import cluster_failures
from campflow.synthesis.mining import mine_failures
from campflow.synthesis.proposals import Proposal
from campflow.synthesis.validate import ValidationSettings, validate_proposals

RUN = "bench"


def draw_params(name: str, rng: random.Random) -> dict:
    """Independently drawn knobs of a calculator or maze instance."""
    if name == "calculator":
        return {
            "level": rng.randint(1, 4),
            "steps": rng.randint(1, 6),
            "max_operand": rng.randint(5, 500),
            "operations": rng.choice(["+-", "+-*", "+-*/", "*/"]),
            "distractors": rng.randint(0, 3),
        }
    side = rng.choice([5, 7, 9, 11, 13])
    return {
        "level": rng.randint(1, 4),
        "width": side,
        "height": rng.choice([5, 7, 9, 11, 13]),
        "view_radius": rng.randint(1, 4),
        "loops": round(rng.uniform(0, 0.2), 2),
    }


def _call(name: str, arguments: str, i: int) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}


def make_episode(instance, k: int, rng: random.Random, fail: bool) -> Episode:
    """A plausible episode of ``instance``: solved, or one of the model-failure shapes."""
    tool = "calculate" if instance.bootcamp == "calculator" else "move"
    args = '{"expression": "2 + 3"}' if tool == "calculate" else '{"direction": "east"}'
    transcript = [
        {"role": "system", "content": "You are an agent solving a task by calling tools. " * 3},
        {"role": "user", "content": f"Task {instance.id}: " + "details " * 20},
    ]
    turns = rng.randint(1, 8)
    for t in range(turns):
        transcript += [
            {"role": "assistant", "content": "", "tool_calls": [_call(tool, args, t)]},
            {"role": "tool", "tool_call_id": f"call_{t}", "name": tool, "content": "ok " * 10},
        ]
    details: dict = {}
    error = None
    termination = Termination.SOLVED
    if fail:
        termination = rng.choice(
            [Termination.WRONG_ANSWER] * 5
            + [Termination.INVALID_TOOL_CALL, Termination.FORMAT_ERROR, Termination.MAX_TURNS]
        )
        if termination == Termination.WRONG_ANSWER:
            details = {
                "reason": rng.choice(
                    ["carry", "arithmetic", "intermediate"] if tool == "calculate" else ["lost", "near_miss"]
                )
            }
        elif termination == Termination.MAX_TURNS:
            details = {"reason": "no_answer" if tool == "calculate" else "no_submit"}
            error = f"no final tool call within {turns} turns"
        elif termination == Termination.INVALID_TOOL_CALL:
            bad = rng.choice(
                [
                    ("solve_everything", args, "unknown tool 'solve_everything'"),
                    (tool, "{}", f"invalid arguments for {tool}: a required argument is missing"),
                ]
            )
            transcript += [
                {"role": "assistant", "content": "", "tool_calls": [_call(bad[0], bad[1], turns)]},
                {"role": "tool", "tool_call_id": f"call_{turns}", "name": bad[0], "content": "Error: " + bad[2]},
            ]
            error = bad[2]
        else:
            transcript += [
                {"role": "assistant", "content": "Let me think about it more."},
                {"role": "user", "content": "No tool call found. Reply with a tool call."},
            ]
            error = "No tool call found. Reply with a tool call."
    return Episode(
        run_id=RUN,
        instance_id=instance.id,
        bootcamp=instance.bootcamp,
        model_id="bench",
        sample=k,
        reward=float(not fail),
        success=not fail,
        termination=termination,
        turns=turns,
        tool_calls=turns,
        invalid_calls=int(termination == Termination.INVALID_TOOL_CALL),
        prompt_tokens=400,
        completion_tokens=60,
        latency_s=0.1,
        wall_s=0.2,
        transcript=transcript,
        details=details,
        error=error,
        level=instance.level,
    )


def build_run(store: Store, n_failures: int, seed: int = 0) -> None:
    """The untimed setup: instances and 1.5x ``n_failures`` episodes, failures concentrated in a region."""
    rng = random.Random(seed)
    n_instances = max(10, n_failures // 5)
    instances = []
    for i in range(n_instances):
        name = "calculator" if i % 2 == 0 else "maze"
        instances.append(registry.make(name).generate(draw_params(name, rng), rng.randrange(10**9)))
    store.write_instances(instances, split="train")
    store.start_run(RUN, "evaluate", {"policy": {"kind": "noisy"}}, "bench")
    episodes, failures, k = [], 0, 0
    while failures < n_failures:
        for inst in instances:
            p = inst.params
            hard = p.steps >= 3 if inst.bootcamp == "calculator" else p.width > 7
            fail = failures < n_failures and rng.random() < (0.85 if hard else 0.25)
            failures += fail
            episodes.append(make_episode(inst, k, rng, fail))
        k += 1
    for i in range(0, len(episodes), 50_000):
        store.write_episodes(episodes[i : i + 50_000])
    store.finish_run(RUN, "completed")


def proposals(n: int, seed: int = 1) -> list[Proposal]:
    """``n`` random proposals for calculator and maze, about a tenth of them out of bounds."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        name = "calculator" if i % 2 == 0 else "maze"
        params = draw_params(name, rng)
        if rng.random() < 0.1:
            params["level"] = 99
        out.append(Proposal(name, None, "bench", params, f"random {i}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--failures", type=int, default=100_000)
    ap.add_argument("--proposals", type=int, default=2000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    store = Workspace(tmp, db=tmp / "synthesis.duckdb").store
    for name in ("calculator", "maze"):
        store.write_instances(eval_instances(registry.make(name), 200), split="eval")
    t0 = time.perf_counter()
    build_run(store, args.failures)
    episodes = store.scalar("SELECT count(*) FROM episodes")
    print(f"setup: {episodes:,} episodes, {args.failures:,} model failures written in {time.perf_counter() - t0:.1f}s")

    t0 = time.perf_counter()
    mined = mine_failures(store, RUN)
    t_mine = time.perf_counter() - t0
    t0 = time.perf_counter()
    clusters = cluster_failures(store, RUN)
    t_cluster = time.perf_counter() - t0
    print(
        f"mining {mined.failures:,} failures: {t_mine:.2f}s ({mined.failures / t_mine:,.0f}/s); "
        f"clustering: {t_cluster:.2f}s into {len(clusters)} clusters"
    )
    for c in clusters:
        print(f"  {c.bootcamp:<10} {c.size:>6}  {c.label}")

    batch = proposals(args.proposals)
    t0 = time.perf_counter()
    result = validate_proposals(store, batch, ValidationSettings(instances_per_variant=4, calibration_samples=0))
    t_plain = time.perf_counter() - t0
    kinds = json.dumps(
        {
            k or "accepted": sum(1 for v in result.verdicts if (v.reject_kind or None) == k)
            for k in {v.reject_kind for v in result.verdicts}
        },
        default=str,
    )
    calibrated_batch = proposals(args.proposals // 4, seed=2)
    t0 = time.perf_counter()
    validate_proposals(
        store,
        calibrated_batch,
        ValidationSettings(instances_per_variant=4, calibration_samples=4),
        NoisyOraclePolicy(seed=0),
    )
    t_cal = time.perf_counter() - t0
    print(
        f"validation of {len(batch)} proposals (4 seeds each, oracle-checked): {t_plain:.2f}s, "
        f"{len(batch) / t_plain:,.0f} proposals/s; verdicts {kinds}"
    )
    print(
        f"with calibration (4 noisy-oracle episodes each), {len(calibrated_batch)} proposals: {t_cal:.2f}s, "
        f"{len(calibrated_batch) / t_cal:,.0f} proposals/s"
    )
    total = t_mine + t_cluster
    print(
        f"RATIO synthesis: mining+clustering {mined.failures:,} failures in {total:.1f}s "
        f"({mined.failures / total:,.0f} failures/s; goal < 60 s); validation {len(batch) / t_plain:,.0f} "
        f"proposals/s ({len(calibrated_batch) / t_cal:,.0f}/s calibrated; goal > 200/s uncalibrated)"
    )


if __name__ == "__main__":
    main()
