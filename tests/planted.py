"""A run with two planted failure modes, for the mining, clustering and synthesis tests.

Instances draw every knob independently at random (so no knob is confounded with another, as they are
in the level presets); the policy is the oracle except on calculator problems of three or more steps
and on mazes larger than 7x7 (mazes are square here, so "larger" has one meaning), where it gives wrong
answers, wrong moves and malformed calls.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from campflow.agents.oracle import NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.base import Instance
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Episode
from campflow.storage.store import Store

RUN_ID = "planted"


def calculator_params(rng: random.Random) -> dict[str, Any]:
    """Calculator knobs drawn independently."""
    return {
        "level": rng.randint(1, 4),
        "steps": rng.randint(1, 6),
        "max_operand": rng.randint(5, 500),
        "operations": "".join(rng.sample("+-*/", rng.randint(1, 4))),
        "distractors": rng.randint(0, 3),
    }


def maze_params(rng: random.Random) -> dict[str, Any]:
    """Square maze knobs drawn independently."""
    side = rng.choice([5, 7, 9, 11, 13])
    return {
        "level": rng.randint(1, 4),
        "width": side,
        "height": side,
        "view_radius": rng.randint(1, 4),
        "loops": round(rng.uniform(0.0, 0.2), 2),
    }


def in_planted_region(bootcamp: str, params: dict[str, Any]) -> bool:
    """Whether params lie where the planted policy fails."""
    if bootcamp == "calculator":
        return params["steps"] >= 3
    return params["width"] > 7 and params["height"] > 7


def planted_policy(seed: int = 0) -> NoisyOraclePolicy:
    """The oracle, noisy only inside the planted regions."""

    def when(instance: Instance) -> bool:
        return in_planted_region(instance.bootcamp, instance.params.model_dump())

    return NoisyOraclePolicy(
        p_wrong_move=0.1, p_malformed=0.1, p_wrong_answer=0.5, seed=seed, when=when, model_id="planted"
    )


def record_planted_run(store: Store, n: int = 400, seed: int = 0) -> list[Episode]:
    """Play ``n`` random instances of calculator and of maze with the planted policy; record everything."""
    rng = random.Random(seed)
    instances = []
    for name, draw in (("calculator", calculator_params), ("maze", maze_params)):
        b = registry.make(name)
        instances += [b.generate(draw(rng), rng.randrange(10**9)) for _ in range(n)]
    store.write_instances(instances, split="train")
    store.start_run(RUN_ID, "evaluate", {"policy": {"kind": "noisy"}}, "planted")
    specs = [EpisodeSpec(registry.make(i.bootcamp), i) for i in instances]
    episodes = asyncio.run(run_episodes(specs, planted_policy(seed), run_id=RUN_ID))
    store.write_episodes(episodes)
    store.finish_run(RUN_ID, "completed")
    return episodes
