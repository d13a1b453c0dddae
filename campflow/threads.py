"""Torch's intra-op thread count on a CPU, chosen by measured speed while the work runs.

On a small CPU the embedded model's matmuls are small, and torch's OpenMP threads spin while they
wait for each other. Alone on a 2-core machine two threads make an SFT step ~1.7x faster than one;
beside another busy process the spinning thread loses its time slice and the same step takes 6-13x
longer, generation up to 35x, while one thread barely notices the neighbour
(``benchmarks/bench_threads.py`` prints both, side by side). Whether a machine is busy changes while
a cycle runs, so ``cpu_threads: auto`` does not guess: a :class:`ThreadTuner` runs the work (SFT
steps, generation batches) at one setting, now and then tries the other for a couple of units, and
keeps whichever did more work per second. A probe that loses backs off (it is tried half as often
again), so a busy machine pays for few slow probes.

A number (``cpu_threads: 2``, or ``CAMPFLOW_CPU_THREADS=2`` in the environment for ``auto``) fixes the
count and measures nothing. Accelerators ignore this.

Torch keeps the count per thread once a thread has computed (OpenMP's setting is thread-local), so
:meth:`ThreadTuner.apply` is called on the thread that is about to compute, before each unit.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from campflow.errors import ConfigError

CPU_THREADS_HELP = "torch threads on a CPU: auto (measured while running: 1 or all cores) or a number"


THREADS_ENV = "CAMPFLOW_CPU_THREADS"


def parse_cpu_threads(value: int | str) -> int | None:
    """``auto`` -> None (tune), a positive integer -> itself; anything else is refused in one line.

    ``CAMPFLOW_CPU_THREADS=N`` in the environment fixes ``auto`` at N for the whole process (every step,
    training and generation): for a machine shared with known other work, and for the test runs that
    check numeric references at 1 and at 2 threads.
    """
    if value == "auto":
        fixed = os.environ.get(THREADS_ENV, "").strip()
        if not fixed:
            return None
        if not fixed.isdigit() or int(fixed) < 1:
            raise ConfigError(f"{THREADS_ENV}={fixed!r}: expected a positive integer (or unset, to measure)")
        return int(fixed)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"cpu_threads {value!r}: expected auto or a positive integer")


class ThreadTuner:
    """Chooses between one thread and every core by time per unit of work.

    Args:
        fixed: a fixed thread count (no tuning), or None to tune.
        cores: the cores to use at most (default: ``os.cpu_count()``).
        probe_every: units between probes of the other setting (doubles after each lost probe).
        probe_units: units a probe runs.
        max_every: the longest interval between probes.
        margin: how much faster (per unit of work) the other setting must be to be taken.
    """

    def __init__(
        self,
        fixed: int | None = None,
        *,
        cores: int | None = None,
        probe_every: int = 24,
        probe_units: int = 2,
        max_every: int = 384,
        margin: float = 0.1,
    ) -> None:
        cores = cores or os.cpu_count() or 1
        self.choices = [fixed] if fixed is not None else sorted({1, cores})
        self.current = self.choices[0]  # one thread first: on a busy machine the safe choice
        self.base_every, self.max_every = probe_every, max_every
        self.every, self.probe_units, self.margin = probe_every, probe_units, margin
        self.rates: dict[int, deque[float]] = {n: deque(maxlen=8) for n in self.choices}
        self.since_probe = 0
        self.probing: int | None = None
        self.probe_left = 0
        # the first probe comes early: an idle machine should not wait long for its second core
        self.since_probe = probe_every - 4 if len(self.choices) > 1 else 0
        self.switches: list[tuple[int, int]] = []  # (unit index, new thread count)
        self.units = 0

    @property
    def tuning(self) -> bool:
        return len(self.choices) > 1

    def next_threads(self) -> int:
        """The thread count the next unit runs with."""
        return self.probing if self.probing is not None else self.current

    def apply(self) -> int:
        """Set torch's thread count for the next unit, on the calling thread; returns it."""
        import torch

        n = self.next_threads()
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
        return n

    def record(self, seconds: float, work: float = 1.0) -> None:
        """Report that the unit just run took ``seconds`` for ``work`` (tokens, sequences, steps)."""
        if seconds <= 0 or work <= 0:
            return
        self.units += 1
        ran = self.next_threads()
        self.rates[ran].append(seconds / work)
        if not self.tuning:
            return
        if self.probing is not None:
            self.probe_left -= 1
            if self.probe_left > 0:
                return
            self._decide(self.probing)
            self.probing = None
            return
        self.since_probe += 1
        if self.since_probe >= self.every and len(self.rates[self.current]) >= 2:
            self.probing = next(n for n in self.choices if n != self.current)
            self.probe_left = self.probe_units
            self.since_probe = 0

    def _decide(self, other: int) -> None:
        probe = list(self.rates[other])[-self.probe_units :]
        mine = statistics.median(self.rates[self.current])
        theirs = statistics.median(probe)
        if theirs < mine * (1 - self.margin):
            self.current = other
            self.every = self.base_every
            self.switches.append((self.units, other))
            self.rates[other] = deque(probe, maxlen=8)  # only fresh figures for the new setting
        else:
            self.every = min(self.every * 2, self.max_every)

    @contextmanager
    def unit(self, work: float = 1.0) -> Iterator[int]:
        """Run one unit of ``work`` under the chosen thread count, timing it."""
        n = self.apply()
        started = time.perf_counter()
        yield n
        self.record(time.perf_counter() - started, work)

    def summary(self) -> dict[str, object]:
        """What the tuner chose: the final setting, the switches and the median seconds per work unit."""
        return {
            "cpu_threads": self.current,
            "thread_switches": self.switches,
            "seconds_per_unit": {n: round(statistics.median(r), 6) for n, r in self.rates.items() if r},
        }
