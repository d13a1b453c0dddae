"""The verifiers environment's process, seen from campflow: start it, ask it, share it, stop it.

The environment runs in :mod:`campflow.sources.verifiers_bridge` under its own Python (``make
verifiers`` builds ``.venv-verifiers``; ``CAMPFLOW_VERIFIERS_PYTHON`` or the import's ``--python``
names another). One process serves every episode of an environment in a campflow process: requests
carry ids and are answered as they finish, so episodes in flight on any thread or event loop share it.
A process that died is started again on the next request.

Failures: a process that will not start, dies, or answers past ``timeout`` raises
:class:`~campflow.errors.ToolServerError` (the episode is ``infra_error``); an op the environment
refuses raises :class:`BridgeRefusal` carrying its one-line reason.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import itertools
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from campflow.errors import ToolServerError

BRIDGE = Path(__file__).with_name("verifiers_bridge.py")
REPO_VENV = Path(__file__).resolve().parents[2] / ".venv-verifiers"
#: seconds for the environment's process to import verifiers and load the environment
START_SECONDS = 300.0
#: seconds for one request (a tool call, a rubric)
REQUEST_SECONDS = 120.0


class BridgeRefusal(ToolServerError):
    """The environment's process answered a request with an error (its message is the reason)."""


def verifiers_python(python: str | None = None) -> str:
    """The Python that runs verifiers environments: ``python``, ``CAMPFLOW_VERIFIERS_PYTHON``, or
    ``.venv-verifiers`` beside campflow's checkout.

    Raises:
        ToolServerError: none of them exists (``make verifiers`` builds the last).
    """
    chosen = python or os.environ.get("CAMPFLOW_VERIFIERS_PYTHON") or str(REPO_VENV / "bin" / "python")
    if not Path(chosen).exists():
        raise ToolServerError(
            f"no Python for verifiers environments at {chosen}; run `make verifiers` (it builds .venv-verifiers) "
            "or name one with --python / CAMPFLOW_VERIFIERS_PYTHON"
        )
    return chosen


class EnvironmentProcess:
    """One running environment (``source`` loaded with ``kwargs``) answering JSON-line requests.

    Args:
        source: an installed environment module, or a ``.py`` file with ``load_environment``.
        kwargs: the keyword arguments of ``load_environment``.
        python: the interpreter (see :func:`verifiers_python`).
        hash_seed: ``PYTHONHASHSEED`` of the process (the import's determinism check runs two).

    Raises:
        ToolServerError: the process would not start or load the environment (BridgeRefusal: the
            environment itself failed to load, with its reason).
    """

    def __init__(
        self, source: str, kwargs: dict[str, Any], python: str | None = None, hash_seed: str | None = None
    ) -> None:
        self.source, self.kwargs = source, kwargs
        env = dict(os.environ)
        if hash_seed is not None:
            env["PYTHONHASHSEED"] = hash_seed
        env.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
        self._log = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [verifiers_python(python), str(BRIDGE), source, json.dumps(kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future] = {0: concurrent.futures.Future()}
        self._lock = threading.Lock()
        self._ended = False  # the process's output closed (set by the reader, under the lock)
        threading.Thread(target=self._read, name="campflow-verifiers-reader", daemon=True).start()
        try:
            self._pending_result(self._pending[0], START_SECONDS, "start")
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        """The process id."""
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """Whether the process is still running (its output not closed: a reader thread reaping it holds the
        Popen's lock, and a ``poll()`` in that moment answers None for a process that is gone)."""
        return not self._ended and self._proc.poll() is None

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                future = self._pending.pop(reply.get("id"), None)
            if future is not None and not future.done():
                if "error" in reply:
                    future.set_exception(BridgeRefusal(f"{self.source}: {reply['error']}"))
                else:
                    future.set_result(reply.get("result"))
        with self._lock:  # from here on no request is taken: one sent now would wait for its timeout
            self._ended = True
            pending, self._pending = list(self._pending.values()), {}
        self._proc.wait()
        for future in pending:
            if not future.done():
                future.set_exception(self._exited())

    def _exited(self) -> ToolServerError:
        """The error of a request the ended process cannot answer, with its exit code (its output closed,
        so it is ending: the wait is for the reader's reap, or a process that closed its output early)."""
        try:
            code: int | None = self._proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        return ToolServerError(f"verifiers environment {self.source} exited ({code}): {self.log_tail()}")

    def log_tail(self, lines: int = 6) -> str:
        """The last lines the process wrote to stderr, joined (why it failed)."""
        try:
            self._log.flush()
            self._log.seek(0)
            tail = [line.rstrip() for line in self._log.read().splitlines() if line.strip()][-lines:]
        except (OSError, ValueError):
            return ""
        return " | ".join(tail)[-1200:]

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future:
        """Send one request; its future holds the result."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            # ended: its reader has answered every pending request, or someone's poll() reaped it before the
            # reader saw its output close (poll() cannot be wrong here: the reader marks _ended before it reaps)
            ended = not self.alive
            if not ended:
                rid = next(self._ids)
                self._pending[rid] = future
        if ended:
            future.set_exception(self._exited())
            return future
        try:
            assert self._proc.stdin is not None
            with self._lock:
                self._proc.stdin.write(json.dumps({"id": rid, "op": op, **args}) + "\n")
                self._proc.stdin.flush()
        except (OSError, ValueError) as exc:
            with self._lock:
                self._pending.pop(rid, None)
            future.set_exception(ToolServerError(f"verifiers environment {self.source} is not running: {exc}"))
        return future

    def request(self, op: str, timeout: float = REQUEST_SECONDS, **args: Any) -> Any:
        """Send one request and wait for its result (from synchronous code)."""
        return self._pending_result(self.submit(op, **args), timeout, op)

    async def arequest(self, op: str, timeout: float = REQUEST_SECONDS, **args: Any) -> Any:
        """Send one request and await its result (from any event loop)."""
        future = self.submit(op, **args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            raise ToolServerError(f"verifiers environment {self.source}: {op} took over {timeout:g} s") from None

    def _pending_result(self, future: concurrent.futures.Future, timeout: float, op: str) -> Any:
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise ToolServerError(f"verifiers environment {self.source}: {op} took over {timeout:g} s") from None

    def close(self) -> None:
        """Stop the process (its stdin closes; killed if it does not end at once)."""
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_SHARED: dict[str, EnvironmentProcess] = {}
_SHARED_LOCK = threading.Lock()


def shared_process(source: str, kwargs: dict[str, Any], python: str | None = None) -> EnvironmentProcess:
    """The process of this campflow process for (source, kwargs, python), started (again) where needed."""
    key = json.dumps([source, kwargs, python], sort_keys=True)
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None or not found.alive:
            found = _SHARED[key] = EnvironmentProcess(source, kwargs, python)
        return found


@atexit.register
def _stop_all() -> None:
    with _SHARED_LOCK:
        for process in _SHARED.values():
            process.close()
        _SHARED.clear()
