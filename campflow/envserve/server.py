"""``campflow env serve``: one bootcamp behind OpenEnv's HTTP and WebSocket server.

The app is OpenEnv's own (``openenv.core.env_server.create_app``): ``/ws`` for the persistent sessions
its clients (``EnvClient``, ``GenericEnvClient``) open, one :class:`BootcampEnvironment` each, plus
``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata`` and ``/health``. Uvicorn runs it on a
socket bound here first, so a busy port is one clear line before anything starts, and ``--port 0``
takes a free port and says which.
"""

from __future__ import annotations

import errno
import functools
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from campflow.errors import CampflowError, EnvServerError
from campflow.rollout.engine import RolloutSettings

if TYPE_CHECKING:
    from campflow.bootcamps.base import Bootcamp
    from campflow.config import CampflowConfig
    from campflow.envserve.stream import TrainStream


@dataclass(frozen=True)
class Served:
    """Where a bootcamp is being served, for the line that says so."""

    bootcamp: str
    levels: list[int]
    host: str
    port: int
    sessions: int

    @property
    def url(self) -> str:
        """The base URL OpenEnv's clients take (``EnvClient(base_url=...)``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def train_stream(cfg: CampflowConfig, name: str, level: int | None = None, seed: int = 0) -> TrainStream:
    """The train-split instances ``name`` is served from, in the workspace ``cfg`` names.

    The held-out ids are the store's eval and probe instances of ``name``, read once (a workspace with
    no store has none recorded; the eval split's seed range is excluded either way).

    Raises:
        UnknownBootcampError: ``name`` is neither built in nor imported or authored in the workspace.
        InvalidParamsError: ``level`` is not one of the bootcamp's levels.
    """
    from campflow.envserve.stream import TrainStream
    from campflow.storage.workspace import Workspace

    ws = Workspace.from_config(cfg)
    bootcamp = ws.bootcamp(name)
    levels = sorted(bootcamp.levels) if level is None else [bootcamp.params(level).level]
    held_out: set[str] = set()
    if ws.db_path.exists():
        held_out = ws.store.eval_ids(name) | ws.store.probe_ids(name)
    return TrainStream(bootcamp, levels, held_out, start=seed)


def build_app(stream: TrainStream, settings: RolloutSettings = RolloutSettings(), sessions: int = 64) -> Any:
    """OpenEnv's FastAPI app serving ``stream``'s bootcamp, at most ``sessions`` WebSocket sessions at once."""
    from openenv.core.env_server import create_app

    from campflow.envserve.environment import BootcampAction, BootcampEnvironment, BootcampObservation

    _check_setup(stream.bootcamp, stream, settings)
    factory = functools.partial(BootcampEnvironment, stream.bootcamp, stream, settings)
    app = create_app(
        factory, BootcampAction, BootcampObservation, env_name=stream.bootcamp.name, max_concurrent_envs=sessions
    )
    app.add_exception_handler(CampflowError, _refused)  # the WebSocket path already answers them as errors
    return app


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (``port`` 0: a free one).

    Raises:
        EnvServerError: the port is in use, or the host cannot be listened on.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise EnvServerError(
            f"--host {host!r} cannot be resolved ({exc.strerror}); expected an address such as 127.0.0.1"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not past a live listener: only TIME_WAIT
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EnvServerError(
                f"port {port} on {host} is in use; choose another with --port (0 picks a free one)"
            ) from None
        raise EnvServerError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def serve(
    cfg: CampflowConfig,
    name: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    level: int | None = None,
    sessions: int = 64,
    seed: int = 0,
    on_ready: Callable[[Served], None] | None = None,
) -> None:
    """Serve bootcamp ``name`` as an OpenEnv environment until the process is stopped.

    Args:
        cfg: the config: its workspace resolves ``name`` and holds the held-out ids; ``rollout`` sets
            the episode limits, as in evaluation.
        level: serve only this level (default: every level, in rotation by seed).
        sessions: the most WebSocket sessions at once (one per concurrent rollout of a trainer).
        seed: the seed of the first reset that names none.
        on_ready: called once the server accepts connections.

    Raises:
        UnknownBootcampError, InvalidParamsError, EnvServerError: before anything is served.
    """
    stream = train_stream(cfg, name, level, seed)
    sock = listen(host, port)  # before the app: a busy port is refused without waiting for OpenEnv's import
    try:
        app = build_app(stream, RolloutSettings.from_config(cfg.rollout), sessions)
        served = Served(name, stream.levels, host, sock.getsockname()[1], sessions)

        run_until_stopped(_CleanDisconnects(app), sock, lambda: on_ready(served) if on_ready is not None else None)
    finally:
        sock.close()


GRACEFUL_S = 4.0  # open sessions at a stop: within the CLI's grace (campflow.cli.STOP_GRACE_S, 8 s)


def run_until_stopped(app: Any, sock: socket.socket, on_started: Callable[[], None]) -> None:
    """Run ``app`` under uvicorn on ``sock`` until SIGINT or SIGTERM, then raise :class:`~campflow.stopping.Stopped`.

    Uvicorn shuts down gracefully on either signal, then sends the signal to the process once more
    (``signal.raise_signal``) for the handler it had replaced. That second delivery is a second signal to
    the CLI's stop watcher, which it may read only after the command has ended as a server is meant to end,
    and take for a late signal: the process then said "error: stopped by SIGTERM" and exited 143 or 0,
    whichever thread won. Here the stop is raised as the exception the CLI's handler would raise, and the
    signal is delivered once. Open sessions get ``GRACEFUL_S`` to end before they are cancelled, so a
    client that never closes its session cannot hold the process past the CLI's grace.

    ``on_started`` is called once the server accepts connections.
    """
    import contextlib
    import signal
    import threading

    import uvicorn

    from campflow import stopping

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                on_started()

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def]
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            before = {s: signal.signal(s, self.handle_exit) for s in stopping.SIGNALS}
            try:
                yield
            finally:
                for s, handler in before.items():
                    signal.signal(s, handler)
            if self._captured_signals:
                stopping.request_stop(self._captured_signals[0])
                raise stopping.Stopped(self._captured_signals[0])

    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=GRACEFUL_S)
    _Server(config).run(sockets=[sock])


class _CleanDisconnects:
    """OpenEnv's app, less the traceback uvicorn logs each time a client ends its session.

    openenv-core 0.3.0 closes the WebSocket again after the client's ``close`` message and guards that
    second close against ``RuntimeError`` only, while Starlette raises ``WebSocketDisconnect``
    (huggingface/OpenEnv#1159): every session that ends cleanly would log an "Exception in ASGI
    application". The session is over by then, so the exception says nothing.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass


async def _refused(request: Any, exc: Exception) -> Any:
    """A request campflow refuses on HTTP (``/reset`` with a level not served): 422 and the one line."""
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=422, content={"detail": str(exc)})


def _check_setup(bootcamp: Bootcamp, stream: TrainStream, settings: RolloutSettings) -> None:
    """Refuse to serve a bootcamp that cannot set up an episode (a broken import, a bad level)."""
    from campflow.rollout.stepped import SteppedEpisode

    for level in stream.levels:
        episode = SteppedEpisode(bootcamp, stream.draw(seed=0, level=level), settings)
        if episode.done:
            raise EnvServerError(f"{bootcamp.name} level {level} cannot start an episode: {episode.episode.error}")
        episode.close()
