"""The bootcamp contract: what every bootcamp must do, checked on any bootcamp object.

A bootcamp keeps the contract when

- it declares at least three levels of its own params and offers a tool that ends the episode
  (:func:`check_declarations`);
- at every level, the oracle solves every generated instance with reward 1 (:func:`check_oracle_solves`);
- a wrong ending (:meth:`~campflow.bootcamps.base.Bootcamp.wrong_answer`, following the oracle until one
  is possible) ends the episode, never succeeds and earns at most ``wrong_answer_bound``
  (:func:`check_wrong_endings_bounded`);
- generation is deterministic: a level number and the same params as a dict give the same id,
  identity and prompt for a seed, and different seeds give different instances (:func:`check_deterministic`).

The checks play the bootcamp directly (no engine, no policy), so they run wherever the bootcamp
imports: in the test suite for the built-in bootcamps, in a subprocess for one written by someone
else. Each raises :class:`~campflow.errors.ContractError` naming the bootcamp, level and seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from campflow.bootcamps.base import Action, Bootcamp, Instance, Params, Score, State
from campflow.errors import ContractError

SEEDS = range(50)


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
    state = bootcamp.new_state(instance)
    for turn in range(bootcamp.max_turns(instance)):
        rng = random.Random(f"wrong:{instance.id}:{sample}:{turn}")
        bootcamp.apply(instance, state, wrong_ending(bootcamp, instance, state, rng))
        if state.finished:
            return state, bootcamp.score(instance, state, ())
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


def check_oracle_solves(bootcamp: Bootcamp, level: int, seeds: Iterable[int] = SEEDS) -> None:
    """The oracle solves every instance of ``level`` drawn from ``seeds``, with reward 1."""
    for seed in seeds:
        instance = bootcamp.generate(level, seed)
        try:
            _, score = bootcamp.solve(instance)
        except RuntimeError as exc:
            raise ContractError(f"{_where(bootcamp, instance)}: {exc}") from None
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
