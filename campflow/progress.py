"""Progress reporting that long work calls and front ends display.

Domain code and flows call :func:`current` and report through the :class:`Reporter` they get; the CLI
installs a rich display with :func:`use`. Without one, reports go nowhere. Reports are process-wide,
so rollout tasks on worker threads reach the display too; work in other processes reports only when
its results are written back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
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


class LineReporter(Reporter):
    """Progress as plain lines, for a log rather than a terminal (``make run > log``, a scheduled run).

    A line when a unit of work starts and when it ends, and, while any runs, one line per unit every
    ``interval_s`` seconds (from a background thread once entered as a context manager) with its
    done/total, rate and time left, so a long step such as SFT shows where it is.
    """

    def __init__(
        self,
        write: Callable[[str], None] | None = None,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write or (lambda line: print(line, flush=True))
        self.interval_s = interval_s
        self._clock = clock
        self._units: dict[str, _Unit] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> LineReporter:
        self._stopped.clear()
        self._ticker = threading.Thread(target=self._tick_until_stopped, name="progress-lines", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None

    def _tick_until_stopped(self) -> None:
        while not self._stopped.wait(self.interval_s):
            self.tick()

    def _line(self, text: str) -> None:
        self._write(f"[{time.strftime('%H:%M:%S')}] {text}")

    def start(self, key: str, description: str, total: int | None) -> None:
        with self._lock:
            self._units[key] = _Unit(description, total, self._clock())
        self._line(f"{description}: started" + ("" if total is None else f" (0/{total})"))

    def advance(self, key: str, steps: int = 1) -> None:
        with self._lock:
            if key in self._units:
                self._units[key].done += steps

    def episode(self, key: str, tokens: int, turns: int, latency_s: float) -> None:
        with self._lock:
            if key in self._units:
                unit = self._units[key]
                unit.done += 1
                unit.meter.add(tokens, turns, latency_s)

    def update(self, key: str, description: str) -> None:
        with self._lock:
            if key in self._units:
                self._units[key].description = description

    def finish(self, key: str) -> None:
        with self._lock:
            unit = self._units.pop(key, None)
        if unit is not None:
            self._line(f"{unit.description}: done, {unit.counts()} in {self._clock() - unit.started:.1f}s")

    def note(self, message: str) -> None:
        self._line(message)

    def tick(self) -> None:
        """One line per unit of work still running: done/total, rate and time left."""
        now = self._clock()
        with self._lock:
            lines = [unit.status(now) for unit in self._units.values()]
        for line in lines:
            self._line(line)


class _Unit:
    """A unit of work a :class:`LineReporter` follows."""

    def __init__(self, description: str, total: int | None, started: float) -> None:
        self.description, self.total, self.started = description, total, started
        self.done = 0
        self.meter = Throughput()

    def counts(self) -> str:
        return f"{self.done}" if self.total is None else f"{self.done}/{self.total}"

    def status(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        line = f"{self.description}: {self.counts()} ({rate:.2f}/s, {elapsed:.0f}s elapsed"
        if self.total and self.done and self.done < self.total:
            line += f", about {(self.total - self.done) / rate:.0f}s left"
        if self.meter.episodes:
            line += f"; {self.meter.describe()}"
        return line + ")"


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
