"""The policy interface every agent implements: one async call per turn."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from campflow.bootcamps.base import Bootcamp, Instance, State


@dataclass(slots=True)
class PolicyReply:
    """What a policy said in one turn, before the engine parses it.

    Attributes:
        content: the reply text (may hold ``<tool_call>`` blocks or ``<think>`` reasoning).
        tool_calls: native OpenAI tool calls, ``[{"id", "type": "function", "function": {"name",
            "arguments": <JSON string>}}]``, or None.
        reasoning: separate reasoning text (``reasoning_content``), or None.
        prompt_tokens / completion_tokens: usage as the policy reports it; None when unknown, in which
            case the engine estimates from characters.
        finish_reason: the endpoint's finish reason (``stop``, ``length``, ``tool_calls``), if any.
    """

    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@dataclass(slots=True)
class TurnContext:
    """Where a turn happens. Model policies ignore it; oracles read the live state (privileged)."""

    bootcamp: Bootcamp
    instance: Instance
    state: State
    turn: int
    sample: int


class Policy(ABC):
    """An agent: given the conversation so far and the tools, produce the next assistant turn.

    Implementations raise :class:`~campflow.errors.PolicyError` for infrastructure failures they could
    not recover from (the engine records ``infra_error``) and
    :class:`~campflow.errors.ContextOverflowError` when the conversation no longer fits.
    """

    #: identifies the model in the store (``episodes.model_id``)
    model_id: str = "policy"
    #: whether earlier turns' reasoning is sent back to the model (as its chat template does)
    send_reasoning: bool = False
    #: whether ``respond`` may wait (on a server, a batch, a lock). False for policies that compute the
    #: reply in-process without awaiting anything: no asyncio timeout can interrupt such an episode, so
    #: the engine arms no per-episode timer for them (~5-8 us an episode, an oracle turn's worth).
    suspends: bool = True

    @abstractmethod
    async def respond(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: TurnContext
    ) -> PolicyReply:
        """The next assistant turn for ``messages`` (OpenAI format) with ``tools`` (function schemas)."""

    async def aclose(self) -> None:  # noqa: B027 -- optional: most policies hold nothing to release
        """Release connections; called once when a batch of episodes is done."""
