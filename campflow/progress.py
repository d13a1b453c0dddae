"""Progress reporting that long work calls and front ends display.

Domain code and flows call :func:`current` and report through the :class:`Reporter` they get; the CLI
installs a rich display with :func:`use`. Without one, reports go nowhere. Reports are process-wide,
so rollout tasks on worker threads reach the display too; work in other processes reports only when
its results are written back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class Reporter:
    """Receives progress; this base class ignores everything."""

    def start(self, key: str, description: str, total: int | None) -> None:
        """A unit of work begins (``total`` steps, or None when unknown)."""

    def advance(self, key: str, steps: int = 1) -> None:
        """``steps`` more of ``key`` are done."""

    def update(self, key: str, description: str) -> None:
        """The description of ``key`` changes (e.g. a running metric)."""

    def finish(self, key: str) -> None:
        """The unit of work ``key`` is over."""

    def note(self, message: str) -> None:
        """A one-line message worth showing."""


_current: Reporter = Reporter()


def current() -> Reporter:
    """The reporter installed for this process."""
    return _current


@contextmanager
def use(reporter: Reporter) -> Iterator[Reporter]:
    """Install ``reporter`` for the duration of the block."""
    global _current
    previous, _current = _current, reporter
    try:
        yield reporter
    finally:
        _current = previous
