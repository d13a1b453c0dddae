"""The production proxy (``campflow proxy serve``): a deployed agent's calls recorded on their way to its model.

The agent's OpenAI base URL points here instead of at its model server; every request is forwarded to
the upstream as sent (the API key included, never recorded) and the upstream's answer comes back as
the upstream gave it: its status, its body, its stream. Chat completions are recorded, grouped into
episodes by a conversation id:

- in the path: base URL ``http://HOST:PORT/c/<conversation_id>/v1``;
- or in a header: base URL ``http://HOST:PORT/v1`` and ``X-Conversation-Id: <conversation_id>``;
- neither: the call is an episode of its own (``call-<hex>``).

Each call is recorded as :mod:`campflow.proxy.records` records a proxy call (``backend`` is
``upstream``, text only, never trained on as tokens), with ``upstream_latency_s`` (from the request sent
to the last byte received) kept apart from the proxy's own time (``latency_s`` minus that). Records are
redacted as configured (:mod:`campflow.proxy.redaction`) and appended to the spool
(:mod:`campflow.proxy.spool`) before the reply is sent; the store gets them from the spool in the
background, so a store that cannot be written never holds a reply up and loses nothing.

The application reports how an episode went with ``POST /episodes/<id>/feedback`` (``{"score": 0..1,
"label": "...", "reason": "..."}``), spooled like a call; :mod:`campflow.proxy.judging` judges the rest.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow as pa
from aiohttp import web

from campflow.config import ProductionConfig
from campflow.errors import ConfigError
from campflow.proxy.backends import SAMPLING_FIELDS
from campflow.proxy.records import TABLE, ProxyCall, calls_to_arrow
from campflow.proxy.redaction import Redactor
from campflow.proxy.spool import Spool, SpoolWriter
from campflow.serialization import from_json, to_json

CONVERSATION_HEADER = "X-Conversation-Id"
BACKEND = "upstream"
# headers passed to the upstream as the agent sent them (the key among them); hop-by-hop ones are not
_FORWARDED = (
    "authorization",
    "api-key",
    "openai-organization",
    "openai-project",
    "content-type",
    "accept",
    "user-agent",
)
_FORWARDED_PREFIXES = ("x-stainless-", "openai-")
_REPLY_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-request-id")
_SEQS_KEPT = 100_000  # episodes whose call count is remembered (the oldest forgotten first)


class ProductionProxy:
    """Serves ``cfg.upstream`` to a deployed agent, recording its chat completions into ``db_path``.

    Args:
        cfg: the ``production`` config section (upstream, host, port, spool, redaction, feedback key).
        db_path: the workspace's store; opened by the background writer only, so a store that cannot
            be opened when the proxy starts is waited for, not fatal.
        lock_wait_s: how long each write waits for the store's lock before it counts as failed.
    """

    def __init__(self, cfg: ProductionConfig, db_path: str | Path, *, lock_wait_s: float = 1.0) -> None:
        if not cfg.upstream:
            raise ConfigError("production.upstream: not set; expected the model server's base URL (--upstream)")
        if not cfg.upstream.startswith(("http://", "https://")):
            raise ConfigError(
                f"production.upstream = {cfg.upstream!r}: expected an http(s) base URL, e.g. http://vllm:8000/v1"
            )
        self.cfg, self.db_path, self.lock_wait_s = cfg, Path(db_path), lock_wait_s
        self.upstream = cfg.upstream.rstrip("/")
        self.redactor = Redactor(cfg.redaction)
        self.spool = Spool(cfg.spool_dir)
        self.writer = SpoolWriter(self.spool, self._write_records)
        self.host, self.port = cfg.host, cfg.port
        self.calls = 0
        self._seqs: OrderedDict[str, int] = OrderedDict()
        self._store: Any = None
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/episodes/{episode_id}/feedback", self._feedback)
        app.router.add_post("/v1/episodes/{episode_id}/feedback", self._feedback)
        app.router.add_route("*", "/c/{conversation}/v1/{tail:.*}", self._forward)
        app.router.add_route("*", "/v1/{tail:.*}", self._forward)
        return app

    async def start(self) -> None:
        """Listen, and start copying the spool (anything left from an earlier run first) into the store."""
        timeout = aiohttp.ClientTimeout(total=self.cfg.upstream_timeout)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.writer.start()

    async def aclose(self, *, final_flush: bool = True) -> None:
        """Stop listening, then copy what the spool holds (what cannot be copied stays for the next start)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.writer.aclose(final_flush=final_flush)

    async def __aenter__(self) -> ProductionProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def url(self) -> str:
        """The base URL for calls without a conversation id in the path."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/v1"

    def conversation_url(self, conversation_id: str) -> str:
        """The base URL whose calls belong to ``conversation_id``."""
        return self.url.removesuffix("/v1") + f"/c/{conversation_id}/v1"

    # -- forwarding ----------------------------------------------------------------------------------

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        clock = time.perf_counter()
        from campflow.storage.store import now

        started = now()
        tail = request.match_info["tail"]
        raw = await request.read()
        target = f"{self.upstream}/{tail}"
        if request.query_string:
            target += "?" + request.query_string
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in _FORWARDED or k.lower().startswith(_FORWARDED_PREFIXES)
        }
        recorded = request.method == "POST" and tail.rstrip("/") == "chat/completions"
        assert self._session is not None
        upstream_s, response = 0.0, None
        sent = time.perf_counter()
        try:
            async with self._session.request(request.method, target, data=raw, headers=headers) as up:
                reply_headers = {k: v for k, v in up.headers.items() if k.lower() in _REPLY_HEADERS}
                streamed = "text/event-stream" in up.headers.get("Content-Type", "")
                if streamed:
                    response = web.StreamResponse(status=up.status, headers=reply_headers)
                    await response.prepare(request)
                    chunks, agent_gone = [], False
                    async for chunk in up.content.iter_any():
                        chunks.append(chunk)
                        if not agent_gone:
                            agent_gone = not await _send(response, chunk)
                    upstream_s = time.perf_counter() - sent
                    body = b"".join(chunks)
                else:
                    body = await up.read()
                    upstream_s = time.perf_counter() - sent
                    response = web.Response(status=up.status, body=body, headers=reply_headers)
                status = up.status
        except (aiohttp.ClientError, TimeoutError, ConnectionResetError) as exc:
            # the upstream gave no (whole) answer: the agent hears it as a gateway error, recorded like any
            upstream_s = time.perf_counter() - sent
            if response is not None and response.prepared:  # a stream cut off: the agent has what came
                if recorded:
                    conversation, episode_id = self._episode_of(request)
                    call = self._call(episode_id, started, raw, 502, b"".join(chunks), True)
                    call.error, call.error_code = f"the upstream's stream broke off: {exc}", "upstream_stream_cut"
                    call.latency_s = time.perf_counter() - clock
                    await self.spool.append(_call_record(call, upstream_s, conversation))
                    self.writer.wake()
                return response
            status, streamed = 504 if isinstance(exc, TimeoutError) else 502, False
            body = to_json(
                {
                    "error": {
                        "message": f"the upstream {self.upstream} did not answer: {type(exc).__name__}: {exc}",
                        "type": "server_error",
                        "param": None,
                        "code": "upstream_timeout" if status == 504 else "upstream_unreachable",
                    }
                }
            ).encode()
            response = web.Response(status=status, body=body, content_type="application/json")
        if recorded:
            conversation, episode_id = self._episode_of(request)
            call = self._call(episode_id, started, raw, status, body, streamed)
            call.latency_s = time.perf_counter() - clock
            record = _call_record(call, upstream_s, conversation)
            await self.spool.append(record)  # on disk before the agent hears back
            self.writer.wake()
            self.calls += 1
        if streamed and response.prepared:
            await _send(response, None)
        return response

    def _episode_of(self, request: web.Request) -> tuple[str, str]:
        in_path = request.match_info.get("conversation")
        if in_path:
            return "path", in_path
        in_header = request.headers.get(CONVERSATION_HEADER, "").strip()
        if in_header:
            return "header", in_header
        return "none", "call-" + uuid.uuid4().hex

    def _call(self, episode_id: str, started: Any, raw: bytes, status: int, body: bytes, streamed: bool) -> ProxyCall:
        seq = self._seqs.pop(episode_id, 0)
        self._seqs[episode_id] = seq + 1
        while len(self._seqs) > _SEQS_KEPT:
            self._seqs.popitem(last=False)
        try:
            sent = from_json(raw)
        except ValueError:
            sent = {"unparsed": raw[:100_000].decode("utf-8", errors="replace")}
        request = sent if isinstance(sent, dict) else {"unparsed": sent}
        response = assemble_stream(body) if streamed and status == 200 else _json_or_text(body)
        model = request.get("model") if isinstance(request.get("model"), str) else None
        call = ProxyCall(
            call_id=uuid.uuid4().hex,
            episode_id=episode_id,
            seq=seq,
            backend=BACKEND,
            model_id=(response.get("model") if isinstance(response, dict) else None) or model or "",
            status=status,
            started_at=started,
            request=self.redactor.request(request),
            model=model,
            stream=request.get("stream") is True,
            response=self.redactor.value(response),
            requested_sampling={k: request[k] for k in SAMPLING_FIELDS if k in request},
        )
        if status == 200 and isinstance(response, dict) and response.get("choices"):
            choice = response["choices"][0]
            call.finish_reason = choice.get("finish_reason")
            usage = response.get("usage") or {}
            call.prompt_tokens, call.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        elif status != 200:
            error = response.get("error") if isinstance(response, dict) else None
            error = error if isinstance(error, dict) else {}
            call.error_code = _str(error.get("code"))
            call.error_param = _str(error.get("param"))
            call.error = self.redactor.value(_str(error.get("message")) or _str(response)[:2000])
        return call

    # -- feedback ------------------------------------------------------------------------------------

    async def _feedback(self, request: web.Request) -> web.Response:
        if self.cfg.feedback_key is not None:
            given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if given != self.cfg.feedback_key:
                return _error(401, "the feedback key is wrong or missing (Authorization: Bearer <key>)", None)
        try:
            body = from_json(await request.read())
        except ValueError as exc:
            return _error(400, f"body: not JSON ({exc}); expected {{'score': 0..1, 'label': ...}}", "body")
        score = body.get("score") if isinstance(body, dict) else None
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            return _error(400, f"score: {score!r}; expected a number from 0 (failed) to 1 (succeeded)", "score")
        label, reason = body.get("label"), body.get("reason")
        for name, value in (("label", label), ("reason", reason)):
            if value is not None and not isinstance(value, str):
                return _error(400, f"{name}: {value!r}; expected a string or nothing", name)
        from campflow.proxy.judging import Judgement

        judgement = Judgement(
            episode_id=request.match_info["episode_id"],
            source="feedback",
            judge="application",
            score=float(score),
            label=self.redactor.value(label),
            reason=self.redactor.value(reason),
        )
        await self.spool.append({"kind": "judgement", "row": judgement.row()})
        self.writer.wake()
        return web.json_response({"judgement_id": judgement.judgement_id, "recorded": "spooled"}, status=202)

    # -- the store -----------------------------------------------------------------------------------

    def _write_records(self, records: Sequence[dict[str, Any]]) -> None:
        """Write spooled records to the store, skipping ids it holds (one transaction)."""
        from campflow.proxy.judging import judgements_to_arrow
        from campflow.storage.workspace import Workspace

        if self._store is None:
            self._store = Workspace(self.db_path.parent, db=self.db_path, lock_wait_s=self.lock_wait_s).store
        calls = [r["row"] for r in records if r.get("kind") == "call"]
        judgements = [r["row"] for r in records if r.get("kind") == "judgement"]
        tables = {"_cf_calls": spooled_calls_to_arrow(calls), "_cf_judgements": judgements_to_arrow(judgements)}
        with self._store.transaction(**tables) as con:
            con.execute(f"INSERT INTO {TABLE} BY NAME SELECT * FROM _cf_calls ANTI JOIN {TABLE} USING (call_id)")
            con.execute("INSERT OR IGNORE INTO production_judgements BY NAME SELECT * FROM _cf_judgements")


def _call_record(call: ProxyCall, upstream_s: float, conversation: str) -> dict[str, Any]:
    row = calls_to_arrow([call]).drop_columns(["recorded_at"]).to_pylist()[0]
    row["upstream_latency_s"], row["conversation"] = upstream_s, conversation
    return {"kind": "call", "row": row}


SPOOLED_CALL_SCHEMA = (
    calls_to_arrow([])
    .schema.append(pa.field("upstream_latency_s", pa.float64()))
    .append(pa.field("conversation", pa.string()))
)


def spooled_calls_to_arrow(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Spooled call rows (JSON: timestamps as ISO text) in the ``proxy_calls`` layout, stamped as recorded now."""
    from campflow.storage.store import now

    recorded = now()
    columns: dict[str, list[Any]] = {name: [] for name in SPOOLED_CALL_SCHEMA.names}
    for r in rows:
        for name in SPOOLED_CALL_SCHEMA.names:
            value = recorded if name == "recorded_at" else r.get(name)
            if name == "started_at" and isinstance(value, str):
                value = dt.datetime.fromisoformat(value)
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=SPOOLED_CALL_SCHEMA)


def assemble_stream(body: bytes) -> dict[str, Any]:
    """A streamed chat completion's server-sent events as the one completion they add up to.

    Content and reasoning are concatenated, tool calls gathered by index (their arguments concatenated),
    and the finish reason and usage taken from the chunks that carry them.
    """
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    out: dict[str, Any] = {"object": "chat.completion", "choices": []}
    finish = None
    for line in body.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if not data or data == "[DONE]":
            continue
        try:
            chunk = from_json(data)
        except ValueError:
            continue
        if not isinstance(chunk, dict):
            continue
        for key in ("id", "created", "model"):
            if key in chunk:
                out[key] = chunk[key]
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            for key in ("content", "reasoning_content"):
                if delta.get(key):
                    message[key] = (message.get(key) or "") + delta[key]
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    tc.get("index", len(calls)),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    out["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return out


async def _send(response: web.StreamResponse, chunk: bytes | None) -> bool:
    """Pass a chunk of a stream on (None: its end); False when the agent has gone (the call is still recorded)."""
    try:
        await (response.write(chunk) if chunk is not None else response.write_eof())
    except ConnectionResetError:
        return False
    return True


def _json_or_text(body: bytes) -> Any:
    try:
        return from_json(body)
    except ValueError:
        return {"unparsed": body[:100_000].decode("utf-8", errors="replace")}


def _str(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else to_json(value)


def _error(status: int, message: str, param: str | None) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}, status=status
    )


def serve_production(
    cfg: ProductionConfig, db_path: str | Path, on_ready: Any = None, *, lock_wait_s: float = 1.0
) -> None:
    """Run the production proxy until the process is stopped (``campflow proxy serve``); on the way
    out, what the spool holds is copied to the store if it can be, and kept for the next start if not."""
    import asyncio

    async def main() -> None:
        proxy = ProductionProxy(cfg, db_path, lock_wait_s=lock_wait_s)
        await proxy.start()
        try:
            if on_ready is not None:
                on_ready(proxy)
            await asyncio.Event().wait()
        finally:
            await proxy.aclose()

    asyncio.run(main())
