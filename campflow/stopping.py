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

A signal lands between any two bytecodes, so the exception a handler raises can land where Python
cannot propagate it: inside a finalizer (``__del__`` of an asyncio transport), a weakref callback or
an ``atexit`` hook, where Python prints "Exception ignored in ..." with a traceback and goes on as if
nothing happened. Once a stop is recorded, :func:`signals` therefore reports nothing unraisable and
no exception of a dying thread (the only output is the front end's one line), and a stop swallowed
that way is delivered again at the next safe point. A signal after the outermost block ended (the
process is on its way out) ends it at once with its line (:func:`own_process`), and :func:`exit_within` bounds the whole unwinding: whatever hangs on the
way out (a client retrying a server the same signal took down), the process says its line and exits.

Those two act from daemon threads, and a daemon thread must not be inside a C++ extension when the
interpreter shuts down: Python ends a daemon thread that wants the GIL back after shutdown began by
unwinding its stack, and a C++ frame in the way (DuckDB's, where the line's ``run ... stopped with N
episode(s) stored`` is read) turns that into ``terminate called ... FATAL: exception not rethrown`` and
SIGABRT. So the front end calls :func:`exiting` as it hands the process to the interpreter's shutdown:
from then on the threads say a line that needs no store (and one already being worked out holds the
shutdown back until the process has exited with it).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_hooks: list[Callable[[str], None]] = []
_received: str | None = None
_arrived: str | None = None  # the first stop signal the watcher saw arrive (before the main thread may run its handler)
_depth = 0  # nesting of active signals() blocks in the main thread
_said = threading.Event()
_say_lock = threading.Lock()
F = TypeVar("F", bound=Callable[..., Any])


class Stopped(KeyboardInterrupt):
    """The process was asked to stop (SIGINT or SIGTERM); it unwinds like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def received() -> str | None:
    """The name of the first stop signal this process received (``SIGTERM``, ``SIGINT``), or None."""
    return _received


def exit_code() -> int:
    """The exit code of a process stopped by the recorded signal (128 + its number; 130 for SIGINT)."""
    return 128 + signal.Signals[_received or _arrived or "SIGINT"].value


_normal_end = threading.Event()


def stop_was_the_end() -> None:
    """Say that the stop was how the command is meant to end (a server's Ctrl-C or SIGTERM): the front end
    then exits 0 once the command returns, without the stopped line."""
    _normal_end.set()


def stopped_as_meant() -> bool:
    """Whether the command called :func:`stop_was_the_end` for the stop it received."""
    return _normal_end.is_set()


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
        try:
            hook(_received)
        except Exception:  # noqa: BLE001  (a hook that fails must not lose the stop: see below)
            # The signal lands anywhere, also inside an import (a hook that imports from a module half
            # initialized fails): an exception from here would replace the stop and could be swallowed
            # by the code it lands in (an ``except ImportError``), and the command would run on.
            pass


def say(line: str) -> None:
    """Print ``line`` to stderr, once per process: the front end's last words after a stop, whether the
    unwinding ends normally or :func:`exit_within` ends it."""
    with _say_lock:
        if _said.is_set():
            return
        _said.set()
        if threading.current_thread() is threading.main_thread():  # the real stderr: sys.stderr may be muted
            print(line, file=sys.__stderr__ or sys.stderr, flush=True)
        else:  # a daemon thread ended holding stderr's buffer would abort the interpreter's shutdown
            os.write(2, (line + "\n").encode(errors="replace"))


def exit_within(seconds: float, last_words: Callable[[], str]) -> None:
    """End the process ``seconds`` from now unless it has ended by then: say ``last_words()`` (if
    nothing was said yet), stop this process's child processes and exit with :func:`exit_code`.

    Call it once a stop is recorded. Unwinding normally takes well under a second; this bounds what
    cannot be foreseen (an ``atexit`` hook that retries a dead server, a thread that never returns).
    """

    def deadline() -> None:
        _end(last_words)

    timer = threading.Timer(seconds, deadline)
    timer.daemon = True
    timer.start()


_exiting = False  # the front end handed the process to the interpreter's shutdown (:func:`exiting`)
_exiting_lock = threading.RLock()  # re-entrant: the main thread's signal handler may run inside exiting()


def exiting() -> None:
    """Say that the front end is done and the interpreter's shutdown follows: a line still to be said
    (a signal from here on) is said without reading the store (see the module docstring). If a
    daemon thread is working one out now, this waits for it, and that thread ends the process."""
    global _exiting
    with _exiting_lock:
        _exiting = True


def _end(last_words: Callable[[], str]) -> None:
    """From the watcher, the deadline or a late signal's handler: say ``last_words()`` (unless a line was
    said), stop this process's children and exit with :func:`exit_code`.

    The store is read only while holding :func:`exiting` back, so the interpreter's shutdown never begins
    under a thread that is reading it; once the shutdown has begun, or while another thread holds it back
    for longer than a second (its store is slow: the grace must still hold), the line is the plain one.
    """
    plain = f"error: stopped by {_received or _arrived}"
    if _exiting_lock.acquire(timeout=1.0):
        if _exiting:
            say(plain)
        else:
            try:
                say(last_words())
            except Exception:  # noqa: BLE001  (the line must come out even if the store cannot say more)
                say(plain)
    else:
        say(plain)
    end_stopped()  # the lock stays held: no shutdown begins under the exit


def end_stopped() -> None:
    """After a stop, once the command has unwound and said its line (or :func:`_end` has said it): end
    the process now, with :func:`exit_code`, its children stopped, standard output flushed.

    What the interpreter would still do on its way out after a stop is Prefect's: its services drain
    their queues to the API server, which the same signal took down when the whole group got it, and they
    waited out the deadline (8 s) in half the stops of a ``campflow eval``. The command's own work is
    done by then: the unwinding closed the store and joined the task runner's threads.
    """
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be shown
            pass
    _stop_children()
    os._exit(exit_code())


def _stop_children() -> None:
    """Terminate this process's children (a server it started), so none outlives an abrupt exit."""
    try:
        import psutil
    except ImportError:  # without psutil the children get the signal from the process group, if it was one
        return
    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=1.0)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass


@contextmanager
def starting() -> Iterator[None]:
    """Within the block (a command line's imports, before any work), SIGINT and SIGTERM end the process
    at once with one line: nothing has been done that needs unwinding."""

    def stop_at_once(signum: int, frame: Any) -> None:
        print(f"error: stopped by {signal.Signals(signum).name}: before the command started", file=sys.stderr)
        sys.stderr.flush()
        os._exit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    installed = [s for s, before in previous.items() if before is not signal.SIG_IGN]
    for s in installed:
        signal.signal(s, stop_at_once)
    try:
        yield
    finally:
        for s in installed:
            signal.signal(s, previous[s])


def reset() -> None:
    """Forget a recorded stop and the hooks (for tests that run several commands in one process)."""
    global _received, _exiting
    _received = None
    _exiting = False
    _hooks.clear()
    _last_words.clear()
    _said.clear()
    _deadline.clear()
    _blocks_done.clear()
    _normal_end.clear()


def _is_stop(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a stop raised by a signal handler (ours, Python's SIGINT, Prefect's SIGTERM bridge)."""
    return isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "TerminationSignal"


def _unraisable(unraisable: Any) -> None:
    """After a stop nothing unraisable is reported; a stop swallowed in a finalizer is delivered again."""
    if _received is None:
        _previous_hooks[0](unraisable)
        return
    if _is_stop(unraisable.exc_value) and _depth > 0 and threading.current_thread() is threading.main_thread():
        # a moment later, not from here: a signal sent now would be handled inside this hook (or the
        # rest of the finalizer) and swallowed again
        again = threading.Timer(0.05, os.kill, args=(os.getpid(), signal.Signals[_received].value))
        again.daemon = True
        again.start()


def _thread_exception(args: Any) -> None:
    """After a stop, a thread that dies of it (or of the server it took down) dies quietly."""
    if _received is None:
        _previous_hooks[1](args)


# the hooks in place when the outermost block began: they report as usual until a stop is recorded
_previous_hooks: list[Any] = [sys.unraisablehook, threading.excepthook]


_last_words: list[Callable[[str], str]] = []  # set by own_process()
_deadline = threading.Event()  # set once the deadline of the first stop is running


def own_process(last_words: Callable[[str], str], grace_s: float) -> None:
    """Declare the caller the process's front end (the CLI), which ends with ``last_words(signal_name)``.

    From the moment a stop signal arrives, the process ends within ``grace_s`` seconds (:func:`exit_within`),
    and once the outermost :func:`signals` block has ended (the command's work is done, or it unwound), a
    stop signal ends it at once with its line, instead of Python's default (a ``KeyboardInterrupt``
    traceback from an exit hook, or a silent death by SIGTERM).

    Both are done by a watcher thread that Python's wakeup fd tells of each signal as it arrives: Python
    runs signal handlers in the main thread only, and a main thread blocked in a lock (an exit hook that
    drains a queue to a server the same signal took down) would run them only when the lock is let go,
    since the kernel may hand the signal to any other thread.
    """
    _last_words[:] = [last_words]
    if threading.current_thread() is not threading.main_thread() or _watcher:
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    _watcher.append((reader, writer))
    threading.Thread(target=_watch, args=(reader, grace_s), daemon=True, name="campflow-stop-watcher").start()


_watcher: list[tuple[socket.socket, socket.socket]] = []


def _watch(reader: socket.socket, grace_s: float) -> None:
    """Start the deadline at the first stop signal; past the outermost block, end the process at once."""
    global _arrived
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        for signum in data:
            if signum not in (signal.SIGINT, signal.SIGTERM):
                continue
            _arrived = _arrived or signal.Signals(signum).name
            name = _received or _arrived
            if _depth == 0 and _blocks_done.is_set():
                _exit_now(signum, None)
            if not _deadline.is_set():
                _deadline.set()
                exit_within(grace_s, lambda name=name: _last_words[0](_received or name))


_blocks_done = threading.Event()  # the outermost signals() block has ended


def _exit_now(signum: int, frame: Any) -> None:
    """A signal after the outermost block ended (the process is on its way out): one line, exit now."""
    request_stop(signum)
    name = _received or signal.Signals(signum).name
    _end(lambda: _last_words[0](name) if _last_words else f"error: stopped by {name}")


@contextmanager
def signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM stop the process by unwinding (see the module docstring)."""
    global _depth
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
    if _depth == 0:
        _previous_hooks[:] = [sys.unraisablehook, threading.excepthook]
        sys.unraisablehook, threading.excepthook = _unraisable, _thread_exception
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        ending = _depth == 0 and (_received is not None or bool(_last_words))
        for s in installed:
            signal.signal(s, _exit_now if ending else previous[s])
        if ending:
            _blocks_done.set()
        if _depth == 0 and _received is None:  # after a stop they stay quiet until the process is gone
            sys.unraisablehook, threading.excepthook = _previous_hooks


def unwinding(fn: F) -> F:
    """``fn`` run within :func:`signals` (for flow bodies: put it under ``@flow``)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with signals():
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]
