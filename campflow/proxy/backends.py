"""What answers the proxy's calls: the in-process local model, or an OpenAI-compatible endpoint.

A backend turns one validated chat request into a :class:`Generation`: the assistant message, and,
where the backend can know them, the prompt ids the model saw, the completion ids it sampled and their
logprobs. Sampling settings are the backend's own (the policy being evaluated or trained); what the agent
asked for is recorded beside them, never applied.

- :class:`~campflow.proxy.local.LocalBackend` renders the conversation with the model's chat template once, generates from
  those ids (batched across episodes, on a worker thread) and parses tool calls from the sampled text with
  the engine's parser. When a conversation only appends to an earlier call of its episode, the new prompt
  is that call's prompt and completion ids followed by the template's rendering of what was appended:
  the model sees its own tokens, not its reply tokenized again, and the calls merge into one sequence.
- :class:`~campflow.proxy.vllm.VllmTokensBackend` does the same rendering and continuation for a vLLM
  server, which only samples after the prompt ids it is sent.
- :class:`EndpointBackend` forwards the request to a chat-completions endpoint. With ``token_ids`` (vLLM)
  it asks for the prompt and completion ids (``return_token_ids``) and logprobs; any other endpoint is
  recorded as text only (its episodes are evaluated and mined, never trained on as tokens).
"""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from campflow.errors import CampflowError
from campflow.serialization import from_json, to_json

# the OpenAI request fields that choose how tokens are sampled: recorded as asked, never applied
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "max_tokens",
    "max_completion_tokens",
    "stop",
)


#: the episode whose call a backend is answering (set by the proxy around :meth:`Backend.generate`): a backend
#: that answers per episode (the demonstrator, :mod:`campflow.proxy.teacher`) reads it
CURRENT_EPISODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("campflow_proxy_episode", default=None)


class ProxyError(CampflowError):
    """A request the proxy cannot serve, answered as an OpenAI-style error.

    Args:
        message: one line naming the bad value and what was expected.
        status: the HTTP status.
        param: the request field at fault (OpenAI's ``param``), if any.
        code: OpenAI's ``code`` (``model_not_found``, ``context_length_exceeded``, ...).
        kind: OpenAI's ``type`` (``invalid_request_error``, ``authentication_error``, ``server_error``).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.code, self.kind = message, status, param, code, kind

    def body(self) -> dict[str, Any]:
        """The error as OpenAI answers it: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(slots=True)
class ChatRequest:
    """A validated chat-completions request (one choice)."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: Any
    stream: bool
    requested_sampling: dict[str, Any]
    body: dict[str, Any]  # the request as sent


@dataclass(slots=True)
class Generation:
    """One answered call.

    Attributes:
        message: the assistant message returned (``content``, ``tool_calls``, ``reasoning_content``).
        finish_reason: ``stop``, ``length`` or ``tool_calls``.
        prompt_ids / completion_ids: the ids the model saw and sampled (the stop token included when it
            sampled one); None where the backend cannot know them.
        logprobs: per completion id, its log-probability under the distribution it was sampled from.
        applied_sampling: the settings generation really used.
        prompt_tokens / completion_tokens: usage.
        continued_from: the call whose prompt and completion ids begin this prompt (local backend).
        prompt_text / completion_text: rendered texts, kept for the next call's continuation check.
    """

    message: dict[str, Any]
    finish_reason: str
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    applied_sampling: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    continued_from: str | None = None
    prompt_text: str | None = None

    @property
    def trainable(self) -> bool:
        """Whether the ids are the model's own: prompt and completion both known, logprobs for each id."""
        return (
            self.prompt_ids is not None
            and bool(self.completion_ids)
            and self.logprobs is not None
            and len(self.logprobs) == len(self.completion_ids or [])
        )


@dataclass(slots=True)
class ServedCall:
    """What an episode's earlier answered call leaves for the next one to continue from."""

    call_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply: dict[str, Any]
    generation: Generation


class Backend(ABC):
    """The policy behind the proxy."""

    #: ``local``, ``vllm`` or ``endpoint``: what the store records as the call's backend
    kind: str = "endpoint"
    #: the policy's id in the store
    model_id: str = "policy"
    #: model names a request may use
    model_names: frozenset[str] = frozenset()

    @abstractmethod
    async def generate(self, request: ChatRequest, history: Sequence[ServedCall]) -> Generation:
        """Answer ``request``; ``history`` holds the episode's earlier answered calls, newest last.

        Raises:
            ProxyError: a request this backend cannot serve (the message names the field).
        """

    async def aclose(self) -> None:  # noqa: B027 -- optional: a backend may hold nothing
        """Release what the backend holds (connections, the batching task)."""


# -- an OpenAI-compatible endpoint -------------------------------------------------------------------------


class EndpointBackend(Backend):
    """A chat-completions endpoint: a launched or running vLLM (``token_ids=True``) or any other server.

    Args:
        base_url: the endpoint's base URL (``http://host:port/v1``).
        model: the model name sent upstream and recorded as the model id.
        api_key: the upstream key, if it needs one.
        token_ids: ask for ``return_token_ids`` and logprobs (vLLM); calls are trainable only when the
            reply carries both ids and a logprob per completion id.
        sampling: the settings every call is sent with (the agent's are replaced).
        timeout: seconds before an upstream call is answered with a 504.
        model_names: names a request may use (default: ``model``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        token_ids: bool = False,
        sampling: Mapping[str, Any] | None = None,
        timeout: float = 120.0,
        model_names: Sequence[str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.kind = "vllm" if token_ids else "endpoint"
        self.model_names = frozenset(model_names or (model,))
        self.api_key, self.token_ids = api_key, token_ids
        self.sampling = dict(sampling or {"temperature": 1.0})
        self.timeout = timeout
        self._session: Any = None

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON object an upstream POST answers with status 200.

        Raises:
            ProxyError: the upstream's own error (its status and message), a 504 when it did not answer
                within ``timeout``, a 502 when it cannot be reached or answers with something not JSON.
        """
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with self._session.post(
                f"{self.base_url}{path}", data=to_json(body), headers=headers | _JSON
            ) as response:
                raw = await response.read()
                status = response.status
        except TimeoutError:
            raise ProxyError(
                f"the upstream endpoint {self.base_url} did not answer within {self.timeout:g}s",
                status=504,
                kind="server_error",
                code="upstream_timeout",
            ) from None
        except aiohttp.ClientError as exc:
            raise ProxyError(
                f"the upstream endpoint {self.base_url} cannot be reached: {exc}",
                status=502,
                kind="server_error",
                code="upstream_unreachable",
            ) from None
        try:
            data = from_json(raw)
        except ValueError:
            data = None
        if status != 200 or not isinstance(data, dict):
            error = data.get("error") if isinstance(data, dict) else None
            error = error if isinstance(error, dict) else {}
            raise ProxyError(
                f"upstream answered HTTP {status}: {error.get('message') or raw[:200].decode(errors='replace')}",
                status=status if status != 200 else 502,
                param=error.get("param"),
                code=error.get("code") or "upstream_error",
                kind=error.get("type") or "server_error",
            )
        return data

    async def generate(self, request: ChatRequest, history: Sequence[ServedCall]) -> Generation:
        body = {k: v for k, v in request.body.items() if k not in SAMPLING_FIELDS and k not in ("stream", "n")}
        body.update(self.sampling, model=self.model_id, stream=False)
        body.pop("stream_options", None)
        if self.token_ids:
            body.update(return_token_ids=True, logprobs=True, top_logprobs=0)
        data = await self.post("/chat/completions", body)
        choice = (data.get("choices") or [{}])[0]
        message = {k: v for k, v in (choice.get("message") or {}).items() if v is not None or k == "content"}
        message.setdefault("role", "assistant")
        usage = data.get("usage") or {}
        gen = Generation(
            message=message,
            finish_reason=choice.get("finish_reason") or "stop",
            applied_sampling=dict(self.sampling),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )
        if self.token_ids:
            gen.prompt_ids = data.get("prompt_token_ids")
            gen.completion_ids = choice.get("token_ids")
            content = (choice.get("logprobs") or {}).get("content")
            gen.logprobs = [float(t["logprob"]) for t in content] if content else None
        return gen

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


_JSON = {"Content-Type": "application/json"}
