"""Demonstrations a model can imitate: every built-in bootcamp's demonstrator observes before it acts,
passes only what the prompt and earlier tool results show, and still solves the instance.

The grounding checker (:func:`campflow.bootcamps.demonstration.ungrounded`) is generic: it cuts every
argument of every call into tokens (times, numbers, words) and looks each up among the tokens shown
before the call. What needs no grounding is listed below per bootcamp, with the reason. Two worlds
need a rule of their own, because their arguments are directions or pixels rather than names: in the
maze a move must be one a map of the seen cells justifies, in the gui a click must hit a box the last
screen showed. The checker is held to catching the privileged oracle where it acts on hidden state.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from campflow.agents.base import Policy
from campflow.agents.oracle import DemonstratorPolicy, OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.demonstration import (
    Exemptions,
    exchanges,
    messages_text,
    schema_enums,
    shown_text,
    tool_calls,
    ungrounded,
)
from campflow.bootcamps.maze.bootcamp import STEPS, WALL, observed_cells
from campflow.rollout.engine import EpisodeSpec, run_episode

SEEDS = range(8)
DIRECTIONS = frozenset(STEPS)
SQL_WORDS = frozenset(
    "select distinct from where and or not in is null like between join inner left on as group by having "
    "order asc desc limit count sum avg min max round lower upper".split()
)

#: What each bootcamp's calls may hold without having been shown, and why.
EXEMPT: dict[str, Exemptions] = {
    "calculator": Exemptions(),
    "calendar": Exemptions(),
    "chart": Exemptions(),
    "filesystem": Exemptions(),
    # the directions are listed in the tools' own descriptions
    "gridworld": Exemptions(syntax={"move": DIRECTIONS, "unlock": DIRECTIONS}),
    # pixels are not names: a click is checked against the boxes the screen showed (click_hits_a_box)
    "gui": Exemptions(fields=frozenset({("click", "x"), ("click", "y")})),
    "maze": Exemptions(),
    # a page number walks through the pages the tool reported ("Page 1 of N"); the tool refuses others
    "shop": Exemptions(fields=frozenset({("search", "page")})),
    # SQL's own words, the aliases a query makes up (FROM orders o) and its LIMIT
    "sql": Exemptions(
        syntax={"query": SQL_WORDS},
        defines={
            "query": (
                re.compile(r"\b(?:FROM|JOIN)\s+\w+\s+(?:AS\s+)?(\w+)", re.I),
                re.compile(r"\bLIMIT\s+(\d+)", re.I),
            )
        },
    ),
    # a guess is a free choice among the vocabulary the prompt names (the oracle reads only the feedback)
    "wordle": Exemptions(fields=frozenset({("guess", "word")})),
}


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


def _optimistic_distance(
    width: int, height: int, walls: set[tuple[int, int]], start: tuple[int, int], goal: tuple[int, int]
) -> int:
    dist = {start: 0}
    queue = deque([start])
    while queue:
        x, y = queue.popleft()
        for dx, dy in STEPS.values():
            nxt = (x + dx, y + dy)
            if 0 <= nxt[0] < width and 0 <= nxt[1] < height and nxt not in walls and nxt not in dist:
                dist[nxt] = dist[(x, y)] + 1
                queue.append(nxt)
    return dist.get(goal, 1 << 30)


def maze_moves_follow_the_seen_map(instance: Any, transcript: Sequence[Mapping[str, Any]]) -> list[str]:
    """Moves a map of the cells seen before them does not justify.

    Unseen cells look alike to an agent that has not seen them, so a move must shorten the shortest
    route the seen map allows (seen walls avoided, unseen cells assumed open) and enter a cell seen
    open; preferring a route that looks longer can only come from knowing cells not yet seen.
    """
    p, goal = instance.params, tuple(instance.data["goal"])
    problems, here = [], tuple(instance.data["start"])
    for i in range(len(transcript)):
        message = transcript[i]
        if message.get("role") != "assistant":
            continue
        seen = observed_cells(shown_text(transcript[:i]))
        walls = {c for c, v in seen.items() if v == WALL}
        for name, args in tool_calls([message]):
            if name != "move":
                continue
            dx, dy = STEPS[args["direction"]]
            nxt = (here[0] + dx, here[1] + dy)
            before = _optimistic_distance(p.width, p.height, walls, here, goal)
            after = _optimistic_distance(p.width, p.height, walls, nxt, goal)
            if seen.get(nxt) != "." or after != before - 1:
                problems.append(
                    f"move {args['direction']} from {here} (seen: {seen.get(nxt)}, route {before} -> {after})"
                )
            if seen.get(nxt) == ".":
                here = nxt
    return problems


_BOX = re.compile(r"\((\d+), (\d+), (\d+), (\d+)\)")


def click_hits_a_box(transcript: Sequence[Mapping[str, Any]]) -> list[str]:
    """Clicks outside every box the most recent screen (prompt, screenshot or action result) showed."""
    problems, boxes = [], []
    for message in transcript:
        if message.get("role") in ("user", "tool"):
            found = [tuple(map(int, b)) for b in _BOX.findall(messages_text(message))]
            boxes = found or boxes
        for name, args in tool_calls([message]) if message.get("role") == "assistant" else ():
            if name == "click" and not any(x0 <= args["x"] < x1 and y0 <= args["y"] < y1 for x0, y0, x1, y1 in boxes):
                problems.append(f"click ({args['x']}, {args['y']}) hits no box shown")
    return problems


def violations(name: str, bootcamp: Any, instance: Any, transcript: Sequence[Mapping[str, Any]]) -> list[str]:
    """Everything ungrounded in one transcript: the generic token check and the world's own rule."""
    exempt = EXEMPT[name]
    exempt = Exemptions(exempt.fields, exempt.syntax, schema_enums(bootcamp.tool_schemas(instance)), exempt.defines)
    found = ungrounded(transcript, exempt)
    if name == "maze":
        found += maze_moves_follow_the_seen_map(instance, transcript)
    if name == "gui":
        found += click_hits_a_box(transcript)
    return found


CASES = [(name, level) for name in registry.BUILTIN for level in sorted(registry.make(name).levels)]


def test_every_builtin_bootcamp_has_a_grounding_rule() -> None:
    assert set(EXEMPT) == set(registry.BUILTIN)


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
