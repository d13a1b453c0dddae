"""Train-split instances of one bootcamp for served episodes (OpenEnv resets, MCP sessions).

Its own module, apart from :mod:`campflow.envserve.environment`: serving over MCP draws from it too,
and must not import OpenEnv's server stack (seconds of imports, and another extra) to do so.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from campflow.bootcamps.base import Bootcamp, Instance
from campflow.bootcamps.splits import is_eval_seed, train_instances
from campflow.errors import InvalidParamsError

# how many draws of one seed's train stream may be held out before a reset gives up (each draw is a
# fresh seed below the eval range, so a second one is already astronomically unlikely)
_DRAWS = 8


class TrainStream:
    """Train-split instances of one bootcamp, for resets.

    Args:
        bootcamp: the bootcamp served.
        levels: the levels served; a reset's level must be one of them.
        held_out: instance ids never to serve (the store's eval and probe instances).
        start: the seed of the first reset that names none; later ones count up from it.

    ``draw(seed)`` is the first of ``train_instances(bootcamp, n, seed=seed, params=level)`` that is not
    held out, at ``level`` or, if none is asked for, ``levels[seed % len(levels)]``: the same seed gives
    the same instance on every server, and no seed reaches the eval range.
    """

    def __init__(self, bootcamp: Bootcamp, levels: Iterable[int], held_out: set[str], start: int = 0) -> None:
        self.bootcamp = bootcamp
        self.levels = sorted(levels)
        self.held_out = held_out
        self._next = start
        self._lock = threading.Lock()  # sessions reset from their own threads

    def draw(self, seed: int | None = None, level: int | None = None) -> Instance:
        """A train-split instance (see the class docstring).

        Raises:
            InvalidParamsError: ``level`` is not served here.
        """
        if seed is None:
            with self._lock:
                seed, self._next = self._next, self._next + 1
        if level is None:
            level = self.levels[seed % len(self.levels)]
        elif level not in self.levels:
            raise InvalidParamsError(
                f"{self.bootcamp.name}: level {level!r} is not served here; expected one of {self.levels}"
            )
        params = self.bootcamp.params(level)
        for n in range(1, _DRAWS + 1):
            instance = train_instances(self.bootcamp, n, seed=seed, params=params)[-1]
            if not is_eval_seed(instance.seed) and instance.id not in self.held_out:
                return instance
        raise InvalidParamsError(f"{self.bootcamp.name}: seed {seed} draws only held-out instances; try another seed")
