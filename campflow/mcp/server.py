"""Reaching an MCP server for one episode: started fresh (stdio) or reset (streamable HTTP), always let go.

:class:`ServerSpec` says how (a command template or a URL, with timeouts); :func:`open_server` is the
episode's connection, an async context manager built on the official SDK's :class:`mcp.Client`:

- a **command** is started in a fresh folder (``{workdir}`` in the template; the task's fixture files
  are written there first; ``{seed}`` is the instance's seed), in a process group of its own under
  :mod:`campflow.mcp.guard`, and stopped (stdin closed, then the group killed) when the context exits,
  however it exits; the server's stderr goes to a log whose tail is quoted when it fails;
- a **URL** is one shared server: the context calls the spec's reset tool (``reset``) before the
  episode, so its state is fresh; episodes of one URL server must not overlap (run them at
  concurrency 1).

What goes wrong is sorted by whose fault it is: a server that does not start, crashes, does not answer
within ``call_timeout`` or answers malformed JSON-RPC raises :class:`~campflow.errors.ToolServerError`
(``infra_error``); a call the server refuses (``isError``, or a JSON-RPC ``invalid params`` /
``method not found`` error) raises :class:`~campflow.errors.ToolError`, the message the model reads.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import shlex
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from campflow.bootcamps.base import Observation
from campflow.errors import ToolError, ToolServerError

GUARD = Path(__file__).with_name("guard.py")
LITERAL_CHARS = 1_000_000  # longer texts are not read as Python literals (the parser's cost grows with them)
STDERR_TAIL = 600  # characters of the server's stderr quoted when it fails


class ResetCall(BaseModel):
    """The tool call that gives a URL server a fresh state before each episode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(description="the server's reset tool")
    arguments: dict[str, Any] = Field(default_factory=dict, description="its arguments ({seed} is substituted)")


class ServerSpec(BaseModel):
    """How to reach an MCP server for one episode: exactly one of ``command`` and ``url``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(None, description="argv template of a stdio server; {workdir} and {seed} filled")
    url: str | None = Field(None, description="a streamable HTTP server's URL, e.g. http://127.0.0.1:8000/mcp")
    reset: ResetCall | None = Field(None, description="URL servers: the call that resets the state per episode")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment of a stdio server")
    start_timeout: float = Field(30.0, gt=0, description="seconds for the server to start and list its tools")
    call_timeout: float = Field(30.0, gt=0, description="seconds for one tool call; longer is a hung server")
    protocol: Literal["legacy", "auto"] = Field(
        "legacy", description="legacy: the initialize handshake every server speaks; auto: probe server/discover first"
    )

    @model_validator(mode="after")
    def _one_way(self) -> ServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (a stdio server) and url (a streamable HTTP server)")
        if self.command is not None and not self.command:
            raise ValueError("command is empty")
        if self.url is not None and self.reset is None:
            raise ValueError("a URL server needs reset: the tool call that gives each episode a fresh state")
        return self

    @classmethod
    def from_command(cls, command: str, **kwargs: Any) -> ServerSpec:
        """A stdio server from a shell-like command line (``"uvx mcp-server-git --repository {workdir}"``)."""
        return cls(command=shlex.split(command), **kwargs)

    def describe(self) -> str:
        """The server in a few words, for messages."""
        return shlex.join(self.command) if self.command else str(self.url)


@dataclass(frozen=True)
class ToolResult:
    """One tool call's result as the server gave it: error flag, text and structured content."""

    is_error: bool
    text: str
    structured: Any = None
    images: tuple[bytes, ...] = ()

    def json(self) -> Any:
        """The result as JSON: the structured content, else the text read as JSON, else as a Python literal
        (servers that answer ``str(rows)``, as mcp-server-sqlite does), else the text itself."""
        if self.structured is not None:
            return self.structured
        try:
            return json.loads(self.text)
        except ValueError:
            pass
        if len(self.text) <= LITERAL_CHARS:
            try:
                return ast.literal_eval(self.text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
        return self.text

    def observation(self) -> Observation:
        """What the model reads (raises ToolError for an ``isError`` result)."""
        if self.is_error:
            raise ToolError(self.text or "the tool reported an error")
        text = self.text
        if not text and self.structured is not None:
            text = json.dumps(self.structured, ensure_ascii=False)
        return Observation(text, image=self.images[0] if self.images else None)


@dataclass
class ServerSession:
    """A live connection to one episode's server: its declared tools and calls to them."""

    client: Any  # mcp.Client
    spec: ServerSpec
    workdir: Path
    tools: list[dict[str, Any]]  # name, description, input_schema as the server declared them
    log: Path | None = None

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call a tool; an ``isError`` result is returned, not raised (see :meth:`ToolResult.observation`)."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import METHOD_NOT_FOUND

        try:
            result = await self.client.call_tool(name, dict(arguments), read_timeout_seconds=self.spec.call_timeout)
        except MCPError as exc:
            if exc.error.code == METHOD_NOT_FOUND or _is_invalid_params(exc):
                raise ToolError(exc.error.message) from None
            raise ToolServerError(
                f"MCP server {self.spec.describe()} failed on {name}: {_reason(exc)}{self._tail()}"
            ) from None
        except Exception as exc:
            raise ToolServerError(
                f"MCP server {self.spec.describe()} failed on {name}: {_reason(exc)}{self._tail()}"
            ) from None
        return _tool_result(result)

    def _tail(self) -> str:
        return _stderr_tail(self.log)


def _is_invalid_params(exc: Any) -> bool:
    from mcp_types import INVALID_PARAMS

    return exc.error.code == INVALID_PARAMS


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # the SDK's task groups wrap the cause
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    message = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {message}" if type(exc).__name__ not in message else message


def _tool_result(result: Any) -> ToolResult:
    texts, images = [], []
    for part in result.content or ():
        kind = getattr(part, "type", None)
        if kind == "text":
            texts.append(part.text)
        elif kind == "image" and getattr(part, "mime_type", getattr(part, "mimeType", "")) == "image/png":
            images.append(base64.b64decode(part.data))
        elif kind == "image":
            texts.append(f"[an image of type {getattr(part, 'mime_type', '?')}]")
        elif kind == "resource":
            texts.append(getattr(part.resource, "text", None) or str(part.resource.uri))
        elif kind == "resource_link":
            texts.append(str(part.uri))
    structured = getattr(result, "structured_content", None)
    return ToolResult(bool(result.is_error), "\n".join(texts), structured, tuple(images))


def _stderr_tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").strip()
    return f"; its stderr ends: {text[-STDERR_TAIL:]!r}" if text else ""


def fill(value: Any, workdir: Path, seed: int) -> Any:
    """``value`` with ``{workdir}`` and ``{seed}`` filled in every string (other braces are left alone)."""
    if isinstance(value, str):
        return value.replace("{workdir}", str(workdir)).replace("{seed}", str(seed))
    if isinstance(value, list):
        return [fill(v, workdir, seed) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, workdir, seed) for k, v in value.items()}
    return value


def write_fixtures(workdir: Path, fixtures: Mapping[str, str], seed: int = 0) -> None:
    """Write each fixture (relative path -> text, ``{workdir}``/``{seed}`` filled) under ``workdir``.

    Raises:
        ToolError: a path that is absolute or leaves the folder (the task file is wrong, checked at import).
    """
    for rel, text in fixtures.items():
        path = PurePosixPath(rel)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"fixture path {rel!r} must be relative and stay inside the episode's folder")
        target = workdir.joinpath(*path.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(fill(text, workdir, seed))


@asynccontextmanager
async def open_server(
    spec: ServerSpec, *, seed: int = 0, fixtures: Mapping[str, str] | None = None
) -> AsyncIterator[ServerSession]:
    """Start (or reset) a server for one episode and yield its session; stop it and remove its folder on exit.

    Raises:
        ToolServerError: it did not start, list its tools or reset within ``start_timeout``.
    """
    root = Path(tempfile.mkdtemp(prefix="campflow-mcp-"))
    workdir = root / "work"
    workdir.mkdir()
    log = root / "server.log" if spec.command else None
    try:
        write_fixtures(workdir, fixtures or {}, seed)
        async with _unwrapped(), AsyncExitStack() as stack:
            try:
                async with asyncio.timeout(
                    spec.start_timeout
                ):  # not anyio's scope: the client's task group outlives it
                    client = await stack.enter_async_context(_client(spec, workdir, seed, log, stack))
                    listed = await client.list_tools()
                    if spec.reset is not None:
                        reset = await client.call_tool(spec.reset.tool, fill(spec.reset.arguments, workdir, seed))
                        if reset.is_error:
                            raise RuntimeError(f"reset call {spec.reset.tool} failed: {_tool_result(reset).text}")
            except Exception as exc:
                raise ToolServerError(
                    f"MCP server {spec.describe()} did not start: {_reason(exc)}{_stderr_tail(log)}"
                ) from None
            tools = [_declared(t) for t in listed.tools]
            yield ServerSession(client, spec, workdir, tools, log)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _declared(tool: Any) -> dict[str, Any]:
    """A declared tool as campflow keeps it: name, description, input schema, and ``read_only`` where the
    server says the tool only looks (its ``readOnlyHint``)."""
    out = {"name": tool.name, "description": tool.description or "", "input_schema": dict(tool.input_schema or {})}
    if getattr(tool.annotations, "read_only_hint", None):
        out["read_only"] = True
    return out


@asynccontextmanager
async def _unwrapped() -> AsyncIterator[None]:
    """Re-raise the one exception the SDK's task groups wrap in an exception group as itself."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) != 1:
            raise
        raise leaves[0] from None


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _client(spec: ServerSpec, workdir: Path, seed: int, log: Path | None, stack: AsyncExitStack) -> Any:
    from mcp import Client

    if spec.url is not None:
        return Client(spec.url, cache=None, read_timeout_seconds=spec.start_timeout, mode=spec.protocol)
    from mcp.client.stdio import StdioServerParameters, stdio_client

    argv = fill(list(spec.command or ()), workdir, seed)
    if sys.platform.startswith("linux"):  # the guard ties the server's life to ours (module docstring)
        argv = [sys.executable, "-I", "-S", str(GUARD), *argv]
    errlog = stack.enter_context(open(log or "/dev/null", "w"))  # noqa: SIM115 (closed by the stack)
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=workdir, env=spec.env or None)
    return Client(
        stdio_client(params, errlog=errlog), cache=None, read_timeout_seconds=spec.start_timeout, mode=spec.protocol
    )
