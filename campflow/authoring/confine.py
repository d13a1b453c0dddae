"""The sandboxed process that runs the contract on a module an LLM wrote.

Started as ``python -m campflow.authoring.confine FOLDER`` by :mod:`campflow.authoring.sandbox`, with
FOLDER (a fresh temporary folder holding the module) as its cwd, HOME and TMPDIR, and where ``unshare``
works inside new user, network and PID namespaces. It reads its plan as JSON on stdin, then, before the
module is imported:

- lowers its rlimits: address space (``RLIMIT_AS``), CPU time (``RLIMIT_CPU``; past the soft limit a
  :class:`~campflow.authoring.checks.LimitReached` is raised, past the hard one the kernel kills it),
  file size (``RLIMIT_FSIZE``, a longer write fails with ``EFBIG``), processes (``RLIMIT_NPROC``), core
  files off;
- installs an audit hook (:func:`sys.addaudithook`, which nothing can remove) that refuses sockets and
  name lookups, every way of starting a process, signals to other processes, writes, renames and
  deletions outside FOLDER, native code through ``ctypes``, and raising its own limits. A refusal
  raises :class:`SandboxRefusal` (a ``PermissionError``) in the module and is remembered, so the check
  it happened in fails with what was refused even if the module swallows the exception.

Whatever the module prints goes to stderr; the protocol (one JSON line per event, each carrying the
plan's nonce) is written on a copy of stdout made before the module ran.

An audit hook guards against a model's mistakes (the network call, the stray file, the fork), not
against code written to defeat CPython from inside; the kernel-side layers (namespaces, rlimits, the
parent's wall clock and process-group kill) are what hold regardless.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from campflow.authoring import checks

_REFUSED: list[str] = []  # what the hook refused, in order (read by the checks)
_emit: Callable[[dict[str, Any]], None] = lambda event: None  # noqa: E731  (set by main)

_NETWORK = ("socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname")
_NETWORK += ("socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getnameinfo", "socket.sendto")
_PROCESS = ("os.fork", "os.forkpty", "os.posix_spawn", "os.system", "os.exec", "os.spawn", "subprocess.Popen")
_PROCESS += ("os.startfile", "pty.spawn", "webbrowser.open")
_NATIVE = ("ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "ctypes.addressof")
_LIMITS = ("resource.setrlimit", "resource.prlimit")
# events whose first argument (and second, for the two-path ones) must lie inside the folder
_ONE_PATH = ("os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.utime")
_ONE_PATH += ("os.setxattr", "os.removexattr", "os.chflags", "shutil.rmtree", "shutil.chown")
_TWO_PATHS = ("os.rename", "os.link", "shutil.move")  # both ends: a hard link writes through to its source
_DESTINATION = ("shutil.copyfile", "shutil.copytree", "os.symlink")  # only where it lands; reads are free
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_NATIVE_MODULES = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend"})


class SandboxRefusal(PermissionError):
    """Raised in the module for what the sandbox refuses (a socket, a process, a write outside its folder)."""


class SandboxImportRefusal(ImportError):
    """Importing a native-code bridge (ctypes, cffi) inside the sandbox: an ImportError, so that code which
    treats them as optional carries on without."""


def apply_limits(limits: dict[str, Any]) -> None:
    """Lower this process's rlimits to ``limits`` (the plan's, from :class:`campflow.config.SandboxConfig`)."""
    memory = int(limits["memory_mb"]) * 1024 * 1024
    cpu = int(limits["cpu_s"])
    size = int(limits["file_mb"]) * 1024 * 1024
    for which, soft, hard in (
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, size, size),
        (resource.RLIMIT_NPROC, int(limits["max_processes"]), int(limits["max_processes"])),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(which, (soft, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    signal.signal(signal.SIGXCPU, _cpu_spent)


def _cpu_spent(signum: int, frame: Any) -> None:
    _emit({"limit": "cpu"})  # if the module swallows the exception, the parent still knows why it died
    raise checks.LimitReached("used up its CPU time limit")


def install_guard(folder: Path) -> None:
    """Install the audit hook confining this process to ``folder`` (see the module docstring)."""
    root = os.path.realpath(folder)
    me = os.getpid()

    def inside(path: Any) -> bool:
        if isinstance(path, int):  # a file descriptor: opened through this same hook
            return True
        try:
            resolved = os.path.realpath(os.fsdecode(os.fspath(path)))
        except (TypeError, ValueError):
            return False
        return resolved == root or resolved.startswith(root + os.sep)

    def refuse(what: str) -> None:
        _REFUSED.append(what)
        raise SandboxRefusal(f"the sandbox refused {what}")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(flags, int) and flags & _WRITE_FLAGS) or (
                isinstance(mode, str) and any(c in mode for c in "wax+")
            )
            if writes and not inside(path):
                refuse(f"writing outside its folder ({os.fsdecode(path)})")
        elif event in _NETWORK:
            refuse(f"network access ({event})")
        elif event in _PROCESS:
            refuse(f"starting a process ({event})")
        elif event in _ONE_PATH:
            if args and not inside(args[0]):
                refuse(f"changing files outside its folder ({event} {args[0]})")
        elif event in _TWO_PATHS:
            if not all(inside(a) for a in args[:2]):
                refuse(f"changing files outside its folder ({event} {args[0]} -> {args[1]})")
        elif event in _DESTINATION:
            if not inside(args[1]):  # a symlink's target is checked when something is written through it
                refuse(f"changing files outside its folder ({event} {args[1]})")
        elif event == "sqlite3.connect":
            if args and args[0] not in (":memory:", "") and not inside(args[0]):
                refuse(f"writing outside its folder (sqlite3 {args[0]})")
        elif event in ("os.kill", "os.killpg"):
            if args[0] != me:
                refuse(f"signalling another process ({event} {args[0]})")
        elif event in _NATIVE:
            refuse(f"native code ({event})")
        elif event in _LIMITS:
            refuse(f"changing its resource limits ({event})")
        elif event == "import" and args[0] in _NATIVE_MODULES:
            _REFUSED.append(f"native code (import {args[0]})")
            raise SandboxImportRefusal(f"the sandbox refused importing {args[0]}")

    sys.addaudithook(hook)
    import _posixsubprocess  # subprocess and multiprocessing call it directly; it raises no audit event

    def fork_exec(*args: Any, **kwargs: Any) -> Any:
        refuse("starting a process (_posixsubprocess.fork_exec)")

    _posixsubprocess.fork_exec = fork_exec  # type: ignore[attr-defined]
    if "subprocess" in sys.modules:
        sys.modules["subprocess"]._fork_exec = fork_exec  # type: ignore[attr-defined]


def refused() -> tuple[str, ...]:
    """What the hook has refused so far, in order."""
    return tuple(_REFUSED)


def main() -> None:
    """The sandboxed process: read the plan, confine this process, run the checks, say done."""
    global _emit
    folder = Path(sys.argv[1])
    plan = json.loads(sys.stdin.read())
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the module prints goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    nonce = plan["nonce"]

    def emit(event: dict[str, Any]) -> None:
        protocol.write(json.dumps({"k": nonce, **event}, default=str) + "\n")
        protocol.flush()

    _emit = emit
    apply_limits(plan["limits"])
    os.chdir(folder)
    install_guard(folder)
    checks.run_plan(plan, emit, refused)
    emit({"done": True})


if __name__ == "__main__":
    main()
