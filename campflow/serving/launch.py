"""A model server launched for one checkpoint from ``serving.command``, and always stopped again.

The server runs in its own process group (so stopping it stops whatever it spawned) with its output in
a log file. It must not outlive the flow that started it, also when that process is SIGKILLed and no
``finally`` runs: on Linux the child asks the kernel (``prctl(PR_SET_PDEATHSIG)``) for a SIGTERM when
its parent dies. The kernel means the parent *thread*, so the server is spawned from a thread of its
own that lives exactly as long as the server does (a flow's rollout steps run on short-lived threads).
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from campflow.errors import ServingError

HOST = "127.0.0.1"
PLACEHOLDERS = ("path", "base", "adapter", "port", "name", "host", "python")
_PR_SET_PDEATHSIG = 1
# a line that states an exception: "ValueError: ...", also after a logger's "[file.py:12] " prefix
_CAUSE = re.compile(r"(?:^|\] )[A-Z]\w*(?:Error|Exception): ")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    """Whether something already holds ``port`` on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def render_command(template: str, values: dict[str, Any]) -> list[str]:
    """The argv of ``template`` with its placeholders filled in.

    Raises:
        ServingError: a placeholder outside :data:`PLACEHOLDERS`, or a line the shell could not split.
    """
    try:
        line = template.format(**{k: shlex.quote(str(values[k])) for k in PLACEHOLDERS})
        return shlex.split(line)
    except KeyError as exc:
        raise ServingError(
            f"serving.command = {template!r}: unknown placeholder {{{exc.args[0]}}}; "
            f"expected some of {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
        ) from None
    except (ValueError, IndexError) as exc:
        raise ServingError(f"serving.command = {template!r}: not a command line ({exc})") from None


def log_tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` non-empty lines of a log, joined with `` | `` (for a one-line error), after the
    first line that names an exception, if it is not among them (servers end on "see root cause above")."""
    cause = None
    try:
        with path.open(errors="replace") as fh:
            tail: collections.deque[str] = collections.deque(maxlen=lines)
            for ln in fh:
                if ln.strip():
                    tail.append(ln.rstrip())
                    # the first exception named is the root cause (the "$ command" line we wrote is not)
                    if cause is None and not ln.startswith("$ ") and _CAUSE.search(ln.strip()):
                        cause = ln.strip()
    except OSError:
        return ""
    if cause is not None and all(cause != t.strip() for t in tail):
        return f"{cause} | ... | " + " | ".join(tail)
    return " | ".join(tail)


def _die_with_parent(parent: int) -> None:
    """In the forked child, before exec: SIGTERM when the spawning thread dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the process group and `stop` are what is left
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _wait_unreaped(process: subprocess.Popen) -> None:
    """Block until ``process`` exits, leaving it for ``poll()`` to reap.

    ``Popen.wait()`` here would reap it while holding the Popen's wait lock, and a ``poll()`` from another
    thread in that moment answers None: a server killed during a step would pass :meth:`LaunchedServer.check`.
    ``waitid(WNOWAIT)`` waits without reaping, so the exit code stays for ``poll()``.
    """
    if not hasattr(os, "waitid"):  # no waitid (macOS before Python 3.13): a plain wait, and its race
        process.wait()
        return
    try:
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:  # reaped already by poll() or stop()
        pass


class LaunchedServer:
    """One server process. ``start()`` returns once ``GET /v1/models`` lists ``name``; ``stop()`` always ends it.

    Args:
        template: the command line (``serving.command``).
        path: the checkpoint folder; ``base`` and ``adapter`` for a LoRA adapter (else base = path, adapter "").
        name: the served model name.
        log_dir: the log goes to ``<log_dir>/<name>-<port>.log``.
        port: None picks a free one.
        startup_timeout: seconds for the server to answer.
    """

    def __init__(
        self,
        template: str,
        path: str,
        name: str,
        log_dir: Path,
        *,
        port: int | None = None,
        startup_timeout: float = 600.0,
        base: str | None = None,
        adapter: str = "",
    ) -> None:
        if port is not None and port_in_use(port):
            raise ServingError(
                f"serving.port = {port}: port {port} on {HOST} is already in use; free it or "
                "set serving.port: null to pick a free one"
            )
        self.port = port or free_port()
        self.name = name
        self.argv = render_command(
            template,
            {
                "path": path,
                "base": base or path,
                "adapter": adapter,
                "port": self.port,
                "name": name,
                "host": HOST,
                "python": sys.executable,
            },
        )
        log_dir.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        self.log_path = log_dir / f"{safe}-{self.port}.log"
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The server's process id (also its process group id), once started."""
        return self.process.pid if self.process else None

    def start(self) -> LaunchedServer:
        """Spawn the server and wait until it serves ``name``.

        Raises:
            ServingError: the command cannot run, the server exits, or it does not answer in time (the
                message names the log and quotes its last lines); the server is stopped first.
        """
        spawned: dict[str, Any] = {}
        ready = threading.Event()

        def own() -> None:  # the server's parent thread: lives until the server exits
            try:
                with self.log_path.open("ab") as log:
                    log.write(f"$ {shlex.join(self.argv)}\n".encode())
                    log.flush()
                    parent = os.getpid()
                    spawned["process"] = subprocess.Popen(
                        self.argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        preexec_fn=lambda: _die_with_parent(parent),
                    )
            except OSError as exc:
                spawned["error"] = exc
                return
            finally:
                ready.set()
            _wait_unreaped(spawned["process"])

        threading.Thread(target=own, name=f"serve-{self.name}", daemon=True).start()
        ready.wait()
        if "error" in spawned:
            exc = spawned["error"]
            raise ServingError(
                f"cannot start the server `{shlex.join(self.argv)}` (serving.command): "
                f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
            )
        self.process = spawned["process"]
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        assert self.process is not None
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServingError(
                    f"the server `{shlex.join(self.argv)}` exited with code {code} before it "
                    f"answered; log {self.log_path}: {log_tail(self.log_path)}"
                )
            served = self._served_models()
            if served is not None:
                if self.name in served:
                    return
                raise ServingError(
                    f"the server on port {self.port} serves {served}, not {self.name!r}: does "
                    f"serving.command pass --served-model-name {{name}}? log {self.log_path}"
                )
            if time.monotonic() > deadline:
                raise ServingError(
                    f"the server did not answer GET {self.base_url}/models within "
                    f"serving.startup_timeout = {self.startup_timeout:g}s; log {self.log_path}: "
                    f"{log_tail(self.log_path)}"
                )
            time.sleep(0.25)

    def _served_models(self) -> list[str] | None:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as response:
                body = json.loads(response.read())
            return [m.get("id") for m in body.get("data", [])]
        except (OSError, ValueError, AttributeError):  # not listening yet, or not answering properly yet
            return None

    def check(self) -> None:
        """Raise if the server has exited since it started.

        Raises:
            ServingError: naming its exit code and log.
        """
        if self.process is not None and (code := self.process.poll()) is not None:
            raise ServingError(
                f"the server for {self.name} (pid {self.process.pid}) exited with code {code} "
                f"during the run; its episodes are infra_error and the step runs again on "
                f"resume; log {self.log_path}: {log_tail(self.log_path)}"
            )

    def stop(self, grace: float = 15.0) -> None:
        """End the server's process group: SIGTERM, up to ``grace`` seconds, then SIGKILL."""
        process = self.process
        if process is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait)
                # the leader is gone; what it spawned in its group goes too
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                break
            except subprocess.TimeoutExpired:
                continue
