"""Run an MCP server command so that it dies with the process that started it (Linux).

``python -I -S guard.py CMD ARGS...``: the stdio transport starts this script in a new session (its own
process group); it asks the kernel to send it SIGTERM when its parent dies (``PR_SET_PDEATHSIG``),
runs the server as its child with the same stdin, stdout and stderr, and on SIGTERM kills its whole
process group, the server and anything the server started. So a flow killed with SIGKILL, which runs no
cleanup, leaves no server behind, even one that hangs and never reads the end of its stdin.

Standalone on purpose (no campflow imports, started with ``-S``): it runs once per episode, and its start-up
is part of every episode's cost (benchmarks/bench_mcp.py measures it).
"""

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


_SERVER: list[int] = []  # the server's pid, once started


def _kill_group(signum: int, frame: object) -> None:
    for pid in _SERVER:  # killed and reaped here first: where this script's parent is a PID namespace's
        try:  # init (the authoring sandbox), an orphaned zombie would keep the group alive
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    os.killpg(0, signal.SIGKILL)  # the server's children and this script


def main() -> int:
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _kill_group)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        _kill_group(signal.SIGTERM, None)
    try:
        child = subprocess.Popen(sys.argv[1:])
    except OSError as exc:
        print(f"cannot start the MCP server {sys.argv[1]!r}: {exc}", file=sys.stderr)
        return 127
    _SERVER.append(child.pid)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
