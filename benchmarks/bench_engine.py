"""Engine overhead: oracle episodes through the engine vs the same oracle actions in a plain loop.

Both sides start from the same pre-generated instances and do the same bootcamp work (new state, the
oracle's next action, the tool call, the score); the engine adds messages, JSON tool calls, parsing,
validation, the transcript and accounting. Goal: ratio <= 1.3 (issue 41). A third loop does only what
any engine must add (the prompt, the call as JSON parsed and validated back, both messages recorded,
every transcript kept until the batch is done, as the engine returns them), as a floor. Each loop is
also timed with the cyclic garbage collector paused, as a diagnostic (the RATIO line keeps it on, as
every run does): it shows how much of the floor and of the engine is the collector walking the kept
transcripts, which no trimming of the engine's own code removes.

Run: python benchmarks/bench_engine.py [--episodes 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.serialization import to_json


def plain_loop(specs: list[EpisodeSpec]) -> int:
    solved = 0
    for spec in specs:
        b, inst = spec.bootcamp, spec.instance
        state = b.new_state(inst)
        for _ in range(b.max_turns(inst)):
            b.apply(inst, state, b.oracle(inst, state))
            if state.finished:
                break
        solved += b.score(inst, state, ()).success
    return solved


def essentials_loop(specs: list[EpisodeSpec]) -> int:
    """What any engine must add, and nothing else: the prompt, each call as JSON text parsed and validated
    back, both messages recorded, the transcripts kept (the engine returns them: holding 2,000 of them
    costs allocations the plain loop's recycled memory does not). No asyncio, accounting or error
    handling: a floor for the ratio."""
    solved, kept = 0, []
    for spec in specs:
        b, inst = spec.bootcamp, spec.instance
        state = b.new_state(inst)
        tools = {t.name: t for t in b.tools(inst)}
        transcript = list(b.prompt(inst))
        for turn in range(b.max_turns(inst)):
            action = b.oracle(inst, state)
            raw, cid = to_json(dict(action.arguments)), f"call_{turn}_0"
            args = tools[action.name].args_model.__pydantic_validator__.validate_json(raw)
            transcript.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": cid, "type": "function", "function": {"name": action.name, "arguments": raw}}
                    ],
                }
            )
            obs = b.call(inst, state, action.name, args)
            transcript.append({"role": "tool", "tool_call_id": cid, "name": action.name, "content": obs.text})
            if obs.final:
                state.finished = True
                break
        solved += b.score(inst, state, transcript).success
        kept.append(transcript)
    return solved


def through_engine(specs: list[EpisodeSpec]) -> int:
    episodes = asyncio.run(run_episodes(specs, OraclePolicy(), concurrency=32))
    return sum(e.success for e in episodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bootcamps", default="calculator,maze")
    args = ap.parse_args()
    names = registry.parse_names(args.bootcamps)
    per = args.episodes // len(names)
    specs = [EpisodeSpec(registry.make(n), i) for n in names for i in eval_instances(registry.make(n), per)]
    loops = (("plain", plain_loop), ("essentials", essentials_loop), ("engine", through_engine))
    best: dict[tuple[str, bool], float] = {}
    for _ in range(args.repeats):  # interleaved, best of n: the machine is shared
        for paused in (False, True):
            for label, fn in loops:
                gc.collect()  # each loop starts from the same heap
                if paused:
                    gc.disable()
                try:
                    t0 = time.perf_counter()
                    solved = fn(specs)
                    elapsed = time.perf_counter() - t0
                finally:
                    gc.enable()
                best[label, paused] = min(best.get((label, paused), float("inf")), elapsed)
                assert solved == len(specs), f"{label} solved {solved}/{len(specs)}"
    paused_best = {label: best[label, True] for label, _ in loops}
    best = {label: best[label, False] for label, _ in loops}
    print(
        f"{len(specs)} oracle episodes ({', '.join(names)}): plain loop {best['plain']:.3f}s, "
        f"engine {best['engine']:.3f}s"
    )
    print(
        f"essentials only (JSON call parsed and validated, transcripts kept): {best['essentials']:.3f}s, "
        f"{best['essentials'] / best['plain']:.2f}x the plain loop; engine/essentials "
        f"{best['engine'] / best['essentials']:.2f}"
    )
    print(
        f"with the garbage collector paused (diagnostic): essentials "
        f"{paused_best['essentials'] / paused_best['plain']:.2f}x, engine "
        f"{paused_best['engine'] / paused_best['plain']:.2f}x the plain loop (paused too)"
    )
    print(f"RATIO engine overhead: engine/plain = {best['engine'] / best['plain']:.2f} (goal <= 1.3)")


if __name__ == "__main__":
    main()
