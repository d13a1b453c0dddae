"""``campflow env serve NAME --protocol mcp``: a bootcamp as an MCP server, one episode per client session.

An MCP-speaking agent harness connects (stdio, or streamable HTTP) and plays one episode of a
train-split instance (:class:`campflow.envserve.stream.TrainStream`: never an eval or probe
instance). What names the episode depends on what the client's protocol revision carries:

- stdio: the connection. One process is one episode (its own instance: without ``--seed``, each
  process starts from a fresh seed).
- streamable HTTP at ``/mcp``, revisions up to 2025-11-25: the ``initialize`` handshake's session
  (``Mcp-Session-Id``). Revision 2026-07-28 has no handshake and no session: each request stands alone,
  so nothing tells two clients apart at ``/mcp``. Its requests there are refused with
  ``UNSUPPORTED_PROTOCOL_VERSION`` naming the handshake revisions (a client in ``auto`` mode, such
  as the OpenAI Agents SDK's, falls back to ``initialize`` and gets a session), never served from a
  shared episode.
- streamable HTTP at an episode URL, ``/mcp/e/<episode id>``, every revision: ``POST /episodes``
  draws an instance and answers ``{"episode", "url", "instance_id", "level", "seed"}``; every request
  to that URL plays that episode.

Each episode has:

- the task: the server's instructions (stdio: the episode's own task; HTTP, where one server has many
  episodes: the bootcamp's task description) and the ``campflow://task`` resource (the prompt's
  messages, the instance's id, level and seed, the episode's id);
- the bootcamp's tools as MCP tools with their schemas; each call is one agent turn played through the
  rollout engine (:class:`campflow.rollout.stepped.SteppedEpisode`), so a refused or malformed call gets
  the engine's ``Error: ...`` (an ``isError`` result) and the episode ends where an evaluation's would;
- results and images as MCP content (text, PNG images);
- when the episode ends, the final tool result says so and carries ``reward``, ``success``,
  ``termination``, ``run_id`` and ``episode_id`` as structured content, and the episode is written once
  to the workspace's store under the server's run id (model ``mcp-client``), so the harness's failures
  are mined like any policy's.

A call after the episode ended gets an error naming that episode and its outcome, never another
episode's state; a new session (or episode URL) starts a new episode.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import secrets
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from campflow.agents.base import PolicyReply
from campflow.bootcamps.messages import content_text
from campflow.rollout.engine import RolloutSettings
from campflow.rollout.episode import episode_id
from campflow.rollout.stepped import SteppedEpisode

if TYPE_CHECKING:
    from campflow.config import CampflowConfig
    from campflow.envserve.stream import TrainStream
    from campflow.rollout.episode import Episode
    from campflow.storage.store import Store

TASK_URI = "campflow://task"
MODEL_ID = "mcp-client"
MCP_PATH = "/mcp"
EPISODES_PATH = "/episodes"
EPISODE_PATH = "/mcp/e/"


class UnknownEpisodeError(KeyError):
    """An episode URL names no episode this server handed out."""


@dataclass
class _Session:
    episode: SteppedEpisode
    sample: int
    id: str
    outcome: dict[str, Any] | None = None
    finished: Episode | None = None  # the episode as recorded, once it has ended


class EpisodeServer:
    """The episodes of one ``--protocol mcp`` server: a stream of instances, a store and a run id.

    Args:
        stream: where each episode's instance is drawn from (train split only).
        settings: the episode limits, as in evaluation.
        store: where finished episodes are written (None: nowhere).
        run_id: the run the episodes belong to.
        first_sample: the sample index of the first episode; later ones count up (a resumed run starts
            past the episodes it already has, so none is overwritten).
        bootcamp: the bootcamp, when there is no stream (episodes are then only made by :meth:`add`).
        reveal_outcome: whether the final tool result carries the reward and termination (a user's agent
            evaluated by campflow is only told that the episode is over).
        on_finish: called with each episode's id and the finished episode, on the thread that ended it.
    """

    def __init__(
        self,
        stream: TrainStream | None,
        settings: RolloutSettings,
        store: Store | None = None,
        run_id: str = "",
        first_sample: int = 0,
        *,
        bootcamp: Any = None,
        reveal_outcome: bool = True,
        on_finish: Callable[[str, Episode], None] | None = None,
    ) -> None:
        self.stream, self.settings, self.store, self.run_id = stream, settings, store, run_id
        self.bootcamp = bootcamp if bootcamp is not None else stream.bootcamp  # type: ignore[union-attr]
        self.reveal_outcome, self.on_finish = reveal_outcome, on_finish
        self._by_key: dict[str, _Session] = {}
        self._by_id: dict[str, _Session] = {}
        self._next_sample = first_sample
        self._lock = threading.Lock()
        self.recorded: list[Episode] = []

    def open(self, key: str) -> _Session:
        """The episode of connection ``key`` (a session id, ``stdio``), drawn on its first request."""
        with self._lock:
            session = self._by_key.get(key)
            if session is None:
                session = self._by_key[key] = self._draw()
        return session

    def new(self) -> _Session:
        """A fresh episode, reachable only by its id (an episode URL)."""
        with self._lock:
            return self._draw()

    def find(self, episode: str) -> _Session:
        """The episode with id ``episode``.

        Raises:
            UnknownEpisodeError: this server has no episode with that id.
        """
        session = self._by_id.get(episode)
        if session is None:
            raise UnknownEpisodeError(
                f"no episode {episode!r} on this server; POST {EPISODES_PATH} for a new episode URL"
            )
        return session

    def add(self, instance: Any, sample: int) -> _Session:
        """An episode of ``instance`` as the ``sample``-th of its run (an evaluation's), reachable by its id."""
        with self._lock:
            return self._start(instance, sample)

    def _draw(self) -> _Session:
        instance = self.stream.draw()  # type: ignore[union-attr]
        sample, self._next_sample = self._next_sample, self._next_sample + 1
        return self._start(instance, sample)

    def _start(self, instance: Any, sample: int) -> _Session:
        session = _Session(
            SteppedEpisode(self.bootcamp, instance, self.settings), sample, episode_id(self.run_id, instance.id, sample)
        )
        self._by_id[session.id] = session
        if self.store is not None:
            self.store.write_instances([instance], split="train")
        if session.episode.episode is not None:  # setting it up failed: it is over before a call
            self._finish(session, session.episode.episode)
        return session

    def task(self, session: _Session) -> dict[str, Any]:
        """The ``task`` resource: the prompt and what instance and episode it is."""
        episode = session.episode
        return {
            "bootcamp": self.bootcamp.name,
            "instance_id": episode.instance.id,
            "level": episode.instance.level,
            "seed": episode.instance.seed,
            "episode_id": session.id,
            "messages": episode.prompt,
        }

    def tools(self, session: _Session) -> list[dict[str, Any]]:
        """The episode's tools as MCP tool declarations (name, description, input schema)."""
        return [
            {
                "name": s["function"]["name"],
                "description": s["function"].get("description", ""),
                "input_schema": s["function"].get("parameters") or {"type": "object", "properties": {}},
            }
            for s in session.episode.tools
        ]

    def call(
        self, session: _Session, name: str, arguments: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any] | None, bool]:
        """Play one call as the agent's turn: (content parts, structured result when the episode ended, is_error)."""
        episode = session.episode
        if session.outcome is not None:
            if not self.reveal_outcome:
                return [("text", f"Error: episode {session.id} is over; stop now.")], None, True
            ended = f"episode {session.id}: {session.outcome['termination']}, reward {session.outcome['reward']:g}"
            return [("text", f"Error: the episode has ended ({ended}); a new MCP session plays another.")], None, True
        call = {
            "id": f"call_{episode.turns}_0",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        turn = episode.reply(PolicyReply(tool_calls=[call]))
        parts = _parts(turn.messages)
        refused = any(m.get("role") == "tool" and str(m.get("content", "")).startswith("Error:") for m in turn.messages)
        if turn.episode is None:
            return parts, None, refused
        outcome = self._finish(session, turn.episode)
        if not self.reveal_outcome:
            parts.append(("text", "Episode over: make no more calls; stop now."))
            return parts, None, False
        parts.append(("text", f"Episode over: {outcome['termination']}, reward {outcome['reward']:g}."))
        return parts, outcome, False

    def stop(self, session: _Session, reason: str, termination: Any = None) -> Episode:
        """End ``session``'s episode where it stands, its agent gone (see :meth:`SteppedEpisode.stop`); returns
        the finished episode (the one it already had, if it had ended)."""
        if session.finished is None:
            self._finish(session, session.episode.stop(reason, termination))
        assert session.finished is not None
        return session.finished

    def _finish(self, session: _Session, episode: Episode) -> dict[str, Any]:
        recorded = dataclasses.replace(episode, run_id=self.run_id, model_id=MODEL_ID, sample=session.sample)
        session.finished = recorded
        if self.store is not None:
            self.store.write_episodes([recorded.freeze()])
        self.recorded.append(recorded)
        if self.on_finish is not None:
            self.on_finish(session.id, recorded)
        session.outcome = {
            "reward": recorded.reward,
            "success": recorded.success,
            "termination": recorded.termination.value,
            "run_id": self.run_id,
            "episode_id": recorded.id,
        }
        return session.outcome


def _parts(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """A turn's messages as content parts: ("text", str) and ("image", png bytes)."""
    parts: list[tuple[str, Any]] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            for part in content:
                url = (part.get("image_url") or {}).get("url", "") if part.get("type") == "image_url" else ""
                if url.startswith("data:image/png;base64,"):
                    parts.append(("image", base64.b64decode(url.split(",", 1)[1])))
                elif part.get("type") == "text":
                    parts.append(("text", part.get("text", "")))
        elif content:
            parts.append(("text", content_text(content)))
    return parts


def build_server(episodes: EpisodeServer, instructions: str) -> Any:
    """The MCP low-level server of ``episodes``: tools, the task resource, one episode per client session."""
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    def no_episode(ctx: Any) -> MCPError:
        # 2026-07-28 requests carry no session: at /mcp nothing tells two clients apart, and serving them
        # one shared episode would mix their turns; a client in auto mode falls back to initialize on this
        message = (
            f"protocol revision {ctx.protocol_version} has no session, so a request to {MCP_PATH} names no "
            f"episode: POST {EPISODES_PATH} for an episode URL ({EPISODE_PATH}<episode id>), or connect "
            f"with initialize (revision {HANDSHAKE_PROTOCOL_VERSIONS[-1]} or older: one episode per session)"
        )
        data = {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": ctx.protocol_version}
        return MCPError(types.UNSUPPORTED_PROTOCOL_VERSION, message, data)

    def session_of(ctx: Any) -> _Session:
        request = getattr(ctx, "request", None)
        if request is None:  # stdio: the process is the connection, one episode
            return episodes.open("stdio")
        if "episode" in request.path_params:  # an episode URL, any revision
            try:
                return episodes.find(request.path_params["episode"])
            except UnknownEpisodeError as exc:
                raise MCPError(types.INVALID_PARAMS, exc.args[0]) from None
        session_id = request.headers.get("mcp-session-id")
        if not session_id:
            raise no_episode(ctx)
        return episodes.open(f"session:{session_id}")

    async def discover(ctx: Any, params: Any) -> Any:
        request = getattr(ctx, "request", None)
        if request is not None and "episode" not in request.path_params:  # HTTP at /mcp
            raise no_episode(ctx)
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[types.Tool(**t) for t in episodes.tools(session_of(ctx))])

    async def call_tool(ctx: Any, params: Any) -> Any:
        parts, outcome, is_error = episodes.call(session_of(ctx), params.name, dict(params.arguments or {}))
        content = [
            types.TextContent(type="text", text=value)
            if kind == "text"
            else types.ImageContent(type="image", data=base64.b64encode(value).decode("ascii"), mime_type="image/png")
            for kind, value in parts
        ]
        return types.CallToolResult(content=content, structured_content=outcome, is_error=is_error)

    async def list_resources(ctx: Any, params: Any) -> Any:
        session_of(ctx)  # the same refusal as every other request that names no episode
        task = types.Resource(
            uri=TASK_URI, name="task", mime_type="application/json", description="this session's task"
        )
        return types.ListResourcesResult(resources=[task])

    async def read_resource(ctx: Any, params: Any) -> Any:
        if str(params.uri) != TASK_URI:
            raise ValueError(f"unknown resource {params.uri}; this server has {TASK_URI}")
        text = json.dumps(episodes.task(session_of(ctx)))
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=TASK_URI, mime_type="application/json", text=text)]
        )

    server = Server(
        f"campflow-{episodes.bootcamp.name}",
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


def http_app(server: Any, episodes: EpisodeServer, host: str) -> Any:
    """The Starlette app of an HTTP server: ``/mcp`` (sessions), ``/mcp/e/<id>`` (episode URLs), ``POST /episodes``."""
    import anyio
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    security = TransportSecurityMiddleware(server.session_manager.security_settings)

    async def new_episode(request: Request) -> Response:
        refused = await security.validate_request(request, is_post=False)  # the Host check of /mcp
        if refused is not None:
            return refused
        session = await anyio.to_thread.run_sync(episodes.new)  # draws, and writes the instance to the store
        task = episodes.task(session)
        url = f"{str(request.base_url).rstrip('/')}{EPISODE_PATH}{session.id}"
        found = {k: task[k] for k in ("instance_id", "level", "seed")}
        return JSONResponse({"episode": session.id, "url": url, **found}, status_code=201)

    app.router.routes.extend(
        [
            Route(EPISODE_PATH + "{episode}", endpoint=StreamableHTTPASGIApp(server.session_manager)),
            Route(EPISODES_PATH, endpoint=new_episode, methods=["POST"]),
        ]
    )
    return app


def serve_mcp(
    cfg: CampflowConfig,
    name: str,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    level: int | None = None,
    seed: int | None = None,
    run_id: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> str:
    """Serve bootcamp ``name`` over MCP until the client (stdio) or the process (HTTP) stops; returns the run id.

    ``seed`` is the seed of the first episode's instance, later ones counting up; None: 0 over HTTP, a
    fresh one per stdio process (each is one episode, which would otherwise be the same instance).

    Raises:
        UnknownBootcampError, InvalidParamsError, EnvServerError: before anything is served.
    """
    import anyio

    from campflow.bootcamps.splits import TRAIN_SEED_LIMIT
    from campflow.envserve.server import listen, run_until_stopped, train_stream
    from campflow.errors import EnvServerError
    from campflow.storage.workspace import Workspace

    if seed is None:
        seed = secrets.randbelow(TRAIN_SEED_LIMIT) if transport == "stdio" else 0
    stream = train_stream(cfg, name, level, seed)
    check = SteppedEpisode(stream.bootcamp, stream.draw(seed=seed), RolloutSettings.from_config(cfg.rollout))
    if check.done:
        raise EnvServerError(f"{name} cannot start an episode: {check.episode.error}")
    check.close()
    store = Workspace.from_config(cfg).store
    run_id = run_id or f"mcp-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    # an evaluation of the client: its failures are mined like any policy's
    config = {"bootcamp": name, "protocol": "mcp", "transport": transport, "seed": seed}
    first_sample = 0
    if not store.start_run(run_id, "evaluate", config, MODEL_ID):  # resumed: its episodes stay as they are
        [row] = store.query("SELECT max(sample_index) AS last FROM episodes WHERE run_id = ?", [run_id])
        first_sample = 0 if row["last"] is None else row["last"] + 1
    episodes = EpisodeServer(stream, RolloutSettings.from_config(cfg.rollout), store, run_id, first_sample)
    if transport == "stdio":
        first = episodes.open("stdio")  # the one episode of a stdio server: its task is the instructions
        instructions = content_text(first.episode.prompt[-1].get("content")) if first.episode.prompt else ""
        server = build_server(episodes, instructions)

        async def main() -> None:
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (read, write):
                if on_ready is not None:
                    on_ready(run_id)
                await server.run(read, write, server.create_initialization_options())

        try:
            anyio.run(main)
        finally:
            store.finish_run(run_id, "completed", {"episodes": len(episodes.recorded)})
        return run_id

    server = build_server(episodes, stream.bootcamp.describe_task() + f"\n\nRead the task resource {TASK_URI}.")
    sock = listen(host, port)
    try:
        app = http_app(server, episodes, host)
        url = f"http://{host}:{sock.getsockname()[1]}{MCP_PATH}"

        run_until_stopped(app, sock, lambda: on_ready(url) if on_ready is not None else None)
    finally:
        sock.close()
        store.finish_run(run_id, "completed", {"episodes": len(episodes.recorded)})
    return run_id


def say(line: str) -> None:
    """Print a line for the person running the server: on stderr, since stdout is the stdio transport's."""
    print(line, file=sys.stderr, flush=True)
