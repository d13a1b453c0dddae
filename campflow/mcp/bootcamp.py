"""A bootcamp whose tools are an MCP server: a fresh server per episode, its declared tools the model's.

Subclass :class:`McpBootcamp` to put an MCP server under your own tasks: your ``build`` and ``prompt``
pose instances, your ``score`` judges them from what :meth:`~McpBootcamp.final_calls` read off the
final server state (``state.final``), your ``oracle`` plays the reference. The server supplies the
tools::

    class Notes(McpBootcamp[NotesParams]):
        '''Keep notes with the notes server. ...'''
        name = "notes"
        server = ServerSpec.from_command("python notes_server.py --db {workdir}/notes.db")

        def final_calls(self, instance):
            return [Action("count_notes", {})]

        def score(self, instance, state, transcript):
            ok = state.final[0].json() == instance.data["count"]
            return Score(float(ok), ok, {} if ok else {"reason": "count"})

What the model sees: the server's tools exactly as it declares them (name, description, input schema),
plus :data:`FINISH` (``submit``, with an optional ``answer``), the final tool that ends the episode
(a server tool of that name is refused). A call goes to the episode's server; an ``isError`` result
reaches the model as ``Error: <text>``, as a :class:`~campflow.errors.ToolError` does. Arguments are
validated against the declared schema where campflow can read it (else the server validates them).

The episode's folder: ``{workdir}`` in the command template, the prompt, fixtures, reference calls and
final calls is the fresh folder of the running episode (:func:`current_workdir`); outside an episode
(``campflow bootcamps sample``) the prompt shows the placeholder itself.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from campflow.bootcamps.base import Action, Bootcamp, Instance, Observation, P, State, Tool, ToolArgs, tool
from campflow.bootcamps.served import ServedTools, run_async
from campflow.errors import ToolError, ToolServerError
from campflow.mcp.server import ServerSession, ServerSpec, ToolResult, fill, open_server
from campflow.sources.function_calling import RowTool
from campflow.sources.function_calling_rows import args_model

FINISH = "submit"
_WORKDIR: contextvars.ContextVar[Path | None] = contextvars.ContextVar("campflow_mcp_workdir", default=None)


def current_workdir() -> Path | None:
    """The folder of the episode running in this task (None outside an episode)."""
    return _WORKDIR.get()


class SubmitArgs(ToolArgs):
    """Arguments of the final tool."""

    answer: str = Field("", description="your answer, where the task asks a question; else leave it empty")


class FreeArgs(ToolArgs):
    """Arguments of a server tool whose schema campflow cannot turn into a model: the server checks them."""

    model_config = ConfigDict(extra="allow")


@dataclass
class McpState(State):
    """One episode's world: the live server session, the calls made, and what the final calls read.

    Attributes:
        session: the episode's server (None before it starts and after it stops).
        calls: each call sent to the server: ``name``, ``arguments``, ``is_error``.
        final: the results of :meth:`McpBootcamp.final_calls` on the final state, in order (a refused
            call is a result with ``is_error`` True).
    """

    session: ServerSession | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    final: list[ToolResult] = field(default_factory=list)
    folder: Path | None = None  # the episode's folder, still named once the server has stopped (it is removed)

    @property
    def workdir(self) -> Path | None:
        """The episode's folder (its path, also after the episode, when the folder itself is gone)."""
        return self.session.workdir if self.session is not None else self.folder


class McpBootcamp(ServedTools[P, McpState], Bootcamp[P, McpState]):
    """A bootcamp whose tool layer is an MCP server (see the module docstring).

    Class attributes a subclass sets beside the usual ones:
        server: how to start (or reset) the server for each episode.
    """

    server: ClassVar[ServerSpec]
    state_model = McpState

    _declared: list[dict[str, Any]] | None = None  # the server's tools, as the last opened server declared them
    _locks: dict[int, asyncio.Lock]

    # -- what a subclass may override ------------------------------------------------------------

    def server_spec(self, instance: Instance[P]) -> ServerSpec:
        """The server of an episode of ``instance`` (default: :attr:`server`)."""
        return self.server

    def shared_server(self, instance: Instance[P]) -> str | None:
        """A URL server's address (one shared state, reset per episode); None for a stdio server."""
        return self.server_spec(instance).url

    def fixtures(self, instance: Instance[P]) -> Mapping[str, str]:
        """Files written into the episode's folder before the server starts: relative path -> text."""
        return {}

    def final_calls(self, instance: Instance[P]) -> Sequence[Action]:
        """Calls made on the final server state after the episode; their results go to ``state.final``."""
        return ()

    # -- the served episode ----------------------------------------------------------------------

    @asynccontextmanager
    async def episode(self, instance: Instance[P]) -> AsyncIterator[McpState]:
        """Start a fresh server (or reset the URL server) for one episode; stop it when the episode ends."""
        spec = self.server_spec(instance)
        async with (
            self._exclusive(spec),
            open_server(spec, seed=instance.seed, fixtures=self.fixtures(instance)) as session,
        ):
            if any(t["name"] == FINISH for t in session.tools):
                raise ToolServerError(
                    f"MCP server {spec.describe()} declares a tool {FINISH!r}, the name of the tool that ends an episode"
                )
            self._declared = session.tools
            token = _WORKDIR.set(session.workdir)
            state = McpState(session=session, folder=session.workdir)
            try:
                yield state
            finally:
                state.session = None
                _WORKDIR.reset(token)

    @asynccontextmanager
    async def _exclusive(self, spec: ServerSpec) -> AsyncIterator[None]:
        """One episode at a time on a URL server (its state is shared); stdio servers are each their own."""
        if spec.url is None:
            yield
            return
        locks = self.__dict__.setdefault("_locks", {})
        lock = locks.setdefault(id(asyncio.get_running_loop()), asyncio.Lock())
        async with lock:
            yield

    async def call_served(self, instance: Instance[P], state: McpState, name: str, args: ToolArgs) -> Observation:
        """Send the call to the episode's server (the final tool is answered here)."""
        if name == FINISH:
            return self.submit(instance, state, args)  # type: ignore[arg-type]
        if state.session is None:
            raise ToolServerError(f"{self.name}: the episode's server is not running")
        arguments = args.model_dump(mode="json", by_alias=True, exclude_unset=True)
        result = await state.session.call(name, arguments)
        state.calls.append({"name": name, "arguments": arguments, "is_error": result.is_error})
        return result.observation()

    async def conclude(self, instance: Instance[P], state: McpState) -> None:
        """Make :meth:`final_calls` on the final state; each result (refusals included) goes to ``state.final``."""
        if state.session is None:
            raise ToolServerError(f"{self.name}: the episode's server is not running")
        seed = instance.seed
        for action in self.final_calls(instance):
            arguments = fill(dict(action.arguments), state.session.workdir, seed)
            try:
                state.final.append(await state.session.call(action.name, arguments))
            except ToolError as exc:
                state.final.append(ToolResult(True, str(exc)))

    @tool(final=True)
    def submit(self, instance: Instance[P], state: McpState, args: SubmitArgs) -> Observation:
        """Call this once the task is done (with your answer, if the task asks a question). This ends the episode."""
        state.answer = args.answer
        return Observation("Submitted.", final=True)

    # -- tools -----------------------------------------------------------------------------------

    def tools(self, instance: Instance[P]) -> tuple[Tool, ...]:
        """The server's declared tools (started once to ask, if no episode has run yet), then ``submit``."""
        if self._declared is None:
            self._declared = run_async(self._list_tools(instance))
        return (*server_tools(self._declared), self._tools[FINISH])

    async def _list_tools(self, instance: Instance[P]) -> list[dict[str, Any]]:
        async with open_server(
            self.server_spec(instance), seed=instance.seed, fixtures=self.fixtures(instance)
        ) as session:
            return session.tools

    def max_turns(self, instance: Instance[P]) -> int:
        return self.default_max_turns

    def describe(self) -> dict[str, Any]:
        """What ``campflow bootcamps show`` prints, with the server's tools where they are known."""
        out = super().describe()
        if self._declared is not None:
            out["tools"] = [
                {
                    "name": t["name"],
                    "final": False,
                    "description": t.get("description") or "",
                    "parameters": t.get("input_schema") or {},
                }
                for t in self._declared
            ] + out["tools"]
        return out


def server_tools(declared: Sequence[Mapping[str, Any]]) -> tuple[Tool, ...]:
    """Tools from a server's declarations, their schemas shown to the model verbatim."""
    return tuple(_server_tool(t["name"], t.get("description") or "", t.get("input_schema") or {}) for t in declared)


def _server_tool(name: str, description: str, schema: Mapping[str, Any]) -> Tool:
    import json

    parameters = dict(schema) or {"type": "object", "properties": {}}
    try:
        model: type = args_model({"name": name, "parameters": parameters})
    except (TypeError, ValueError):
        model = FreeArgs
    function = {"name": name, "description": description, "parameters": parameters}
    return RowTool(
        name=name,
        description=description,
        args_model=model,
        schema_json=json.dumps({"type": "function", "function": function}),
    )


def workdir_text(text: str, seed: int) -> str:
    """``text`` with the running episode's folder and ``seed`` filled in (the placeholder kept outside one)."""
    workdir = current_workdir()
    return fill(text, workdir, seed) if workdir is not None else text.replace("{seed}", str(seed))
