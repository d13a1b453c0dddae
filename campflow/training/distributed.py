"""Training under ``accelerate launch`` (or torchrun): every process trains, one process records.

TRL's trainers run distributed as they are; what campflow adds around them (the staged checkpoint
folder, the tokenizer files, the store rows) is written by the main process only, so N processes
leave one checkpoint and one row, exactly as a single process does.
"""

from __future__ import annotations

import os


def is_main_process() -> bool:
    """Whether this process writes checkpoints and the store: rank 0, or the only process.

    Read from the environment the launchers set (``RANK``), so asking starts nothing; a plain
    ``campflow train`` has no ``RANK`` and is the main process.
    """
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    """How many training processes the launcher started (1 without one)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def processes() -> list[str]:
    """The part of a checkpoint id that says how many processes trained it: nothing for one process,
    else ``["processes=N"]`` (N processes see N times the batch, so the result differs)."""
    n = world_size()
    return [] if n == 1 else [f"processes={n}"]
