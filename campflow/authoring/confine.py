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

A served bootcamp (an MCP server as its tools) needs a process and an event loop, and gets exactly
those (:func:`allow_servers`, called by the checks once the bootcamp is built, with the server commands
its declaration names for the instances checked): a Unix socket may be made (asyncio's self-pipe; it
can neither connect nor bind), a process may start only as campflow's guard
(:mod:`campflow.mcp.guard`, ``python -I -S guard.py``) running one of those commands, its episode's
folder inside FOLDER, and only the process groups so started may be signalled. The soft process limit
rises to the plan's ``served_processes`` (the threads of the event loops and the servers); nothing
else the hook refuses changes. The server itself runs outside the hook, under the same rlimits and
namespaces (no network where they hold), as evaluation will run it.

Whatever the module prints goes to stderr; the protocol (one JSON line per event, each carrying the
plan's nonce) is written on a copy of stdout made before the module ran.

An audit hook guards against a model's mistakes (the network call, the stray file, the fork), not
against code written to defeat CPython from inside; the kernel-side layers (namespaces, rlimits, the
parent's wall clock and process-group kill) are what hold regardless.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from campflow.authoring import checks

_REFUSED: list[str] = []  # what the hook refused, in order (read by the checks)
_SERVERS: list[re.Pattern[str]] = []  # the guard launches allow_servers permits, as whole-argv patterns
_STARTED: set[int] = set()  # the process groups those launches started (each guard leads its own)
_OWN_STEP: list[bool] = []  # set while allow_servers does what the hook refuses the module (see there)
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
    """Lower this process's rlimits to ``limits`` (the plan's, from :class:`campflow.config.SandboxConfig`).

    The process limit's hard value is ``served_processes`` where the plan has one (-1: left as it is),
    for :func:`allow_servers` to raise the soft one to; the soft one is ``max_processes``."""
    memory = int(limits["memory_mb"]) * 1024 * 1024
    cpu = int(limits["cpu_s"])
    size = int(limits["file_mb"]) * 1024 * 1024
    processes = int(limits["max_processes"])
    served = int(limits.get("served_processes", processes))
    ceiling = resource.getrlimit(resource.RLIMIT_NPROC)[1] if served < 0 else max(processes, served)
    for which, soft, hard in (
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, size, size),
        (resource.RLIMIT_NPROC, processes, ceiling),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(which, (soft, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    signal.signal(signal.SIGXCPU, _cpu_spent)


def _cpu_spent(signum: int, frame: Any) -> None:
    _emit({"limit": "cpu"})  # if the module swallows the exception, the parent still knows why it died
    raise checks.LimitReached("used up its CPU time limit")


def allow_servers(commands: Sequence[Sequence[str]], folder: Path) -> None:
    """Let the guard start each of ``commands`` (argv templates: ``{workdir}`` an episode's folder inside
    ``folder``, ``{seed}`` a number) and raise the soft process limit to the hard one; see the module
    docstring. Called by the checks once a served bootcamp is built."""
    from campflow.mcp.server import GUARD

    # an episode's folder as campflow.mcp.server.open_server makes it, under TMPDIR (this folder)
    roots = "|".join(re.escape(r + os.sep) for r in {str(folder), os.path.realpath(folder)})
    workdir = f"(?:{roots})campflow-mcp-[a-z0-9_]+/work"
    launcher = [sys.executable, "-I", "-S", str(GUARD)]
    for command in commands:
        parts = []
        for arg in [*launcher, *command]:
            pattern = re.escape(arg).replace(re.escape("{workdir}"), workdir)
            parts.append(pattern.replace(re.escape("{seed}"), "-?[0-9]+"))
        _SERVERS.append(re.compile("\\x00".join(parts)))
    _OWN_STEP.append(True)  # no thread of the module's runs meanwhile: the process limit allowed none so far
    try:
        # the MCP client, imported here: its auth support loads cryptography's native bindings
        import mcp.client.stdio  # noqa: F401
        from mcp import Client  # noqa: F401

        resource.setrlimit(resource.RLIMIT_NPROC, (resource.getrlimit(resource.RLIMIT_NPROC)[1],) * 2)
    finally:
        _OWN_STEP.clear()


def _server_launch(argv: Any) -> bool:
    """Whether ``argv`` is the guard starting a server :func:`allow_servers` permitted."""
    try:
        joined = "\x00".join(os.fsdecode(a) for a in argv)
    except TypeError:
        return False
    return any(p.fullmatch(joined) for p in _SERVERS)


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
        elif event == "socket.__new__" and args[1] == socket.AF_UNIX:
            pass  # an event loop's self-pipe (socketpair); connecting or binding it is still refused
        elif event in _NETWORK:
            refuse(f"network access ({event})")
        elif event == "subprocess.Popen" and _server_launch(args[1]):
            pass  # the guard starting a declared server (allow_servers); the start itself is checked again
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
            if args[0] != me and args[0] not in _STARTED:
                refuse(f"signalling another process ({event} {args[0]})")
        elif event in _NATIVE:
            refuse(f"native code ({event})")
        elif event in _LIMITS and not _OWN_STEP:
            refuse(f"changing its resource limits ({event})")
        elif event == "import" and args[0] in _NATIVE_MODULES and not _OWN_STEP:
            _REFUSED.append(f"native code (import {args[0]})")
            raise SandboxImportRefusal(f"the sandbox refused importing {args[0]}")

    sys.addaudithook(hook)
    import _posixsubprocess  # subprocess and multiprocessing call it directly; it raises no audit event

    started = _posixsubprocess.fork_exec

    def fork_exec(*args: Any, **kwargs: Any) -> Any:
        if not (args and _server_launch(args[0])):
            refuse("starting a process (_posixsubprocess.fork_exec)")
        pid = started(*args, **kwargs)
        _STARTED.add(pid)  # the guard starts in a session of its own: its pid is its group's id
        return pid

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
    checks.run_plan(plan, emit, refused, permit_servers=lambda commands: allow_servers(commands, folder))
    emit({"done": True})


if __name__ == "__main__":
    main()
