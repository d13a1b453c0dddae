"""Seeding the generators a source reaches for on its own: ``random``, ``numpy.random`` and its objects' rngs.

Sources written for a one-off data dump draw from the global ``random`` module (InternBootcamp's
classes, reasoning-gym's ``list_functions`` generators, code that ``codeio`` executes) or keep an
unseeded generator on an object. Both give a different task for the same instance id in another
process. :func:`seeded_globals` seeds the global generators from the instance's own seed for the
duration of one generation, under a process-wide lock (so threads never interleave there), and puts
the caller's states back afterwards. :func:`reseed_object` reseeds the generators an object keeps in
its attributes.

What no seeding can fix from outside is a dependence on the hash seed (iteration order of a ``set``
of strings); the import's cross-process check (:mod:`~campflow.sources.vetting`) finds it.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

GENERATION_LOCK = threading.RLock()  # seeding the global generators must not interleave across threads


@contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """Run the block with ``random`` and (if installed) ``numpy.random`` seeded from ``seed``; restore them after."""
    with GENERATION_LOCK:
        np = _numpy()
        saved = random.getstate(), (np.random.get_state() if np is not None else None)
        random.seed(seed)
        if np is not None:
            np.random.seed(seed % 2**32)
        try:
            yield
        finally:
            random.setstate(saved[0])
            np_now = sys.modules.get("numpy")
            if np_now is not None and saved[1] is not None:
                np_now.random.set_state(saved[1])


def _numpy() -> Any:
    """numpy, imported now if it is installed: a source importing it mid-generation would escape the seeding."""
    np = sys.modules.get("numpy")
    if np is None and importlib.util.find_spec("numpy") is not None:
        import numpy as np
    return np


def reseed_object(obj: Any, seed: int) -> None:
    """Reseed every ``random.Random``, ``numpy.random.RandomState`` or ``Generator`` held in ``obj``'s attributes.

    A ``Generator`` cannot be reseeded in place, so the attribute gets a fresh ``default_rng(seed)``.
    Only the object's own attributes are looked at; a generator nested deeper (in an attribute's
    attribute) is not, which is why a ``seed`` constructor argument is passed where the class has one.
    """
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return
    np = sys.modules.get("numpy")
    for name, value in list(attrs.items()):
        if isinstance(value, random.Random):
            value.seed(seed)
        elif np is not None and isinstance(value, np.random.RandomState):
            value.seed(seed % 2**32)
        elif np is not None and isinstance(value, np.random.Generator):
            setattr(obj, name, np.random.default_rng(seed))
