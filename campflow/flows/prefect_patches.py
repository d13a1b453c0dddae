"""Two changes to Prefect's behaviour on a stop, each made when Prefect imports the module it concerns
(importing Prefect's server costs seconds that a flow run against a real server does not need, and
``campflow sql`` imports none of Prefect).

**The ephemeral API server, started deaf to Ctrl-C: the command that started it stops it.** Without a
``PREFECT_API_URL`` Prefect starts its API server as a child process (uvicorn) that shares the command's
terminal and process group, so a Ctrl-C reaches both. If it lands while the server is still importing,
the server prints a ``KeyboardInterrupt`` traceback into the command's stderr; once it is down, the
command's Prefect client retries it (the minutes-long hang a stop once had). So the server is started
with SIGINT blocked (a blocked signal stays blocked across ``exec``): a Ctrl-C stops the command, which
stops its server on the way out (Prefect's exit hook, or :func:`campflow.stopping.exit_within`), and
SIGTERM still ends it at once.

**A SIGTERM is recorded before Prefect's own handler acts on it.** Prefect installs its SIGTERM handler
around each flow run, so between the run's start and its body's :func:`campflow.stopping.signals` block
(and after it, while the run is torn down) a SIGTERM reaches Prefect's handler, not ours: its engine
logged "Crash detected! Execution was aborted by a termination signal." at ERROR before the stop was
recorded and the output quieted, then handed the signal back to ours. The handler Prefect installs is
looked up by name when a run starts; wrapped, it records the stop first and then raises as before.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import signal
import sys
from collections.abc import Callable
from typing import Any

from campflow import stopping


def _deaf_to_ctrl_c(start_process: Any) -> Any:
    @functools.wraps(start_process)
    def start(self: Any) -> Any:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return start_process(self)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    start.campflow_patched = True  # type: ignore[attr-defined]
    return start


def _patch_server(module: Any) -> None:
    server = module.SubprocessASGIServer
    if not getattr(server._run_uvicorn_command, "campflow_patched", False):
        server._run_uvicorn_command = _deaf_to_ctrl_c(server._run_uvicorn_command)


def _patch_engine(module: Any) -> None:
    handler = getattr(module, "_prefect_sigterm_handler", None)
    if not callable(handler) or getattr(handler, "campflow_patched", False):
        return  # a Prefect without it (renamed): its crash line may show before ours, nothing worse

    @functools.wraps(handler)
    def stop_first(signum: int, frame: Any) -> Any:
        stopping.request_stop(signum)
        return handler(signum, frame)

    stop_first.campflow_patched = True  # type: ignore[attr-defined]
    module._prefect_sigterm_handler = stop_first


PATCHES: dict[str, Callable[[Any], None]] = {
    "prefect.server.api.server": _patch_server,
    "prefect.utilities.engine": _patch_engine,
}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a module of :data:`PATCHES` right after Prefect imports it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Make both changes (see the module docstring), now or when Prefect imports the modules."""
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
        elif not any(isinstance(f, _PatchOnImport) and f.name == name for f in sys.meta_path):
            sys.meta_path.insert(0, _PatchOnImport(name))
