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

from campflow.progress import Reporter, Throughput


class RichReporter(Reporter):
    """Progress bars, one per unit of work; safe to call from worker threads.

    Where the console is not a terminal (CI logs, ``make run > log``) the bars cannot redraw, so each
    unit of work also prints a line when it starts and when it finishes.
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
        self._lines = not self.progress.console.is_terminal

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.stop()

    def start(self, key: str, description: str, total: int | None) -> None:
        with self._lock:
            self._meters.pop(key, None)
            if key in self._tasks:
                self.progress.reset(self._tasks[key], total=total, description=description)
            else:
                self._tasks[key] = self.progress.add_task(description, total=total)
        if self._lines:
            self.note(f"{description} ..." if total is None else f"{description} (0/{total}) ...")

    def advance(self, key: str, steps: int = 1) -> None:
        with self._lock:
            if key in self._tasks:
                self.progress.advance(self._tasks[key], steps)

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

    def update(self, key: str, description: str) -> None:
        with self._lock:
            if key in self._tasks:
                self.progress.update(self._tasks[key], description=description)

    def finish(self, key: str) -> None:
        with self._lock:
            if key in self._tasks:
                task = self.progress.tasks[self._tasks[key]]
                if task.total is not None:
                    self.progress.update(self._tasks[key], completed=task.total)
                if self._lines:
                    self.note(f"{task.description}: done in {task.elapsed or 0.0:.1f}s")

    def note(self, message: str) -> None:
        self.progress.console.log(message)
