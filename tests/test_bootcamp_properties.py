"""Properties every registered bootcamp must have, at every level, over many seeds.

The checks themselves are the bootcamp contract (campflow.bootcamps.contract); here they run on every
built-in bootcamp, and the oracle and wrong endings also run through the engine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import contract, registry
from campflow.bootcamps.base import Bootcamp
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from tests.policies import WrongAnswerPolicy

INSTANCES_PER_LEVEL = 200
BUILTIN = [e.name for e in registry.entries() if e.origin == "builtin"]
CASES = [(name, level) for name in BUILTIN for level in sorted(registry.make(name).levels)]


def _instances(bootcamp: Bootcamp, level: int, n: int = INSTANCES_PER_LEVEL):
    return [bootcamp.generate(level, seed) for seed in range(n)]


@pytest.mark.parametrize("name", BUILTIN)
def test_bootcamp_declares_at_least_three_levels_of_its_own_params(name: str) -> None:
    b = registry.make(name)
    contract.check_declarations(b)
    assert b.describe()["tools"], "a bootcamp offers at least one tool"


@pytest.mark.parametrize(("name", "level"), CASES)
def test_oracle_solves_every_generated_instance(name: str, level: int) -> None:
    contract.check_oracle_solves(registry.make(name), level, range(INSTANCES_PER_LEVEL))


@pytest.mark.parametrize(("name", "level"), CASES)
def test_wrong_endings_end_the_episode_never_succeed_and_score_at_most_the_bound(name: str, level: int) -> None:
    contract.check_wrong_endings_bounded(registry.make(name), level, range(INSTANCES_PER_LEVEL))


@pytest.mark.parametrize(("name", "level"), CASES)
def test_oracle_through_the_engine_solves_and_wrong_answers_score_at_most_the_bound(name: str, level: int) -> None:
    b = registry.make(name)
    specs = [EpisodeSpec(b, i) for i in _instances(b, level)]
    solved = asyncio.run(run_episodes(specs, OraclePolicy()))
    assert {e.termination for e in solved} == {Termination.SOLVED}
    wrong = asyncio.run(run_episodes(specs, WrongAnswerPolicy()))
    assert all(e.reward <= b.wrong_answer_bound for e in wrong), max(e.reward for e in wrong)
    assert not any(e.success for e in wrong)
    assert {e.termination for e in wrong} == {Termination.WRONG_ANSWER}


@pytest.mark.parametrize(("name", "level"), CASES)
def test_generation_is_deterministic_for_params_and_seed(name: str, level: int) -> None:
    contract.check_deterministic(registry.make(name), level, range(50))


def test_instance_ids_and_identities_are_stable_across_processes() -> None:
    code = (
        "import json; from campflow.bootcamps import registry\n"
        f"names = {BUILTIN!r}\n"
        "out = {}\n"
        "for n in names:\n"
        "    b = registry.make(n)\n"
        "    for lv in sorted(b.levels):\n"
        "        for s in (0, 7, 123456):\n"
        "            i = b.generate(lv, s); out[f'{n}:{lv}:{s}'] = [i.id, json.dumps(i.data, sort_keys=True)]\n"
        "print(json.dumps(out))\n"
    )
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                check=True,
                env={"PYTHONHASHSEED": str(h), "PATH": ""},
            ).stdout
        )
        for h in (1, 2)
    ]
    assert runs[0] == runs[1]
    here = {}
    for n in BUILTIN:
        b = registry.make(n)
        for lv in sorted(b.levels):
            for s in (0, 7, 123456):
                i = b.generate(lv, s)
                here[f"{n}:{lv}:{s}"] = [i.id, json.dumps(i.data, sort_keys=True)]
    assert here == runs[0]


@pytest.mark.parametrize("name", BUILTIN)
def test_invalid_params_name_the_key_the_value_and_the_bound(name: str) -> None:
    from campflow.errors import InvalidParamsError

    b = registry.make(name)
    with pytest.raises(InvalidParamsError, match="not a known field"):
        b.params({"level": 1, "no_such_knob": 3})
    with pytest.raises(InvalidParamsError, match="level = 99"):
        b.params({"level": 99})
    with pytest.raises(InvalidParamsError, match="level 42 does not exist"):
        b.params(42)
