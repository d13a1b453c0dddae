"""The bootcamp contract: what every bootcamp must do, checked on any bootcamp object.

A bootcamp keeps the contract when

- it declares at least three levels of its own params and offers a tool that ends the episode
  (:func:`check_declarations`);
- at every level, the oracle solves every generated instance with reward 1 (:func:`check_oracle_solves`);
- a wrong ending (:meth:`~campflow.bootcamps.base.Bootcamp.wrong_answer`, following the oracle until one
  is possible) ends the episode, never succeeds and earns at most ``wrong_answer_bound``
  (:func:`check_wrong_endings_bounded`);
- generation is deterministic: a level number and the same params as a dict give the same id,
  identity and prompt for a seed, and different seeds give different instances (:func:`check_deterministic`);
- the demonstrator (:meth:`~campflow.bootcamps.base.Bootcamp.demonstrate`), played with a transcript as
  the engine builds one, passes only what the prompt and earlier tool results showed, never ends wrong
  and solves at least 90% of every level's instances (:func:`check_demonstration_grounded`, judged by
  :meth:`~campflow.bootcamps.base.Bootcamp.ungrounded_arguments`); ``campflow bootcamps check`` runs
  it, ``campflow author`` does not require it.

The checks play the bootcamp directly (no engine, no policy), so they run wherever the bootcamp
imports: in the test suite for the built-in bootcamps, in a subprocess for one written by someone
else. Each raises :class:`~campflow.errors.ContractError` naming the bootcamp, level and seed.

A served bootcamp (:class:`~campflow.bootcamps.served.ServedTools`: an MCP server as its tools) is
played the same way through :func:`direct_episode`: every episode on a fresh server held open a call at
a time (:class:`~campflow.bootcamps.served.HeldEpisode`), its final state read (``conclude``) before it
is scored. Each such episode costs a server start.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    Observation,
    Params,
    Score,
    State,
    ToolArgs,
    format_validation_error,
)
from campflow.bootcamps.served import HeldEpisode, ServedTools
from campflow.errors import ContractError, ToolError

SEEDS = range(50)


@dataclass
class DirectEpisode:
    """One episode played directly (no engine): on an in-memory world, or on a served bootcamp's fresh
    server (``held``). Made by :func:`direct_episode`."""

    bootcamp: Bootcamp
    instance: Instance
    state: State
    held: HeldEpisode | None = None

    def call(self, name: str, args: ToolArgs) -> Observation:
        """Run tool ``name`` with validated ``args`` (``finished`` is left to the caller)."""
        if self.held is None:
            return self.bootcamp.call(self.instance, self.state, name, args)
        served: Any = self.bootcamp
        return self.held.run(lambda state: served.call_served(self.instance, state, name, args))

    def apply(self, action: Action) -> Observation:
        """Validate ``action``'s arguments and run it, setting ``state.finished`` after a final observation,
        as :meth:`~campflow.bootcamps.base.Bootcamp.apply` does."""
        if self.held is None:
            return self.bootcamp.apply(self.instance, self.state, action)
        tool = next((t for t in self.bootcamp.tools(self.instance) if t.name == action.name), None)
        if tool is None:
            raise ToolError(f"unknown tool {action.name!r}")
        obs = self.call(action.name, tool.args_model.model_validate(dict(action.arguments)))
        if obs.final:
            self.state.finished = True
        return obs

    def score(self, transcript: Sequence[dict[str, Any]] = ()) -> Score:
        """Score the episode as it stands (a served one's final state read first, as the engine does)."""
        if self.held is not None:
            served: Any = self.bootcamp
            self.held.run(lambda state: served.conclude(self.instance, state))
        return self.bootcamp.score(self.instance, self.state, transcript)


@contextmanager
def direct_episode(bootcamp: Bootcamp, instance: Instance) -> Iterator[DirectEpisode]:
    """A fresh episode of ``instance``: ``new_state``, or a served bootcamp's fresh server, stopped on exit."""
    if not isinstance(bootcamp, ServedTools):
        yield DirectEpisode(bootcamp, instance, bootcamp.new_state(instance))
        return
    held = HeldEpisode(bootcamp, instance)
    try:
        yield DirectEpisode(bootcamp, instance, held.state, held)
    finally:
        held.close()


def wrong_ending(bootcamp: Bootcamp, instance: Instance, state: State, rng: random.Random) -> Action:
    """The next action towards a wrong ending: the bootcamp's wrong answer, or the oracle's action where
    no wrong ending is possible yet."""
    return bootcamp.wrong_answer(instance, state, rng) or bootcamp.oracle(instance, state)


def play_wrong_ending(bootcamp: Bootcamp, instance: Instance, sample: int = 0) -> tuple[State, Score]:
    """Play :func:`wrong_ending` turn after turn (no engine) and score the result.

    The rng of each turn is drawn from ``(instance id, sample, turn)``, as the test policy that plays
    wrong endings through the engine draws it, so both make the same moves.

    Raises:
        ContractError: if the episode does not end within the bootcamp's turn budget.
    """
    with direct_episode(bootcamp, instance) as episode:
        state = episode.state
        for turn in range(bootcamp.max_turns(instance)):
            rng = random.Random(f"wrong:{instance.id}:{sample}:{turn}")
            episode.apply(wrong_ending(bootcamp, instance, state, rng))
            if state.finished:
                return state, episode.score()
    raise ContractError(
        f"{_where(bootcamp, instance)}: a wrong ending did not end the episode within "
        f"{bootcamp.max_turns(instance)} turns"
    )


def check_declarations(bootcamp: Bootcamp) -> None:
    """At least three levels, each an instance of the bootcamp's params model with its own level number,
    and a tool that ends the episode."""
    if len(bootcamp.levels) < 3:
        raise ContractError(f"{bootcamp.name} declares {len(bootcamp.levels)} levels; expected at least 3")
    for level, params in bootcamp.levels.items():
        if not (isinstance(params, bootcamp.params_model) and isinstance(params, Params)):
            raise ContractError(
                f"{bootcamp.name} level {level} holds {type(params).__name__}; expected "
                f"{bootcamp.params_model.__name__}"
            )
        if params.level != level:
            raise ContractError(f"{bootcamp.name} level {level} holds params of level {params.level}")
    if not any(t.final for t in bootcamp.tools(bootcamp.generate(None, 0))):
        raise ContractError(f"{bootcamp.name} offers no tool with final=True; nothing can end an episode")


def step_line(turn: int, action: Action) -> str:
    """``turn 2: pick({"bin": "b3", "count": 2})``: one action, as evidence shows it."""
    return f"turn {turn}: {action.name}({json.dumps(dict(action.arguments), sort_keys=True, default=str)[:300]})"


def check_oracle_solves(
    bootcamp: Bootcamp, level: int, seeds: Iterable[int] = SEEDS, *, steps: list[str] | None = None
) -> None:
    """The oracle solves every instance of ``level`` drawn from ``seeds``, with reward 1; played as
    :meth:`~campflow.bootcamps.base.Bootcamp.solve` plays it. ``steps`` receives each action played
    (the failing episode's last)."""
    for seed in seeds:
        instance = bootcamp.generate(level, seed)
        if steps is not None:
            steps.clear()
        with direct_episode(bootcamp, instance) as episode:
            state = episode.state
            for turn in range(bootcamp.max_turns(instance)):
                action = bootcamp.oracle(instance, state)
                if steps is not None:
                    steps.append(step_line(turn, action))
                episode.apply(action)
                if state.finished:
                    break
            else:
                raise ContractError(
                    f"{_where(bootcamp, instance)}: the oracle did not finish within {bootcamp.max_turns(instance)} turns"
                )
            score = episode.score()
        if not (score.success and score.reward == 1.0):
            raise ContractError(
                f"{_where(bootcamp, instance)}: the oracle scored reward {score.reward}, "
                f"success {score.success} ({score.details}); expected 1.0 and True"
            )


def check_wrong_endings_bounded(bootcamp: Bootcamp, level: int, seeds: Iterable[int] = SEEDS) -> None:
    """A wrong ending of every instance of ``level`` drawn from ``seeds`` ends the episode, never succeeds
    and scores at most ``wrong_answer_bound``."""
    for seed in seeds:
        instance = bootcamp.generate(level, seed)
        _, score = play_wrong_ending(bootcamp, instance)
        if score.success or score.reward > bootcamp.wrong_answer_bound:
            raise ContractError(
                f"{_where(bootcamp, instance)}: a wrong ending scored reward {score.reward}, "
                f"success {score.success}; expected at most {bootcamp.wrong_answer_bound} "
                "and no success"
            )


def check_deterministic(bootcamp: Bootcamp, level: int, seeds: Iterable[int] = SEEDS) -> None:
    """The same (params, seed) gives the same instance and prompt; different seeds, different instances."""
    ids = set()
    seeds = list(seeds)
    for seed in seeds:
        a = bootcamp.generate(level, seed)
        b = bootcamp.generate(bootcamp.levels[level].model_dump(), seed)
        if a.id != b.id or a.data != b.data or bootcamp.prompt(a) != bootcamp.prompt(b):
            raise ContractError(
                f"{_where(bootcamp, a)}: generating the same params and seed twice gave "
                "different instances or prompts; build and prompt may use only their rng"
            )
        ids.add(a.id)
    if len(ids) < len(seeds):
        raise ContractError(
            f"{bootcamp.name} level {level}: {len(seeds)} seeds gave only {len(ids)} distinct instances"
        )


@dataclass
class Demonstration:
    """One episode of the demonstrator: the transcript as the engine builds it, the world, the score."""

    transcript: list[dict[str, Any]]
    state: State
    score: Score
    finished: bool
    steps: list[str] = field(default_factory=list)


def play_demonstration(bootcamp: Bootcamp, instance: Instance) -> Demonstration:
    """Play :meth:`~campflow.bootcamps.base.Bootcamp.demonstrate` turn after turn with a transcript in
    the engine's format (prompt, one tool call a turn, its result, feedback; a refused call answers
    ``Error: <message>``), no engine or event loop involved, and score the episode."""
    with direct_episode(bootcamp, instance) as episode:
        return _demonstrate(bootcamp, instance, episode)


def _demonstrate(bootcamp: Bootcamp, instance: Instance, episode: DirectEpisode) -> Demonstration:
    transcript: list[dict[str, Any]] = list(bootcamp.prompt(instance))
    state = episode.state
    steps: list[str] = []
    for turn in range(bootcamp.max_turns(instance)):
        action = bootcamp.demonstrate(instance, state, transcript)
        steps.append(step_line(turn, action))
        cid = f"call_{turn}_0"
        arguments = json.dumps(dict(action.arguments), separators=(",", ":"))  # as the engine writes them
        transcript.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": action.name, "arguments": arguments}}
                ],
            }
        )
        tool = next((t for t in bootcamp.tools(instance) if t.name == action.name), None)
        try:
            if tool is None:
                raise ToolError(f"unknown tool {action.name!r}")
            obs = episode.call(action.name, tool.args_model.model_validate(dict(action.arguments)))
            text = obs.text
        except ValidationError as exc:
            obs, text = None, f"Error: invalid arguments for {action.name}: {format_validation_error(exc)}"
        except ToolError as exc:
            obs, text = None, f"Error: {exc}"
        transcript.append({"role": "tool", "tool_call_id": cid, "name": action.name, "content": text})
        if obs is not None and obs.final:
            state.finished = True
            break
        note = bootcamp.feedback(instance, state, turn)
        if note:
            transcript.append({"role": "user", "content": note})
    return Demonstration(transcript, state, episode.score(transcript), state.finished, steps)


def text_twin(bootcamp: Bootcamp, level: int) -> Params:
    """The params of ``level``, drawn as text where the bootcamp has an ``observation`` knob: grounding
    reads text, so a vision bootcamp's demonstrator is judged on the same world described in words."""
    params = bootcamp.levels[level]
    if "observation" not in type(params).model_fields or params.observation == "text":
        return params
    return bootcamp.params({**params.model_dump(), "observation": "text"})


#: the share of a level's instances the demonstrator must solve; the rest may run out of turns (an
#: explorer that must look before it moves can outrun a budget sized on the shortest path), never end wrong
DEMONSTRATION_SOLVED_SHARE = 0.9


def check_demonstration_grounded(
    bootcamp: Bootcamp, level: int, seeds: Iterable[int] = SEEDS, *, evidence: dict[str, Any] | None = None
) -> None:
    """The demonstrator passes only what was shown before each call, never ends an episode with a wrong
    answer, and solves at least :data:`DEMONSTRATION_SOLVED_SHARE` of the instances of ``level`` drawn
    from ``seeds`` (reward 1). ``evidence`` receives the failing episode's seed and steps, the
    ungrounded call last."""
    params = text_twin(bootcamp, level)
    seeds = list(seeds)
    unsolved: list[int] = []
    for seed in seeds:
        instance = bootcamp.generate(params, seed)
        played = play_demonstration(bootcamp, instance)
        if evidence is not None:
            evidence.update(seed=seed, step=played.steps[-1] if played.steps else "", steps=played.steps[-8:])
        problems = bootcamp.ungrounded_arguments(instance, played.transcript)
        if problems:
            if evidence is not None:
                evidence["step"] = f"ungrounded: {problems[0]}"
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ContractError(
                f"{_where(bootcamp, instance)}: the demonstrator passed what nothing shown before held: "
                f"{problems[0]}{more}; pass only ids, names and numbers the prompt or an earlier tool result "
                "showed (or list a free-choice argument in the bootcamp's grounding)"
            )
        solved = played.finished and played.score.success and played.score.reward == 1.0
        if played.finished and not solved:
            raise ContractError(
                f"{_where(bootcamp, instance)}: the demonstrator ended the episode with reward "
                f"{played.score.reward}, success {played.score.success} ({played.score.details}); expected 1.0 and True"
            )
        if not solved:
            unsolved.append(seed)
    if evidence is not None:
        evidence.pop("seed", None)
    if len(seeds) - len(unsolved) < DEMONSTRATION_SOLVED_SHARE * len(seeds):
        raise ContractError(
            f"{bootcamp.name} level {level}: the demonstrator solved {len(seeds) - len(unsolved)} of {len(seeds)} "
            f"instances within the turn budget (seeds {unsolved[:8]} ran out of turns); expected at least "
            f"{DEMONSTRATION_SOLVED_SHARE:.0%}"
        )


def check_contract(bootcamp: Bootcamp, seeds: Iterable[int] = SEEDS) -> None:
    """Every check above, at every level of ``bootcamp``."""
    seeds = list(seeds)
    check_declarations(bootcamp)
    for level in sorted(bootcamp.levels):
        check_deterministic(bootcamp, level, seeds)
        check_oracle_solves(bootcamp, level, seeds)
        check_wrong_endings_bounded(bootcamp, level, seeds)


def _where(bootcamp: Bootcamp, instance: Instance) -> str:
    return f"{bootcamp.name} level {instance.level} seed {instance.seed} (instance {instance.id})"
