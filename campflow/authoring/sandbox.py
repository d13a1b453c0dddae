"""Starting the sandboxed process (:mod:`campflow.authoring.confine`) on a module, and reading what it says.

Each run gets a fresh folder (made under ``author.sandbox.root``, removed afterwards) holding only the
module; the process starts there in a new session, with an environment built from nothing (PATH, the
Python path, HOME and TMPDIR set to its folder, the given hash seed; no API key or other variable of
this process), and where ``unshare -rnp`` works (probed once per process: user namespaces may be off)
inside new user, network and PID namespaces: no interface but a loopback that is down, and every
process it might start dies with it. The parent holds the wall clock: past ``wall_s`` the whole
process group is killed, and so is whatever is left of it when the process ends on its own.

What it found comes back as events on its stdout (one JSON line each, with the plan's nonce: anything
else on that pipe is ignored); its stderr goes to a file of this process, whose tail explains a death.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.authoring.checks import MODULE_FILE
from campflow.config import SandboxConfig
from campflow.errors import AuthoringError

UNSHARE = ("unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child")
#: RLIMIT_NPROC a served bootcamp's check may rise to (its event loops' threads, the guards and servers a
#: few at a time, their threads); counted inside the user namespace, so only where namespaces hold
SERVED_PROCESSES = 128
_CHILD = "campflow.authoring.confine"
MAX_LINE = 1 << 20  # a longer protocol line is not ours
MAX_PROTOCOL = 64 << 20  # bytes read from the protocol pipe before the process is stopped


@dataclass
class ChildRun:
    """What one sandboxed process said and how it ended.

    Attributes:
        events: its protocol events, in order (the nonce removed).
        ended: None when it said it was done; else why it stopped early, in words.
        stderr_tail: the end of what it wrote to stderr.
        isolation: the layers it ran under (``namespaces``, ``rlimits``, ``audit hook``).
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    ended: str | None = None
    stderr_tail: str = ""
    isolation: tuple[str, ...] = ()


@functools.cache
def namespaces_available() -> bool:
    """Whether ``unshare -rnp`` can start a process here (user namespaces allowed, the tool installed)."""
    if shutil.which(UNSHARE[0]) is None:
        return False
    try:
        done = subprocess.run([*UNSHARE, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def isolation_prefix(limits: SandboxConfig) -> list[str]:
    """The command the sandboxed Python runs under: ``unshare ...`` where the config and this machine
    allow it, else nothing.

    Raises:
        AuthoringError: ``namespaces`` is ``on`` and ``unshare -rnp`` does not work here.
    """
    if limits.namespaces == "off":
        return []
    if namespaces_available():
        return list(UNSHARE)
    if limits.namespaces == "on":
        raise AuthoringError(
            "author.sandbox.namespaces is on, but `unshare -rnp` does not work here (no unshare, or user "
            "namespaces are off); set it to auto to rely on the audit hook and rlimits alone"
        )
    return []


@contextmanager
def sandbox_folder(source: str, limits: SandboxConfig) -> Iterator[Path]:
    """A fresh folder holding ``source`` as the module, removed afterwards whatever the module left there."""
    root = limits.root
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="campflow-sandbox-", dir=root))
    try:
        (folder / MODULE_FILE).write_text(source, encoding="utf-8")
        yield folder
    finally:
        if sys.version_info >= (3, 12):
            shutil.rmtree(folder, onexc=_writable_then_retry)
        else:  # the same handler under its older name
            shutil.rmtree(folder, onerror=_writable_then_retry)


def run_confined(source: str, plan: dict[str, Any], limits: SandboxConfig, *, hash_seed: str = "1") -> ChildRun:
    """Run the checks of ``plan`` on ``source`` in a sandboxed process; see the module docstring."""
    prefix = isolation_prefix(limits)
    nonce = secrets.token_hex(8)
    plan = {**plan, "nonce": nonce, "limits": _limits(limits, namespaces=bool(prefix))}
    run = ChildRun(isolation=(*(["namespaces"] if prefix else []), "rlimits", "audit hook"))
    with sandbox_folder(source, limits) as folder, tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-s", "-B", "-m", _CHILD, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=folder,
            env=_environment(folder, hash_seed),
            start_new_session=True,  # its own process group, killed whole at the end
        )
        lines: queue.Queue[bytes | None] = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
        reader.start()
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(plan).encode())
                proc.stdin.close()
            except BrokenPipeError:  # it died before reading its plan; stderr says why
                pass
            run.ended = _collect(lines, run.events, nonce, time.monotonic() + limits.wall_s, limits)
        finally:
            _kill_group(proc)
            reader.join(timeout=10)
        stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, stderr.tell() - 4000))
        run.stderr_tail = stderr.read().decode("utf-8", "replace").strip()
    if run.ended is not None and run.ended.startswith("ended without"):
        tail = " ".join(run.stderr_tail.split()[-40:])
        run.ended = f"{run.ended} (exit {proc.returncode})" + (f": {tail}" if tail else "")
    return run


def _collect(
    lines: queue.Queue[bytes | None], events: list[dict[str, Any]], nonce: str, deadline: float, limits: SandboxConfig
) -> str | None:
    """Read events until the process says done (None), dies, or passes the deadline (why, in words)."""
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return f"ran past its wall-clock limit of {limits.wall_s:g} s and was killed"
        if line is None:
            if any(e.get("limit") == "cpu" for e in events):
                return f"used up its CPU time limit of {limits.cpu_s} s and was killed"
            return "ended without finishing its checks"
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.pop("k", None) != nonce:
            continue  # not written by the checks
        events.append(event)
        if event.get("done"):
            return None


def _read_lines(stream: Any, lines: queue.Queue[bytes | None]) -> None:
    total = 0
    try:
        while total < MAX_PROTOCOL:
            line = stream.readline(MAX_LINE)
            if not line:
                break
            total += len(line)
            lines.put(line)
    finally:
        lines.put(None)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the process and anything it left behind in its group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _environment(folder: Path, hash_seed: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),  # the modules this process found
        "PYTHONHASHSEED": hash_seed,
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(folder),
        "TMPDIR": str(folder),
        "LANG": "C.UTF-8",
        # numeric libraries start a thread pool on import; the sandbox allows no threads
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _limits(limits: SandboxConfig, *, namespaces: bool) -> dict[str, Any]:
    return {
        "memory_mb": limits.memory_mb,
        "cpu_s": limits.cpu_s,
        "file_mb": limits.file_mb,
        "max_processes": limits.max_processes,
        # outside a user namespace the count is the whole user's on this host: no number fits, leave it
        "served_processes": max(SERVED_PROCESSES, limits.max_processes) if namespaces else -1,
    }


def _writable_then_retry(function: Any, path: str, _: Any) -> None:
    """rmtree's error handler: a module may leave read-only files or folders behind."""
    try:
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
        os.chmod(path, stat.S_IRWXU)
        function(path)
    except OSError:
        pass
