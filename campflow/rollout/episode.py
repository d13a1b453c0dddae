"""Episodes and how they end."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from campflow.serialization import to_json_bytes


class Termination(StrEnum):
    """Why an episode ended. Model failures are kept apart from infrastructure failures."""

    SOLVED = "solved"  # a final tool was called and the reward layer says solved
    WRONG_ANSWER = "wrong_answer"  # a final tool was called, not solved
    MAX_TURNS = "max_turns"  # the turn budget ran out before a final tool
    INVALID_TOOL_CALL = "invalid_tool_call"  # too many consecutive turns of unusable tool calls
    FORMAT_ERROR = "format_error"  # too many consecutive turns without a parseable tool call
    CONTEXT_OVERFLOW = "context_overflow"  # the conversation outgrew the token budget or the model
    TIMEOUT = "timeout"  # the episode's wall-clock budget ran out
    AGENT_ERROR = "agent_error"  # a user's agent program failed (non-zero exit, traceback) before the episode ended
    INFRA_ERROR = "infra_error"  # the endpoint or our own code failed; never the model's fault

    @property
    def is_model_failure(self) -> bool:
        """Whether this outcome says something about the model (and so feeds failure mining)."""
        return self in MODEL_FAILURES

    @property
    def is_retryable(self) -> bool:
        """Whether re-running the same run id should run this episode again."""
        return self in RETRYABLE


# The taxonomy's groups: every termination but SOLVED is in exactly one. This is the one place they are
# written down; the store's views and queries render them as SQL (storage.schema.sql_values).
MODEL_FAILURES = frozenset(
    {
        Termination.WRONG_ANSWER,
        Termination.MAX_TURNS,
        Termination.INVALID_TOOL_CALL,
        Termination.FORMAT_ERROR,
        Termination.CONTEXT_OVERFLOW,
        # the agent under evaluation is the model and its program: a program that fails is counted against
        # it, kept (stderr tail in ``error``) and mined, never retried
        Termination.AGENT_ERROR,
    }
)
# A wall-clock timeout says more about the machine than the model, so it is retried, not mined.
RETRYABLE = frozenset({Termination.INFRA_ERROR, Termination.TIMEOUT})


def episode_id(run_id: str, instance_id: str, sample: int) -> str:
    """Stable id of the ``sample``-th episode of an instance in a run."""
    return hashlib.sha256(f"{run_id}|{instance_id}|{sample}".encode()).hexdigest()[:24]


@dataclass
class Episode:
    """One finished episode: outcome, accounting and the full transcript (OpenAI message format)."""

    run_id: str
    instance_id: str
    bootcamp: str
    model_id: str
    sample: int
    reward: float
    success: bool
    termination: Termination
    turns: int
    tool_calls: int
    invalid_calls: int
    prompt_tokens: int
    completion_tokens: int
    latency_s: float  # time spent waiting for the policy
    wall_s: float  # the whole episode
    transcript: list[dict[str, Any]]
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    level: int = 0
    id: str = field(default="", init=False)  # episode_id(run_id, instance_id, sample): one id per key
    _transcript_json: bytes | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.id = episode_id(self.run_id, self.instance_id, self.sample)

    def transcript_json(self) -> bytes:
        """The transcript as UTF-8 JSON (serialized once, then kept)."""
        if self._transcript_json is None:
            self._transcript_json = to_json_bytes(self.transcript)
        return self._transcript_json

    def freeze(self) -> Episode:
        """Serialize the transcript now. Rollout workers call this before handing episodes back, so
        the one process that writes the store does not serialize every transcript itself (and
        episodes travel from Ray or Dask workers as one string each instead of nested objects)."""
        self.transcript_json()
        return self

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens over all turns."""
        return self.prompt_tokens + self.completion_tokens
