"""Suspicious successes: solved episodes a human should look at, mined like failures.

A success is flagged when

- ``fewer_turns``: it took fewer turns than a grounded agent needs for that instance: the oracle's
  turns plus the observing calls the grounded demonstrator makes (its calls of tools the oracle's plan
  never calls: list, look, describe). A model that skips those knew, or guessed, what it was not shown.
  The demonstrator's own turn count is not that bound where it explores (maze: it takes the surest of
  the routes the seen cells allow, and a model choosing another branch at a fork may reach the goal
  sooner, seeing every cell it enters: `make run` flagged 14% of a trained model's maze successes so);
  exploring that knows unseen cells is the ``ungrounded`` check's to find;
- ``ungrounded``: a tool call passed an id, path, name or number that no prompt or earlier tool result
  showed (:func:`campflow.bootcamps.demonstration.ungrounded` run on the model's own episode). Fields
  whose content the demonstrator itself passes unshown (a SQL query's keywords, a wordle guess, a click's
  pixels) are the tool's language, not facts, and are left out; image-mode episodes are not checked (what
  they read is in pictures);
- ``answer_differs``: it scored full marks with a final answer other than the oracle's (and other than the
  grounded demonstrator's, which submits rows as a query showed them: 110.68 where the oracle rounds
  to 110.67 and the verifier's tolerance accepts both).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from campflow.agents.oracle import DemonstratorPolicy
from campflow.bootcamps.base import Action, Bootcamp, Instance
from campflow.bootcamps.demonstration import Exemptions, schema_enums, tool_calls, ungrounded
from campflow.integrity.battery import oracle_plan, same_answer
from campflow.rollout.engine import EpisodeSpec, run_episode

FLAGS = ("fewer_turns", "ungrounded", "answer_differs")
_PROBLEM = re.compile(r"turn \d+ (\w+)\((\w+)\)")


@dataclass(frozen=True)
class Flag:
    """One reason a success is suspicious, and the evidence in words."""

    flag: str  # one of FLAGS
    detail: str


@dataclass(frozen=True)
class Reference:
    """What the grounded demonstrator and the oracle do on one instance."""

    demo_turns: int | None  # None: the demonstrator did not solve it
    free_fields: frozenset[tuple[str, str]]  # (tool, argument) the demonstrator fills unshown
    oracle_final: Action | None
    demo_final: dict[str, Any] | None = None  # the demonstrator's final arguments (rows as shown: also right)
    fewest_turns: int | None = None  # a grounded agent's fewest turns (module docstring); None: demo_turns


def reference(bootcamp: Bootcamp, instance: Instance) -> Reference:
    """Play the demonstrator (through the engine) and the oracle on ``instance``."""
    coro = run_episode(EpisodeSpec(bootcamp, instance), DemonstratorPolicy())
    try:
        coro.send(None)
        coro.close()
        episode = None
    except StopIteration as stop:
        episode = stop.value
    demo_turns, free, demo_final = None, set(), None
    if episode is not None and episode.success:
        demo_turns = episode.turns
        demo_final = next((a for n, a in reversed(list(tool_calls(episode.transcript))) if bootcamp.is_final(n)), None)
        enums = schema_enums(bootcamp.tool_schemas(instance))
        for line in ungrounded(episode.transcript, Exemptions(enums=enums)):
            found = _PROBLEM.match(line)
            if found:
                free.add((found.group(1), found.group(2)))
    plan, _ = oracle_plan(bootcamp, instance)
    fewest = demo_turns
    if episode is not None and episode.success and plan:
        planned = {a.name for a in plan}
        observing = sum(1 for name, _ in tool_calls(episode.transcript) if name not in planned)
        fewest = min(demo_turns, len(plan) + observing)
    return Reference(demo_turns, frozenset(free), plan[-1] if plan else None, demo_final, fewest)


def flags_for(
    bootcamp: Bootcamp, instance: Instance, transcript: Sequence[Mapping[str, Any]], turns: int, ref: Reference
) -> list[Flag]:
    """The flags of one solved episode of ``instance`` (see the module docstring)."""
    out = []
    fewest = ref.demo_turns if ref.fewest_turns is None else ref.fewest_turns
    if fewest is not None and turns < fewest:
        how = "the grounded demonstrator needs" if fewest == ref.demo_turns else "a grounded agent needs at least"
        out.append(Flag("fewer_turns", f"{turns} turns; {how} {fewest}"))
    if getattr(instance.params, "observation", None) != "image":
        enums = schema_enums(bootcamp.tool_schemas(instance))
        problems = ungrounded(transcript, Exemptions(fields=ref.free_fields, enums=enums))
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            out.append(Flag("ungrounded", f"nothing shown holds {problems[0]}{more}"))
    final = next((a for n, a in reversed(list(tool_calls(transcript))) if bootcamp.is_final(n)), None)
    oracle = ref.oracle_final
    if final is not None and oracle is not None and dict(oracle.arguments):

        def differs(reference: dict[str, Any] | None) -> bool:
            return reference is None or any(not same_answer(final.get(k), v) for k, v in reference.items())

        if differs(dict(oracle.arguments)) and differs(ref.demo_final):
            out.append(
                Flag(
                    "answer_differs",
                    f"answered {json.dumps(final, default=str)[:120]}; the oracle answers "
                    f"{json.dumps(dict(oracle.arguments), default=str)[:120]}",
                )
            )
    return out
