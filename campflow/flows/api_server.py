"""Prefect's ephemeral API server, started deaf to Ctrl-C: the command that started it stops it.

Without a ``PREFECT_API_URL`` Prefect starts its API server as a child process (uvicorn) that shares the
command's terminal and process group, so a Ctrl-C reaches both. If it lands while the server is still
importing, the server prints a ``KeyboardInterrupt`` traceback into the command's stderr; once it is
down, the command's Prefect client retries it (the minutes-long hang a stop once had). So the server is
started with SIGINT blocked (a blocked signal stays blocked across ``exec``): a Ctrl-C stops the command,
which stops its server on the way out (Prefect's exit hook, or :func:`campflow.stopping.exit_within`),
and SIGTERM still ends it at once. The class is patched when Prefect imports it, not before: importing
Prefect's server costs seconds that a flow run against a real server does not need.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import signal
import sys
from typing import Any

MODULE = "prefect.server.api.server"


def _deaf_to_ctrl_c(start_process: Any) -> Any:
    @functools.wraps(start_process)
    def start(self: Any) -> Any:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return start_process(self)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    start.campflow_deaf = True  # type: ignore[attr-defined]
    return start


def _patch(module: Any) -> None:
    server = module.SubprocessASGIServer
    if not getattr(server._run_uvicorn_command, "campflow_deaf", False):
        server._run_uvicorn_command = _deaf_to_ctrl_c(server._run_uvicorn_command)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches :data:`MODULE` right after Prefect imports it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Start every ephemeral API server of this process with SIGINT blocked (see the module docstring)."""
    if MODULE in sys.modules:
        _patch(sys.modules[MODULE])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
