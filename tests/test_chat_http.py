"""The endpoint policy's own HTTP client retries and fails as the openai SDK does (campflow/agents/chat_http.py).

One local aiohttp server answers each request as the test scripts it (status, headers, body, a stall), so
every branch of the retry policy is a real HTTP exchange: what is retried and how often, whose message an
error carries, a context overflow, a body that is not JSON, a stall past the timeout, a refused connection.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from campflow.agents.openai_policy import EndpointPolicy
from campflow.errors import ContextOverflowError, PolicyError

OK = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}],
            },
        }
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3},
}


class Scripted:
    """Answers the n-th request with the n-th scripted answer (the last one repeats)."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []
        self.seen: list[dict[str, Any]] = []  # headers of each request

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        await request.read()
        answer = self.answers[min(len(self.seen), len(self.answers)) - 1]
        if answer.get("stall"):
            await asyncio.sleep(answer["stall"])
        if "json" in answer:
            return web.json_response(answer["json"], status=answer.get("status", 200), headers=answer.get("headers"))
        return web.Response(body=answer["body"], status=answer.get("status", 200), headers=answer.get("headers"))


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Scripted, str]]:
    scripted = Scripted()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", scripted.handle)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield scripted, f"http://127.0.0.1:{port}/v1"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)  # ends the handlers still stalling
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _ask(url: str, answers: list[dict[str, Any]], scripted: Scripted, **kwargs: Any) -> Any:
    scripted.answers, scripted.seen = answers, []
    policy = EndpointPolicy("m", base_url=url, api_key="k", **{"max_retries": 2, "timeout": 5.0, **kwargs})

    async def ask() -> Any:
        try:
            return await policy.respond([{"role": "user", "content": "hi"}], [], None)  # type: ignore[arg-type]
        finally:
            await policy.aclose()

    return asyncio.run(ask())


def test_the_endpoint_client_retries_and_fails_as_the_sdk_does(server) -> None:
    scripted, url = server
    fast = {"retry-after-ms": "1"}  # the server's own delay, honoured instead of the backoff

    reply = _ask(
        url, [{"status": 429, "json": {"error": {"message": "slow down"}}, "headers": fast}, {"json": OK}], scripted
    )
    assert reply.tool_calls[0]["function"]["name"] == "submit" and (reply.prompt_tokens, reply.completion_tokens) == (
        7,
        3,
    )
    assert len(scripted.seen) == 2
    headers = {k.lower(): v for k, v in scripted.seen[0].items()}
    assert headers["authorization"] == "Bearer k" and headers["content-type"] == "application/json"

    # 408, 409, 429 and 5xx are retried max_retries times; the last answer's own message is the error
    for status in (408, 409, 500, 503):
        with pytest.raises(PolicyError, match=rf"^endpoint {url} \(model m\) answered HTTP {status}: busy$"):
            _ask(url, [{"status": status, "json": {"error": {"message": "busy"}}, "headers": fast}], scripted)
        assert len(scripted.seen) == 3, status

    # other statuses are the answer at once, as are a server's x-should-retry: false and a Retry-After past 2 min
    for answer in (
        {"status": 404, "json": {"error": {"message": "The model `m` does not exist."}}},
        {"status": 500, "json": {"error": {"message": "busy"}}, "headers": {"x-should-retry": "false"}},
        {"status": 429, "json": {"error": {"message": "busy"}}, "headers": {"retry-after": "3600"}},
    ):
        with pytest.raises(PolicyError, match=rf"answered HTTP {answer['status']}: "):
            _ask(url, [answer], scripted)
        assert len(scripted.seen) == 1, answer
    # x-should-retry: true retries even a status that is otherwise final; a body without a message is quoted
    with pytest.raises(PolicyError, match=r"answered HTTP 400: Error code: 400 - \{'detail': 'no'\}$"):
        _ask(url, [{"status": 400, "json": {"detail": "no"}, "headers": {**fast, "x-should-retry": "true"}}], scripted)
    assert len(scripted.seen) == 3

    # a prompt too long for the model is a context overflow, not an infrastructure failure
    too_long = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."
    with pytest.raises(ContextOverflowError, match="^m: This model's maximum context length"):
        _ask(url, [{"status": 400, "json": {"error": {"message": too_long}}}], scripted)

    with pytest.raises(PolicyError, match=rf"^endpoint {url} \(model m\) returned a body that is not JSON"):
        _ask(url, [{"body": b"<html>gateway</html>"}], scripted)
    with pytest.raises(PolicyError, match="returned no choices"):
        _ask(url, [{"json": {"choices": []}}], scripted)

    # a stall past the timeout is retried, then reported with the attempts it took
    with pytest.raises(PolicyError, match=r"timed out after 2 attempt\(s\) of 0.2s$"):
        _ask(url, [{"stall": 1.0, "json": OK}], scripted, timeout=0.2, max_retries=1)
    assert len(scripted.seen) == 2
    # ... and an answer in time after a stall is used
    assert _ask(url, [{"stall": 1.0, "json": OK}, {"json": OK}], scripted, timeout=0.2, max_retries=1).tool_calls


def test_a_refused_connection_is_not_retried() -> None:
    with socket.socket() as s:  # bound, then closed: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    policy = EndpointPolicy("m", base_url=url, max_retries=4, timeout=5.0)

    async def ask() -> None:
        try:
            await policy.respond([{"role": "user", "content": "hi"}], [], None)  # type: ignore[arg-type]
        finally:
            await policy.aclose()

    with pytest.raises(PolicyError, match=rf"^cannot reach endpoint {url} \(model m\): connection refused"):
        asyncio.run(ask())
