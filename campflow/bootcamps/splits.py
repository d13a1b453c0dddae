"""Train and eval splits, fixed by seed range and checked by instance id.

Eval instances come from a reserved seed range: the i-th eval instance of a bootcamp is at level
``levels[i % len(levels)]`` with seed ``EVAL_SEED_BASE + i``. Asking for ``n`` eval instances takes
the first ``n``, so a smaller evaluation is always a prefix of a larger one. Training, teacher
collection and synthesis draw seeds below ``EVAL_SEED_BASE``; :func:`assert_not_eval` checks ids.
A synthesized variant's probe instances (split ``probe``) have train-range seeds but are held out
like the eval split: :func:`assert_not_held_out` checks both.

Vision bootcamps show the world as images or as text (their params' ``observation``); ``observation``
draws the same levels and seeds in the mode asked for (:func:`level_params`), as distinct instances
(the mode is part of the params, so of the id): a text-only model's eval split is the text-mode twin
of a vision-language model's.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from campflow.bootcamps.base import Bootcamp, Instance, Params
from campflow.errors import SplitLeakError

EVAL_SEED_BASE = 1_000_000_000
# The params field of a vision bootcamp's observation mode: which mode follows the model, not the task
OBSERVATION = "observation"
TRAIN_SEED_LIMIT = EVAL_SEED_BASE


def is_eval_seed(seed: int) -> bool:
    """Whether ``seed`` lies in the range reserved for the eval split."""
    return seed >= EVAL_SEED_BASE


def level_params(bootcamp: Bootcamp, level: int, observation: str | None = None) -> Params:
    """``bootcamp``'s params of ``level``, in observation mode ``observation`` where the bootcamp has
    one (vision bootcamps: ``image`` or ``text``); None or a bootcamp without modes: the level as declared."""
    params = bootcamp.levels[level]
    if observation is None or OBSERVATION not in type(params).model_fields:
        return params
    return bootcamp.params({**params.model_dump(), OBSERVATION: observation})


def eval_instances(
    bootcamp: Bootcamp, n: int, levels: Iterable[int] | None = None, observation: str | None = None
) -> list[Instance]:
    """The first ``n`` instances of ``bootcamp``'s eval split, optionally only from some levels.

    The full split cycles over all levels (position ``j`` has level ``levels[j % L]`` and seed
    ``EVAL_SEED_BASE + j``); restricting to some levels keeps each chosen instance's seed and id.
    ``observation`` picks a vision bootcamp's mode (:func:`level_params`).
    """
    all_levels = sorted(bootcamp.levels)
    if not all_levels:
        raise ValueError(f"{bootcamp.name} declares no levels")
    chosen = set(all_levels if levels is None else levels)
    unknown = chosen - set(all_levels)
    if unknown:
        raise ValueError(f"{bootcamp.name} has no level {min(unknown)}; expected one of {all_levels}")
    out: list[Instance] = []
    j = 0
    while len(out) < n:
        level = all_levels[j % len(all_levels)]
        if level in chosen:
            out.append(bootcamp.generate(level_params(bootcamp, level, observation), EVAL_SEED_BASE + j))
        j += 1
    return out


def train_instances(
    bootcamp: Bootcamp,
    n: int,
    seed: int = 0,
    params: Params | int | None = None,
    levels: Iterable[int] | None = None,
    observation: str | None = None,
) -> list[Instance]:
    """``n`` training instances with seeds drawn below the eval range, from ``seed``.

    With ``params`` every instance uses them; otherwise levels cycle over ``levels`` (default: all), in
    a vision bootcamp's ``observation`` mode (:func:`level_params`).
    """
    rng = random.Random(f"train:{bootcamp.name}:{seed}")
    lv = sorted(levels) if levels is not None else sorted(bootcamp.levels)
    out = []
    for i in range(n):
        p = params if params is not None else level_params(bootcamp, lv[i % len(lv)], observation)
        out.append(bootcamp.generate(p, rng.randrange(TRAIN_SEED_LIMIT)))
    return out


def assert_not_eval(instance_ids: Iterable[str], eval_ids: set[str], what: str = "dataset") -> None:
    """Raise SplitLeakError if any id belongs to the eval split."""
    leaked = sorted(set(instance_ids) & eval_ids)
    if leaked:
        raise SplitLeakError(
            f"{what} would include {len(leaked)} eval-split instance(s), e.g. {leaked[0]}; "
            "eval instances are never trained on"
        )


def assert_not_held_out(
    instance_ids: Iterable[str], eval_ids: set[str], probe_ids: set[str], what: str = "dataset"
) -> None:
    """Raise SplitLeakError if any id belongs to the eval split or is a variant's probe instance."""
    ids = set(instance_ids)
    assert_not_eval(ids, eval_ids, what=what)
    leaked = sorted(ids & probe_ids)
    if leaked:
        raise SplitLeakError(
            f"{what} would include {len(leaked)} probe instance(s), e.g. {leaked[0]}; probes measure a "
            "variant's gain and are never trained on"
        )
