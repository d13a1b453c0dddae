"""The recording proxy: an OpenAI-compatible ``/v1/chat/completions`` whose URL names the episode.

An agent's base URL is ``http://HOST:PORT/e/<episode_id>/v1`` and its API key the episode's key, both
from :meth:`RecordingProxy.open_episode`. A call for an episode never opened, or already closed, is
refused (404); a wrong key too (401). Every call, refused or answered, is written to the store before
the agent hears back. A call that sends the same body as an earlier call of its episode (a client's
retry after an error or a timeout) is recorded as repeating it (``retry_of``). A streamed request is answered as server-sent events made from one non-streamed
generation: the same content and tool calls, and the same recorded ids.

Example::

    proxy = RecordingProxy(LocalBackend("campflow-data/models/base"), store)
    await proxy.start()
    key = proxy.open_episode("ep-1")
    client = openai.AsyncOpenAI(base_url=proxy.base_url("ep-1"), api_key=key)
    ...
    proxy.close_episode("ep-1")
    await proxy.aclose()
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from campflow.proxy.backends import (
    CURRENT_EPISODE,
    SAMPLING_FIELDS,
    Backend,
    ChatRequest,
    Generation,
    ProxyError,
    ServedCall,
)
from campflow.proxy.records import CallLog, ProxyCall
from campflow.serialization import from_json, to_json

LOOPBACK = "127.0.0.1"


@dataclass
class _Episode:
    key: str
    open: bool = True
    calls: int = 0
    served: list[ServedCall] = field(default_factory=list)
    bodies: dict[str, str] = field(default_factory=dict)  # request body hash -> the latest call that sent it


class UnknownEpisodeError(ProxyError):
    """A call for an episode the proxy does not have open."""


class RecordingProxy:
    """Serves ``backend`` to agents, one URL per episode, recording every call in ``store``.

    Args:
        backend: the policy (:class:`~campflow.proxy.local.LocalBackend` or
            :class:`~campflow.proxy.backends.EndpointBackend`).
        store: the workspace's store; the proxy runs in the process that writes it.
        host: the interface to listen on (loopback unless told otherwise).
        port: the port (0: any free one).
    """

    def __init__(self, backend: Backend, store: Any, *, host: str = LOOPBACK, port: int = 0) -> None:
        self.backend, self.host, self.port = backend, host, port
        self.log = CallLog(store)
        self._episodes: dict[str, _Episode] = {}
        self._runner: web.AppRunner | None = None

    # -- episodes ------------------------------------------------------------------------------------

    def open_episode(self, episode_id: str) -> str:
        """Start taking calls for ``episode_id``; returns its key (the agent's API key).

        Raises:
            ValueError: the id was opened before (an id names one episode, once), or holds a ``/``.
        """
        if not episode_id or "/" in episode_id:
            raise ValueError(f"episode id {episode_id!r}: expected a non-empty id without '/'")
        if episode_id in self._episodes:
            raise ValueError(f"episode id {episode_id!r} was already opened on this proxy")
        key = "cf-" + secrets.token_urlsafe(24)
        self._episodes[episode_id] = _Episode(key)
        return key

    def close_episode(self, episode_id: str) -> None:
        """Refuse further calls for ``episode_id`` (its calls stay recorded)."""
        episode = self._episodes.get(episode_id)
        if episode is not None:
            episode.open = False
            episode.served.clear()
            episode.bodies.clear()

    def base_url(self, episode_id: str) -> str:
        """The OpenAI base URL an agent uses for ``episode_id``."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/e/{episode_id}/v1"

    # -- serving -------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (for embedding in another server)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/e/{episode_id}/v1/chat/completions", self._completions)
        app.router.add_get("/e/{episode_id}/v1/models", self._models)
        app.router.add_route("*", "/{path:.*}", self._elsewhere)
        return app

    async def start(self) -> None:
        """Listen on ``host:port`` (the chosen port is in :attr:`port` afterwards)."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def aclose(self) -> None:
        """Stop listening, finish the writes in progress and release the backend."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.log.aclose()
        await self.backend.aclose()

    async def __aenter__(self) -> RecordingProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _elsewhere(self, request: web.Request) -> web.Response:
        """Any other URL: an OpenAI-style 404 saying what the base URL must look like."""
        error = ProxyError(
            f"{request.method} {request.path}: not served here; an agent's base URL names its episode, "
            f"http://{request.host}/e/<episode_id>/v1, and it may POST /chat/completions or GET /models",
            status=404,
            code="unknown_url",
        )
        return web.json_response(error.body(), status=404)

    async def _models(self, request: web.Request) -> web.Response:
        self._episode(request)
        return web.json_response(
            {"object": "list", "data": [{"id": n, "object": "model"} for n in sorted(self.backend.model_names)]}
        )

    def _episode(self, request: web.Request) -> _Episode:
        episode_id = request.match_info["episode_id"]
        episode = self._episodes.get(episode_id)
        if episode is None or not episode.open:
            state = "unknown" if episode is None else "closed"
            raise UnknownEpisodeError(
                f"episode {episode_id!r} is {state}: this proxy takes calls only for open episodes",
                status=404,
                code="episode_not_found",
            )
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not secrets.compare_digest(given.encode(), episode.key.encode()):
            raise ProxyError(
                f"the API key is not episode {episode_id!r}'s key",
                status=401,
                code="invalid_api_key",
                kind="authentication_error",
            )
        return episode

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        started, clock = _utcnow(), time.perf_counter()
        episode_id = request.match_info["episode_id"]
        raw = await request.read()
        digest = hashlib.sha256(raw).hexdigest()
        episode = self._episodes.get(episode_id)
        seq = -1
        if episode is not None:
            seq, episode.calls = episode.calls, episode.calls + 1
        call = ProxyCall(
            call_id=uuid.uuid4().hex,
            episode_id=episode_id,
            seq=seq,
            backend=self.backend.kind,
            model_id=self.backend.model_id,
            status=200,
            started_at=started,
            attempt=_int(request.headers.get("x-stainless-retry-count")),
        )
        if episode is not None:
            call.retry_of = episode.bodies.get(digest)
            episode.bodies[digest] = call.call_id
        try:
            self._episode(request)
            assert episode is not None
            chat = self._parse(raw, call)
            CURRENT_EPISODE.set(episode_id)  # this request's task only
            generation = await self.backend.generate(chat, episode.served)
        except ProxyError as exc:
            call.status, call.error_code, call.error_param, call.error = exc.status, exc.code, exc.param, exc.message
            call.response = exc.body()
            if call.request is None:
                call.request = _request_record(raw)
            call.latency_s = time.perf_counter() - clock
            await self.log.record(call)
            return web.json_response(exc.body(), status=exc.status)
        reply = _completion(call.call_id, chat.model, generation)
        call.response = reply
        call.finish_reason = generation.finish_reason
        call.prompt_ids, call.completion_ids, call.logprobs = (
            generation.prompt_ids,
            generation.completion_ids,
            generation.logprobs,
        )
        call.trainable = generation.trainable
        call.continued_from = generation.continued_from
        call.applied_sampling = generation.applied_sampling
        call.prompt_tokens, call.completion_tokens = generation.prompt_tokens, generation.completion_tokens
        call.latency_s = time.perf_counter() - clock
        try:
            await self.log.record(call)
        except Exception as exc:  # noqa: BLE001  (unrecorded: the agent gets an error, not the reply)
            error = ProxyError(
                f"the call could not be recorded: {exc}", status=500, kind="server_error", code="not_recorded"
            )
            return web.json_response(error.body(), status=500)
        if episode.open:
            episode.served.append(ServedCall(call.call_id, chat.messages, chat.tools, generation.message, generation))
            del episode.served[:-4]  # continuation looks back this far
        if chat.stream:
            return await _stream(request, reply, chat.body)
        return web.json_response(reply, dumps=to_json)

    def _parse(self, raw: bytes, call: ProxyCall) -> ChatRequest:
        """The request as a :class:`ChatRequest`, or a :class:`ProxyError` naming the field at fault."""
        try:
            body = from_json(raw)
        except ValueError as exc:
            raise ProxyError(f"body: the request body is not JSON ({exc})", param="body") from None
        if not isinstance(body, dict):
            raise ProxyError(f"body: expected a JSON object, got {type(body).__name__}", param="body")
        call.request = body
        call.model = body.get("model") if isinstance(body.get("model"), str) else None
        call.stream = body.get("stream") is True
        call.requested_sampling = {k: body[k] for k in SAMPLING_FIELDS if k in body}
        model = body.get("model")
        if not isinstance(model, str) or model not in self.backend.model_names:
            raise ProxyError(
                f"model: {model!r} is not served here; expected one of {', '.join(sorted(self.backend.model_names))}",
                status=404,
                param="model",
                code="model_not_found",
            )
        n = body.get("n", 1)
        if n is not None and n != 1:
            raise ProxyError(f"n: {n!r} choices asked for; this proxy answers one (n = 1)", param="n")
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and "role" in m for m in messages)
        ):
            raise ProxyError("messages: expected a non-empty list of messages, each with a role", param="messages")
        tools = body.get("tools") or []
        if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function" for t in tools):
            raise ProxyError('tools: expected a list of {"type": "function", "function": {...}} tools', param="tools")
        choice = body.get("tool_choice")
        names = {(t.get("function") or {}).get("name") for t in tools}
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            if wanted not in names:
                raise ProxyError(f"tool_choice: names {wanted!r}, which is not among the tools", param="tool_choice")
        elif choice not in (None, "auto", "none", "required"):
            raise ProxyError(
                f"tool_choice: {choice!r}; expected auto, none, required or a named function", param="tool_choice"
            )
        if "stream" in body and not isinstance(body["stream"], bool):
            raise ProxyError(f"stream: {body['stream']!r}; expected true or false", param="stream")
        return ChatRequest(
            model=model,
            messages=messages,
            tools=tools,
            tool_choice=choice,
            stream=call.stream,
            requested_sampling=call.requested_sampling,
            body=body,
        )


def _completion(call_id: str, model: str, generation: Generation) -> dict[str, Any]:
    prompt = generation.prompt_tokens or 0
    completion = generation.completion_tokens or 0
    return {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": generation.message, "finish_reason": generation.finish_reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def stream_chunks(reply: dict[str, Any], include_usage: bool = False) -> list[dict[str, Any]]:
    """A chat completion as the ``chat.completion.chunk`` objects a streamed request receives: the role,
    the reasoning and content, each tool call whole, the finish reason, and the usage if asked for."""
    choice = reply["choices"][0]
    message = choice["message"]
    base = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"], "model": reply["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        chunks.append(chunk({"reasoning_content": message["reasoning_content"]}))
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": i, **call}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": reply["usage"]})
    return chunks


async def _stream(request: web.Request, reply: dict[str, Any], body: dict[str, Any]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
    for chunk in stream_chunks(reply, bool(options.get("include_usage"))):
        await response.write(b"data: " + to_json(chunk).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _request_record(raw: bytes) -> Any:
    try:
        return from_json(raw)
    except ValueError:
        return {"unparsed": raw[:100_000].decode("utf-8", errors="replace")}


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _utcnow() -> Any:
    from campflow.storage.store import now

    return now()
