"""A policy behind any OpenAI-compatible chat endpoint (vLLM, SGLang, Ollama, OpenAI).

With many episodes in flight the client's CPU per call, not the network, is the ceiling. The default
transport (``aiohttp``) posts the already-JSON-shaped body on one aiohttp session and reads the raw
response as JSON, with the ``openai`` SDK's retry policy and nothing else of its request layer
(:mod:`campflow.agents.chat_http`: ~0.5 ms of CPU a call where the SDK's own ``post`` on its aiohttp
client took ~1.4 ms, ``benchmarks/bench_concurrency.py``). ``transport: httpx`` sends through the SDK
itself (its httpx client, the same retries and errors), for what only the SDK's transport handles, such
as a proxy named in the environment. Both skip ``chat.completions.create``, which walks every message
and tool schema through the SDK's TypedDict transform and builds pydantic models from the response.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NoReturn

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.chat_http import ChatHTTP, EndpointStatusError
from campflow.errors import ContextOverflowError, PolicyError
from campflow.serialization import from_json, to_json_bytes

try:  # the raw response type the SDK accepts as `cast_to`: httpx2 for openai>=3, httpx before
    from httpx2 import Response as _HttpResponse
except ImportError:  # pragma: no cover
    from httpx import Response as _HttpResponse

# The SDK's telemetry headers (language, OS, arch, runtime): no server needs them, and every header is
# copied and normalized several times per request on the client; leaving these seven out measured
# 15-25% less client CPU per call (benchmarks/bench_concurrency.py). `openai.omit` is the SDK's own way
# to drop a default header.
_PLATFORM_HEADERS = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
)
_CONTEXT_MARKERS = ("context length", "context_length", "context window", "maximum context", "too many tokens")


class EndpointPolicy(Policy):
    """Chat completions with native tool calls against ``base_url``.

    Args:
        model: the model name the endpoint serves.
        base_url: e.g. ``http://localhost:8000/v1``; None means the SDK default (OpenAI).
        api_key: the key, or None to read ``api_key_env`` (many local servers need none).
        temperature, max_tokens, top_p: sampling settings sent with every request.
        timeout: seconds per request before it counts as timed out (and is retried).
        max_retries: retries after the first attempt, with backoff, before ``infra_error``.
        transport: ``aiohttp`` (lower CPU per call) or ``httpx`` (the SDK default).
        extra_body: extra JSON fields for the endpoint (e.g. vLLM's ``chat_template_kwargs``).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int | None = 1024,
        top_p: float | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        transport: str = "aiohttp",
        extra_body: dict[str, Any] | None = None,
        send_reasoning: bool = False,
    ) -> None:
        if transport not in ("aiohttp", "httpx"):
            raise ValueError(f"transport = {transport!r}: expected 'aiohttp' or 'httpx'")
        self.model = model
        self.model_id = model
        self.base_url = base_url
        self.api_key = api_key or os.environ.get(api_key_env) or "not-needed"
        self.sampling = {
            k: v
            for k, v in {"temperature": temperature, "max_tokens": max_tokens, "top_p": top_p}.items()
            if v is not None
        }
        self.timeout, self.max_retries, self.transport = timeout, max_retries, transport
        self.extra_body = extra_body
        self.send_reasoning = send_reasoning
        self._client: Any = None

    def _make_client(self) -> Any:
        """The client of this policy's transport: :class:`ChatHTTP`, or the SDK's own for ``httpx``."""
        if self.transport == "aiohttp":
            base_url = self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
            return ChatHTTP(base_url, self.api_key, self.timeout, self.max_retries, self._where())
        return self._make_sdk_client()

    def _make_sdk_client(self) -> Any:
        import openai  # deferred: `campflow --help` should not pay for the SDK

        base = openai.DefaultAioHttpClient if self.transport == "aiohttp" else openai.DefaultAsyncHttpxClient
        return openai.AsyncOpenAI(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            default_headers={h: openai.omit for h in _PLATFORM_HEADERS},
            http_client=_refusals_not_retried(base)(timeout=self.timeout),
        )

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        if self._client is None:
            self._client = self._make_client()
        request: dict[str, Any] = {"model": self.model, "messages": list(messages), **self.sampling}
        if tools:
            request["tools"] = list(tools)
        if self.extra_body:
            request.update(self.extra_body)
        content = to_json_bytes(request)
        if type(self._client) is ChatHTTP:
            try:
                body = await self._client.post(content)
            except EndpointStatusError as exc:
                self._raise_status(
                    exc.status, exc.message, f"{self._where()} answered HTTP {exc.status}: {exc.message}"
                )
        else:
            body = await self._post_sdk(content)
        return _reply_from_body(body, self._where())

    async def _post_sdk(self, content: bytes) -> Any:
        import openai

        try:
            # the client's default headers already say Content-Type: application/json
            response = await self._client.post("/chat/completions", content=content, cast_to=_HttpResponse)
            return from_json(response.content)
        except openai.APIStatusError as exc:
            self._raise_status(
                exc.status_code,
                _error_message(exc),
                describe_sdk_error(exc, self._where(), self.timeout, self.max_retries),
            )
        except openai.OpenAIError as exc:
            raise PolicyError(describe_sdk_error(exc, self._where(), self.timeout, self.max_retries)) from None
        except ValueError as exc:  # json's and orjson's decode errors, bad UTF-8
            raise PolicyError(f"{self._where()} returned a body that is not JSON: {exc}") from None

    def _raise_status(self, status: int, message: str, described: str) -> NoReturn:
        """An error status as :class:`ContextOverflowError` when it says the prompt is too long, else
        :class:`PolicyError` (``described``)."""
        if status in (400, 413) and any(m in message.lower() for m in _CONTEXT_MARKERS):
            raise ContextOverflowError(f"{self.model}: {message}") from None
        raise PolicyError(described) from None

    def _where(self) -> str:
        return f"endpoint {self.base_url or 'api.openai.com'} (model {self.model})"

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


def _reply_from_body(body: Any, where: str) -> PolicyReply:
    try:
        choice = body["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise PolicyError(f"{where} returned no choices: {str(body)[:200]}") from None
    usage = body.get("usage") or {}
    return PolicyReply(
        content=message.get("content"),
        tool_calls=message.get("tool_calls") or None,
        reasoning=message.get("reasoning_content") or message.get("reasoning"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        finish_reason=choice.get("finish_reason"),
    )


def _refusals_not_retried(base: type) -> type:
    """``base`` (an SDK HTTP client class) turning a refused connection into the SDK's
    ``APIConnectionError`` at once.

    The SDK retries every connection error with backoff (and the aiohttp transport it ships even
    reports a refused connection as a connect timeout), so a URL where nothing listens cost every
    episode all its retries and ended as "timed out after 5 attempts". Nothing listening is not
    worth waiting for; an ``OpenAIError`` raised by the transport is passed on without a retry.
    """
    import openai

    class RefusalsNotRetried(base):  # type: ignore[misc, valid-type]
        async def send(self, request: Any, **kwargs: Any) -> Any:
            try:
                return await super().send(request, **kwargs)
            except Exception as exc:
                if _refused(exc):
                    raise openai.APIConnectionError(
                        message="connection refused (nothing listens there)", request=request
                    ) from exc
                raise

    return RefusalsNotRetried


def _refused(exc: BaseException | None) -> bool:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ConnectionRefusedError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def describe_sdk_error(exc: Exception, where: str, timeout: float, max_retries: int) -> str:
    """One line for an ``openai`` SDK error that survived the SDK's retries, naming ``where``."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return f"{where} answered HTTP {exc.status_code}: {_error_message(exc)}"
    if isinstance(exc, openai.APITimeoutError):
        return f"{where} timed out after {max_retries + 1} attempt(s) of {timeout:g}s"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach {where}: {exc}"
    return f"{where} failed: {type(exc).__name__}: {exc}"


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return str(getattr(exc, "message", exc))
