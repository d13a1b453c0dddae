"""Progress reporting that long work calls and front ends display.

Domain code and flows call :func:`current` and report through the :class:`Reporter` they get; the CLI
installs a rich display with :func:`use`. Without one, reports go nowhere. Reports are process-wide,
so rollout tasks on worker threads reach the display too; work in other processes reports only when
its results are written back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Throughput:
    """Episodes, tokens and policy latency since it was made: what evaluation at scale costs."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.episodes = self.tokens = self.turns = 0
        self.latency_s = 0.0
        self._lock = threading.Lock()

    def add(self, tokens: int, turns: int, latency_s: float) -> None:
        """One more finished episode (its tokens, turns and seconds spent waiting for the policy)."""
        with self._lock:
            self.episodes += 1
            self.tokens += tokens
            self.turns += turns
            self.latency_s += latency_s

    def rates(self) -> dict[str, float]:
        """Episodes and tokens per second of wall time, and the mean policy latency per turn."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {
            "episodes_per_s": self.episodes / elapsed,
            "tokens_per_s": self.tokens / elapsed,
            "latency_per_turn_s": self.latency_s / self.turns if self.turns else 0.0,
        }

    def describe(self) -> str:
        """``3.2 ep/s, 850 tok/s, 120 ms/turn``."""
        r = self.rates()
        return (
            f"{r['episodes_per_s']:.2f} ep/s, {r['tokens_per_s']:.0f} tok/s, "
            f"{r['latency_per_turn_s'] * 1000:.0f} ms/turn"
        )


class Reporter:
    """Receives progress; this base class ignores everything."""

    def start(self, key: str, description: str, total: int | None) -> None:
        """A unit of work begins (``total`` steps, or None when unknown)."""

    def advance(self, key: str, steps: int = 1) -> None:
        """``steps`` more of ``key`` are done."""

    def episode(self, key: str, tokens: int, turns: int, latency_s: float) -> None:
        """One episode of ``key`` is done, with what it cost; displays may show the rates."""
        self.advance(key)

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
