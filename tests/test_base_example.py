"""The example in campflow/bootcamps/base.py runs as written and keeps the bootcamp contract.

The code block is taken from the module docstring itself and executed in a fresh namespace, so the
first code a newcomer copies is the code that is tested. The contract's checks are also shown to fail
on bootcamps that break it, so they cannot pass by checking nothing.
"""

from __future__ import annotations

import asyncio
import random
import textwrap
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import campflow.bootcamps.base
from campflow.agents.base import PolicyReply, TurnContext
from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import contract, registry
from campflow.bootcamps.base import Action
from campflow.errors import ContractError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from tests.policies import WrongAnswerPolicy


def docstring_example() -> str:
    """The indented block after the first line of the module docstring that ends in ``::``."""
    lines = campflow.bootcamps.base.__doc__.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("::")) + 1
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block)).strip() + "\n"


@pytest.fixture
def example() -> Iterator[dict[str, Any]]:
    """The example's namespace after running it (which registers ``echo``); unregistered afterwards."""
    registry.unregister("echo")
    namespace: dict[str, Any] = {"__name__": "campflow_base_example"}
    try:
        exec(compile(docstring_example(), "<campflow.bootcamps.base example>", "exec"), namespace)
        yield namespace
    finally:
        registry.unregister("echo")


def test_the_docstring_example_is_a_whole_bootcamp_with_its_imports() -> None:
    code = docstring_example()
    assert code.startswith("from pydantic import Field\n") and "class AnswerArgs(ToolArgs):" in code
    assert 'registry.register("echo", Echo)' in code and code.rstrip().endswith("assert score.success")


def test_the_example_runs_registers_echo_and_keeps_the_contract(example: dict[str, Any]) -> None:
    echo = registry.make("echo")
    assert type(echo) is example["Echo"] and echo is example["echo"]
    entry = next(e for e in registry.entries() if e.name == "echo")
    assert entry.origin == "user" and entry.modality == "text"
    contract.check_contract(echo)
    assert echo.describe_task() == (
        "Repeat a word.\n\nYou are given a word. Submit it, exactly as given, with `submit`."
    )


def test_the_example_through_the_engine_solves_every_level_and_scores_wrong_answers_and_max_turns_zero(
    example: dict[str, Any],
) -> None:
    echo = registry.make("echo")
    specs = [EpisodeSpec(echo, echo.generate(level, seed)) for level in echo.levels for seed in range(20)]
    solved = asyncio.run(run_episodes(specs, OraclePolicy()))
    assert {(e.termination, e.reward) for e in solved} == {(Termination.SOLVED, 1.0)}
    wrong = asyncio.run(run_episodes(specs, WrongAnswerPolicy()))
    assert {(e.termination, e.reward, e.details["reason"]) for e in wrong} == {
        (Termination.WRONG_ANSWER, 0.0, "mismatch")
    }


class _Silent(OraclePolicy):
    """Never calls a tool, so every episode runs out of turns or of patience."""

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        return PolicyReply(content="thinking...")


def test_score_runs_after_an_episode_with_no_final_tool_with_answer_still_none(example: dict[str, Any]) -> None:
    echo = registry.make("echo")
    seen: list[Any] = []
    original = type(echo).score

    def spying_score(self: Any, instance: Any, state: Any, transcript: Any) -> Any:
        seen.append((state.finished, state.answer))
        return original(self, instance, state, transcript)

    type(echo).score = spying_score
    try:
        (episode,) = asyncio.run(run_episodes([EpisodeSpec(echo, echo.generate(1, 0))], _Silent()))
    finally:
        type(echo).score = original
    assert episode.termination == Termination.FORMAT_ERROR and episode.reward == 0.0
    assert seen == [(False, None)], "score ran once, on an unfinished state without an answer"


def test_an_explicit_system_prompt_replaces_the_docstring_paragraphs(example: dict[str, Any]) -> None:
    class Told(example["Echo"]):
        name = "told"
        system_prompt = "Echo the word."

    instance = Told().generate(1, 0)
    assert Told().prompt(instance)[0] == {"role": "system", "content": "Echo the word."}
    assert registry.make("echo").prompt(instance)[0]["content"].startswith(campflow.bootcamps.base.SYSTEM_PREAMBLE)


# -- the contract fails bootcamps that break it ----------------------------------------------------


def _broken(example: dict[str, Any], **methods: Any) -> Any:
    return type("Broken", (example["Echo"],), {"name": "broken", **methods})()


def test_the_contract_names_the_level_and_seed_the_oracle_fails(example: dict[str, Any]) -> None:
    def oracle(self: Any, instance: Any, state: Any) -> Action:  # wrong at level 3 from seed 4 on
        word = instance.data["word"]
        return Action("submit", {"answer": word + "?" if instance.level == 3 and instance.seed >= 4 else word})

    with pytest.raises(ContractError, match="broken level 3 seed 4 .*the oracle scored reward 0.0"):
        contract.check_contract(_broken(example, oracle=oracle))


def test_the_contract_refuses_a_wrong_answer_that_succeeds(example: dict[str, Any]) -> None:
    def wrong_answer(self: Any, instance: Any, state: Any, rng: random.Random) -> Action:
        return self.oracle(instance, state)

    with pytest.raises(ContractError, match="a wrong ending scored reward 1.0, success True"):
        contract.check_wrong_endings_bounded(_broken(example, wrong_answer=wrong_answer), 1)


def test_the_contract_refuses_generation_that_ignores_its_rng(example: dict[str, Any]) -> None:
    global_rng = random.Random(0)

    def build(self: Any, params: Any, rng: random.Random) -> dict[str, Any]:
        return {"word": "".join(global_rng.choice("abc") for _ in range(params.length))}

    with pytest.raises(ContractError, match="build and prompt may use only their rng"):
        contract.check_deterministic(_broken(example, build=build), 2)


def test_the_contract_wants_three_levels_of_the_bootcamps_own_params(example: dict[str, Any]) -> None:
    params = example["EchoParams"]
    with pytest.raises(ContractError, match="declares 2 levels; expected at least 3"):
        contract.check_declarations(_broken(example, levels={1: params(level=1), 2: params(level=2)}))
    with pytest.raises(ContractError, match="level 3 holds params of level 2"):
        contract.check_declarations(
            _broken(example, levels={1: params(level=1), 2: params(level=2), 3: params(level=2)})
        )
