"""Run and cycle ids: the one character set and length every id the store keys runs on must match.

An id is 1 to 128 characters: letters, digits and ``. _ : -``, starting with a letter or a digit.
That keeps ids safe to paste into a shell, into SQL between quotes and into a path (a cycle's
report folder is named by its id; ``.`` and ``..`` cannot be ids). A cycle id is at most 100
characters, so the run ids a cycle derives from it (``<cycle>-before``, ``-after``, ``-collect``,
``-variants``) are ids too. The ids campflow generates (``eval-20261130-034012-1a2b3c``,
``cycle-20261130-034012-1a2b``) match.
"""

from __future__ import annotations

import re

from campflow.errors import ConfigError

RUN_ID_CHARS = "letters, digits and . _ : - (starting with a letter or digit)"
RUN_ID_MAX = 128
CYCLE_ID_MAX = 100
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")


def check_run_id(value: str, *, what: str = "run id", longest: int = RUN_ID_MAX) -> str:
    """``value`` if it is a valid id (see the module docstring), else a one-line error naming it.

    Raises:
        ConfigError: the id is empty, too long, or has a character outside the set.
    """
    if not isinstance(value, str) or not _ID.fullmatch(value) or len(value) > longest:
        shown = ascii(value) if isinstance(value, str) else repr(value)
        if isinstance(value, str) and len(value) > 60:
            shown = ascii(value[:57]) + "..."
        raise ConfigError(f"{what} {shown}: expected 1 to {longest} characters, {RUN_ID_CHARS}")
    return value


def check_cycle_id(value: str) -> str:
    """``value`` if it is a valid cycle id (a run id of at most :data:`CYCLE_ID_MAX` characters)."""
    return check_run_id(value, what="cycle id", longest=CYCLE_ID_MAX)
