"""Stopping a long run on Ctrl-C or SIGTERM: unwind like Ctrl-C, then say in one line where it stopped.

Python's default SIGTERM kills the process on the spot: no ``finally`` runs, the run is never marked
and Prefect's ephemeral API server is left behind. Prefect swaps in its own SIGTERM handler while a
flow runs; it reports the crash to its API server and re-sends the signal to the handler it
replaced. When the whole process group is signalled (Ctrl-C, ``kill -- -PGID``, a service manager)
that server is already gone, and the report is retried against it for a minute before ending in a
page of httpx traceback.

So :func:`signals` installs, for the block, a handler that records the stop, runs the hooks a front
end registered with :func:`on_stop` (the CLI quiets logging and makes Prefect's client give up at
once), then lets the handler it replaced act (Prefect's, so a flow still cancels its tasks) and
raises :class:`Stopped`, a ``KeyboardInterrupt``. The CLI installs it around every command and the
flows inside their bodies (:func:`unwinding`), because Prefect installs its own at the start of each
flow. Handlers can only be set in the main thread; elsewhere :func:`signals` does nothing.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_hooks: list[Callable[[str], None]] = []
_received: str | None = None
F = TypeVar("F", bound=Callable[..., Any])


class Stopped(KeyboardInterrupt):
    """The process was asked to stop (SIGINT or SIGTERM); it unwinds like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def received() -> str | None:
    """The name of the first stop signal this process received (``SIGTERM``, ``SIGINT``), or None."""
    return _received


def on_stop(hook: Callable[[str], None]) -> None:
    """Run ``hook(signal_name)`` once, in the main thread, when the first stop signal arrives."""
    _hooks.append(hook)


def request_stop(signum: int) -> None:
    """Record that a stop was asked for and run the hooks (only the first time)."""
    global _received
    if _received is not None:
        return
    _received = signal.Signals(signum).name
    for hook in _hooks:
        hook(_received)


def reset() -> None:
    """Forget a recorded stop and the hooks (for tests that run several commands in one process)."""
    global _received
    _received = None
    _hooks.clear()


@contextmanager
def signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM stop the process by unwinding (see the module docstring)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}

    def handle(signum: int, frame: Any) -> None:
        request_stop(signum)
        before = previous[signum]
        if callable(before):  # Prefect's bridge raises its TerminationSignal; Python's SIGINT raises KeyboardInterrupt
            before(signum, frame)
        raise Stopped(signum)

    installed = [s for s, before in previous.items() if before is not signal.SIG_IGN]
    for s in installed:
        signal.signal(s, handle)
    try:
        yield
    finally:
        for s in installed:
            signal.signal(s, previous[s])


def unwinding(fn: F) -> F:
    """``fn`` run within :func:`signals` (for flow bodies: put it under ``@flow``)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with signals():
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]
