"""Demonstrations a model can imitate: every built-in bootcamp's demonstrator observes before it acts,
passes only what the prompt and earlier tool results show, and still solves the instance.

The grounding checker (:func:`campflow.bootcamps.demonstration.ungrounded`) is generic: it cuts every
argument of every call into tokens (times, numbers, words) and looks each up among the tokens shown
before the call. What needs no grounding each bootcamp lists itself (its ``grounding`` exemptions,
with the reason), and :meth:`~campflow.bootcamps.base.Bootcamp.ungrounded_arguments` applies both. Two
worlds need a rule of their own, because their arguments are directions or pixels rather than names: in the
maze a move must be one a map of the seen cells justifies, in the gui a click must hit a box the last
screen showed. The checker is held to catching the privileged oracle where it acts on hidden state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from campflow.agents.base import Policy
from campflow.agents.oracle import DemonstratorPolicy, OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.demonstration import exchanges, tokens, ungrounded
from campflow.rollout.engine import EpisodeSpec, run_episode

SEEDS = range(8)


def _text_twin(bootcamp: Any, level: int) -> Any:
    """The level's params with a text observation: the checker reads text, so grounding in a vision
    bootcamp is checked on the same level drawn as text (its describe() of the same picture)."""
    params = bootcamp.levels[level]
    if "observation" not in type(params).model_fields:
        return params
    return bootcamp.params({**params.model_dump(), "observation": "text"})


def _play(name: str, params: Any, seed: int, policy: Policy) -> Any:
    bootcamp = registry.make(name)
    instance = bootcamp.generate(params, seed)
    return bootcamp, instance, asyncio.run(run_episode(EpisodeSpec(bootcamp, instance), policy))


def violations(name: str, bootcamp: Any, instance: Any, transcript: Sequence[Mapping[str, Any]]) -> list[str]:
    """Everything ungrounded in one transcript, by the bootcamp's own rule (its ``grounding`` exemptions,
    and the maze's seen map and the gui's boxes where arguments are directions or pixels)."""
    return bootcamp.ungrounded_arguments(instance, transcript)


CASES = [(name, level) for name in registry.BUILTIN for level in sorted(registry.make(name).levels)]


@pytest.mark.parametrize(("name", "level"), CASES)
def test_demonstration_solves_every_level(name: str, level: int) -> None:
    for seed in SEEDS:
        bootcamp, instance, episode = _play(name, level, seed, DemonstratorPolicy())
        assert (episode.termination, episode.reward) == ("solved", 1.0), (name, level, seed, episode.termination)


@pytest.mark.parametrize(("name", "level"), CASES)
def test_demonstration_passes_only_what_was_shown(name: str, level: int) -> None:
    bootcamp = registry.make(name)
    for seed in SEEDS:
        bootcamp, instance, episode = _play(name, _text_twin(bootcamp, level), seed, DemonstratorPolicy())
        assert episode.reward == 1.0, (name, level, seed, episode.termination)
        assert violations(name, bootcamp, instance, episode.transcript) == [], (name, level, seed)


@pytest.mark.parametrize(
    ("name", "level", "share"),
    [
        ("calendar", 2, 1.0),
        ("filesystem", 1, 1.0),
        ("sql", 3, 1.0),
        # the oracle's shortest path agrees with the seen map wherever no unseen cell decides the route
        ("maze", 3, 0.25),
        ("maze", 4, 0.25),
    ],
)
def test_checker_catches_the_privileged_oracle(name: str, level: int, share: float) -> None:
    seeds = range(12)
    caught = 0
    for seed in seeds:
        bootcamp, instance, episode = _play(name, level, seed, OraclePolicy())
        assert episode.reward == 1.0
        caught += bool(violations(name, bootcamp, instance, episode.transcript))
    assert caught >= share * len(seeds), f"{name} level {level}: caught the oracle on {caught} of {len(seeds)} seeds"


@pytest.mark.parametrize(("name", "first"), [("calendar", "list_events"), ("filesystem", "ls"), ("sql", "list_tables")])
def test_demonstration_observes_before_it_acts(name: str, first: str) -> None:
    bootcamp, instance, episode = _play(name, 2, 0, DemonstratorPolicy())
    assert next(n for n, _, _ in exchanges(episode.transcript)) == first


def test_checker_reads_numbers_by_value_and_catches_an_invented_id() -> None:
    transcript = [
        {"role": "user", "content": "Cancel the standup; the budget is 12.50."},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "pay", "arguments": '{"amount": 12.5}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "ok"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "cancel_event", "arguments": '{"event_id": "e5"}'},
                }
            ],
        },
    ]
    assert ungrounded(transcript) == ["turn 1 cancel_event(event_id): 'e5'"]


def test_bootcamps_sample_shows_the_demonstration_listing_before_it_cancels(tmp_path) -> None:
    from tests.conftest import run_cli

    out = run_cli("bootcamps", "sample", "calendar", "--level", "2", "--seed", "0", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "demonstration: solved" in out.stdout
    assert out.stdout.index("-> list_events(") < out.stdout.index("-> cancel_event(")


def test_a_count_written_after_a_letter_is_shown_bolt_x2() -> None:
    # "bolt x2" shows a count of 2: a demonstrator that picks 2 bolts passes what it saw
    assert {"bolt", "x2", "2"} <= tokens("bin b3: bolt x2", shown=True)
    transcript = [
        {"role": "tool", "tool_call_id": "c0", "content": "bin b3: bolt x2"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "pick", "arguments": '{"bin": "b3", "item": "bolt", "count": 2}'},
                }
            ],
        },
    ]
    assert ungrounded(transcript) == []
