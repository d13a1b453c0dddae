"""``campflow env serve NAME --protocol mcp``: a bootcamp as an MCP server, one episode per MCP session.

An MCP-speaking agent harness connects (stdio, or streamable HTTP at ``/mcp``) and plays one episode of
a train-split instance (:class:`campflow.envserve.environment.TrainStream`: never an eval or probe
instance):

- the task: the server's instructions (stdio: the episode's own task; HTTP, where one server has many
  sessions: the bootcamp's task description) and the ``campflow://task`` resource (the prompt's
  messages, the instance's id, level and seed);
- the bootcamp's tools as MCP tools with their schemas; each call is one agent turn played through the
  rollout engine (:class:`campflow.rollout.stepped.SteppedEpisode`), so a refused or malformed call gets
  the engine's ``Error: ...`` (an ``isError`` result) and the episode ends where an evaluation's would;
- results and images as MCP content (text, PNG images);
- when the episode ends, the final tool result says so and carries ``reward``, ``success`` and
  ``termination`` as structured content, and the episode is written to the workspace's store under the
  server's run id (model ``mcp-client``), so the harness's failures are mined like any policy's.

A session that calls a tool after its episode ended gets an error; a new session starts a new episode.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import itertools
import json
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from campflow.agents.base import PolicyReply
from campflow.bootcamps.messages import content_text
from campflow.rollout.engine import RolloutSettings
from campflow.rollout.stepped import SteppedEpisode

if TYPE_CHECKING:
    from campflow.config import CampflowConfig
    from campflow.envserve.environment import TrainStream
    from campflow.rollout.episode import Episode
    from campflow.storage.store import Store

TASK_URI = "campflow://task"
MODEL_ID = "mcp-client"


@dataclass
class _Session:
    episode: SteppedEpisode
    sample: int


class EpisodeServer:
    """The episodes of one ``--protocol mcp`` server: a stream of instances, a store and a run id.

    Args:
        stream: where each session's instance is drawn from (train split only).
        settings: the episode limits, as in evaluation.
        store: where finished episodes are written (None: nowhere).
        run_id: the run the episodes belong to.
    """

    def __init__(
        self, stream: TrainStream, settings: RolloutSettings, store: Store | None = None, run_id: str = ""
    ) -> None:
        self.stream, self.settings, self.store, self.run_id = stream, settings, store, run_id
        self.bootcamp = stream.bootcamp
        self._sessions: dict[str, _Session] = {}
        self._count = itertools.count()
        self._lock = threading.Lock()
        self.recorded: list[Episode] = []

    def open(self, key: str) -> _Session:
        """The session's episode (drawn on its first request)."""
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                instance = self.stream.draw()
                session = self._sessions[key] = _Session(
                    SteppedEpisode(self.bootcamp, instance, self.settings), next(self._count)
                )
                if self.store is not None:
                    self.store.write_instances([instance], split="train")
        return session

    def task(self, session: _Session) -> dict[str, Any]:
        """The ``task`` resource: the prompt and what instance it is."""
        episode = session.episode
        return {
            "bootcamp": self.bootcamp.name,
            "instance_id": episode.instance.id,
            "level": episode.instance.level,
            "seed": episode.instance.seed,
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
        if episode.done:
            return [("text", "Error: the episode has ended; open a new MCP session for another.")], None, True
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
        finished = self._finish(session, turn.episode)
        outcome = {k: finished[k] for k in ("reward", "success", "termination")}
        parts.append(("text", f"Episode over: {finished['termination']}, reward {finished['reward']:g}."))
        return parts, {**outcome, "run_id": self.run_id, "episode_id": finished["episode_id"]}, False

    def _finish(self, session: _Session, episode: Episode) -> dict[str, Any]:
        recorded = dataclasses.replace(episode, run_id=self.run_id, model_id=MODEL_ID, sample=session.sample)
        if self.store is not None:
            self.store.write_episodes([recorded.freeze()])
        self.recorded.append(recorded)
        return {
            "reward": recorded.reward,
            "success": recorded.success,
            "termination": recorded.termination.value,
            "episode_id": recorded.id,
        }


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
    """The MCP low-level server of ``episodes``: tools, the task resource, one episode per session."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    def session_of(ctx: Any) -> _Session:
        # streamable HTTP names the session in a header on every request; stdio is one session
        request = getattr(ctx, "request", None)
        return episodes.open(request.headers.get("mcp-session-id", "") if request is not None else "stdio")

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

    return Server(
        f"campflow-{episodes.bootcamp.name}",
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


def serve_mcp(
    cfg: CampflowConfig,
    name: str,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    level: int | None = None,
    seed: int = 0,
    run_id: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> str:
    """Serve bootcamp ``name`` over MCP until the client (stdio) or the process (HTTP) stops; returns the run id.

    Raises:
        UnknownBootcampError, InvalidParamsError, EnvServerError: before anything is served.
    """
    import anyio

    from campflow.envserve.server import listen, train_stream
    from campflow.errors import EnvServerError
    from campflow.storage.workspace import Workspace

    stream = train_stream(cfg, name, level, seed)
    check = SteppedEpisode(stream.bootcamp, stream.draw(seed=seed), RolloutSettings.from_config(cfg.rollout))
    if check.done:
        raise EnvServerError(f"{name} cannot start an episode: {check.episode.error}")
    check.close()
    store = Workspace.from_config(cfg).store
    run_id = run_id or f"mcp-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    # an evaluation of the client: its failures are mined like any policy's
    store.start_run(run_id, "evaluate", {"bootcamp": name, "protocol": "mcp", "transport": transport}, MODEL_ID)
    episodes = EpisodeServer(stream, RolloutSettings.from_config(cfg.rollout), store, run_id)
    if transport == "stdio":
        first = episodes.open("stdio")  # the one session of a stdio server: its task is the instructions
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
    import uvicorn

    server = build_server(episodes, stream.bootcamp.describe_task() + f"\n\nRead the task resource {TASK_URI}.")
    sock = listen(host, port)
    try:
        app = server.streamable_http_app(host=host)
        url = f"http://{host}:{sock.getsockname()[1]}/mcp"

        class _Server(uvicorn.Server):
            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets)
                if self.started and on_ready is not None:
                    on_ready(url)

        _Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])
    finally:
        sock.close()
        store.finish_run(run_id, "completed", {"episodes": len(episodes.recorded)})
    return run_id


def say(line: str) -> None:
    """Print a line for the person running the server: on stderr, since stdout is the stdio transport's."""
    print(line, file=sys.stderr, flush=True)
