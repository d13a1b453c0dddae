"""The rich live display that long commands install as their progress reporter."""

from __future__ import annotations

import threading
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from campflow.progress import LineReporter, Reporter, Throughput


class RichReporter(Reporter):
    """Progress bars, one per unit of work; safe to call from worker threads.

    Where the console is not a terminal (CI logs, ``make run > log``) the bars cannot redraw: a
    :class:`~campflow.progress.LineReporter` prints plain lines instead, when each unit of work starts and
    ends and every 30 s in between.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._meters: dict[str, tuple[Throughput, str]] = {}
        self._lock = threading.Lock()
        console = self.progress.console
        self._lines = (
            None
            if console.is_terminal
            else LineReporter(lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
        )

    def __enter__(self) -> RichReporter:
        if self._lines is not None:
            self._lines.__enter__()
        else:
            self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lines is not None:
            self._lines.__exit__(exc_type, exc, tb)
        else:
            self.progress.stop()

    def start(self, key: str, description: str, total: int | None) -> None:
        with self._lock:
            self._meters.pop(key, None)
            if key in self._tasks:
                self.progress.reset(self._tasks[key], total=total, description=description)
            else:
                self._tasks[key] = self.progress.add_task(description, total=total)
        if self._lines is not None:
            self._lines.start(key, description, total)

    def advance(self, key: str, steps: int = 1) -> None:
        with self._lock:
            if key in self._tasks:
                self.progress.advance(self._tasks[key], steps)
        if self._lines is not None:
            self._lines.advance(key, steps)

    def episode(self, key: str, tokens: int, turns: int, latency_s: float) -> None:
        """Advance ``key`` and show its episodes/s, tokens/s and the policy's latency per turn."""
        with self._lock:
            if key not in self._tasks:
                return
            if key not in self._meters:
                self._meters[key] = (Throughput(), self.progress.tasks[self._tasks[key]].description)
            meter, label = self._meters[key]
            meter.add(tokens, turns, latency_s)
            self.progress.update(self._tasks[key], advance=1, description=f"{label} ({meter.describe()})")
        if self._lines is not None:
            self._lines.episode(key, tokens, turns, latency_s)

    def update(self, key: str, description: str) -> None:
        with self._lock:
            if key in self._tasks:
                self.progress.update(self._tasks[key], description=description)
        if self._lines is not None:
            self._lines.update(key, description)

    def finish(self, key: str) -> None:
        with self._lock:
            if key in self._tasks:
                task = self.progress.tasks[self._tasks[key]]
                if task.total is not None:
                    self.progress.update(self._tasks[key], completed=task.total)
        if self._lines is not None:
            self._lines.finish(key)

    def note(self, message: str) -> None:
        if self._lines is not None:
            self._lines.note(message)
        else:
            self.progress.console.log(message)
