"""The workspace lock: one improvement cycle at a time per workspace.

``campflow improve`` (and ``watch`` when it starts a cycle) holds the lock for the whole run. A second
one on the same workspace is refused in one line naming the holder::

    cycle cycle-20261202-061003-1a2b has held this workspace since 2026-12-02 06:10:03 UTC (pid 4242
    on host gpu-7); `campflow improve --resume` continues it once that process has stopped

The lock is the kernel's: an exclusive ``flock`` on ``<store>.lock`` beside the store, held through an
open file for as long as the cycle runs. The kernel releases it when the holding process ends, however
it ends (SIGKILL, a crash, a node reboot), so a lock whose holder is gone is never mistaken for a held
one, and no timeout is needed to decide that a holder is dead. Who holds it is recorded beside it in
``<store>.lock.json`` (cycle id, pid, host, since when), written atomically (a temporary file renamed
into place) so a reader never sees half a record; a record left by a process that died without
releasing is how a takeover is noticed and said.

Within one process the lock is re-entrant: the CLI takes it before Prefect starts (a refusal costs no
Prefect start-up) and the flow it runs takes it again (so a deployment's run is locked too).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from campflow.errors import CampflowError


class WorkspaceBusyError(CampflowError):
    """Another process holds the workspace's cycle lock."""

    exit_code = 3

    def __init__(self, message: str, holder: Holder | None) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a workspace's lock."""

    cycle_id: str | None
    pid: int
    host: str
    since: str  # ISO 8601, UTC

    def describe(self) -> str:
        """``cycle X (pid P on host H, since T)`` in words."""
        who = f"cycle {self.cycle_id}" if self.cycle_id else "a cycle being started"
        return f"{who} (pid {self.pid} on host {self.host}, since {_shown(self.since)})"


def lock_file(db_path: Path) -> Path:
    """The file whose ``flock`` is the lock."""
    return db_path.with_name(db_path.name + ".lock")


def record_file(db_path: Path) -> Path:
    """The holder's record beside the lock."""
    return db_path.with_name(db_path.name + ".lock.json")


def read_holder(db_path: Path) -> Holder | None:
    """The last recorded holder (the current one while the lock is held), or None."""
    try:
        data = json.loads(record_file(Path(db_path)).read_text())
        return Holder(data.get("cycle_id"), int(data["pid"]), str(data["host"]), str(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def current_holder(db_path: Path) -> Holder | None:
    """Who holds the lock now, or None when it is free (a record left by a dead holder counts as free)."""
    path = Path(db_path).absolute()
    with _guard:
        if path in _held:
            return _held[path].holder
    if not lock_file(path).exists():
        return None
    fd = os.open(lock_file(path), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(path) or Holder(None, 0, "unknown", _now())
    finally:
        os.close(fd)  # closing releases a lock it took
    return None


@dataclass
class _Held:
    fd: int
    holder: Holder
    depth: int


_held: dict[Path, _Held] = {}
_guard = threading.Lock()


class WorkspaceLock:
    """The cycle lock of the workspace whose store is ``db_path``; use as a context manager.

    Args:
        db_path: the workspace's store file; the lock lies beside it.
        cycle_id: the cycle that takes it, if known yet (:meth:`name` records it later).
    """

    def __init__(self, db_path: str | Path, cycle_id: str | None = None) -> None:
        self.db_path = Path(db_path).absolute()
        self.cycle_id = cycle_id
        self.taken_over: Holder | None = None  # the dead holder whose lock this one took over

    def acquire(self) -> WorkspaceLock:
        """Take the lock, or raise :class:`WorkspaceBusyError` naming its holder. Never waits.

        A record left by a holder that died is taken over (:attr:`taken_over` names it)."""
        with _guard:
            held = _held.get(self.db_path)
            if held is not None:  # this process holds it already (the CLI, then its flow)
                held.depth += 1
                if self.cycle_id and held.holder.cycle_id != self.cycle_id:
                    self._record(held, self.cycle_id)
                return self
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_file(self.db_path), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise self._busy() from None
            except BaseException:
                os.close(fd)
                raise
            self.taken_over = read_holder(self.db_path)  # a record under a free lock: its holder died
            held = _Held(fd, Holder(self.cycle_id, os.getpid(), socket.gethostname(), _now()), 1)
            _held[self.db_path] = held
            self._record(held, self.cycle_id)
        return self

    def name(self, cycle_id: str) -> None:
        """Record ``cycle_id`` as the holder's cycle (a resumed cycle's id is known only once it is read)."""
        with _guard:
            held = _held.get(self.db_path)
            if held is not None:
                self._record(held, cycle_id)

    def release(self) -> None:
        """Let go (the outermost release in this process frees the lock and removes the record)."""
        with _guard:
            held = _held.get(self.db_path)
            if held is None:
                return
            held.depth -= 1
            if held.depth > 0:
                return
            del _held[self.db_path]
            record_file(self.db_path).unlink(missing_ok=True)  # before the lock goes: no stale record
            os.close(held.fd)

    def __enter__(self) -> WorkspaceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _record(self, held: _Held, cycle_id: str | None) -> None:
        held.holder = Holder(cycle_id, held.holder.pid, held.holder.host, held.holder.since)
        target = record_file(self.db_path)
        scratch = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        scratch.write_text(json.dumps(asdict(held.holder)))
        os.replace(scratch, target)

    def _busy(self) -> WorkspaceBusyError:
        holder = read_holder(self.db_path)
        if holder is None:  # the holder is between taking the lock and writing its record
            return WorkspaceBusyError(
                f"another process holds this workspace ({lock_file(self.db_path)}); one cycle runs at a time", None
            )
        message = _refusal(holder)
        return WorkspaceBusyError(message, holder)


def _refusal(holder: Holder) -> str:
    who = f"cycle {holder.cycle_id}" if holder.cycle_id else "a cycle being started"
    gone = ""
    if holder.host == socket.gethostname() and not _alive(holder.pid):
        # fork-without-exec children inherit the open file, and with it the lock
        gone = f"; pid {holder.pid} has ended but a process it started still holds the lock"
    return (
        f"{who} has held this workspace since {_shown(holder.since)} (pid {holder.pid} on host {holder.host}){gone}; "
        "`campflow improve --resume` continues it once that process has stopped"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _shown(iso: str) -> str:
    try:
        return dt.datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return iso
