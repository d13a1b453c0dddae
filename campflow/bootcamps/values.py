"""The values a bootcamp works with: params, instances, state, tool arguments, actions, observations, scores.

Bootcamps import them from :mod:`campflow.bootcamps.base`, which re-exports them and says how each is
used; their definitions live here so that base.py stays short enough to read in one sitting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from campflow.bootcamps.messages import clip
from campflow.serialization import canonical_json


class Params(BaseModel):
    """Base of every bootcamp's params model: the difficulty and variant knobs of one instance.

    Subclasses add fields with bounds (``Field(ge=..., le=...)``) and a one-line description each;
    the synthesizer proposes values of exactly this schema, so bounds are the contract.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: int = Field(1, ge=1, le=10, description="difficulty tier these params belong to")


class ToolArgs(BaseModel):
    """Base of every tool's argument model: unknown arguments are an error, not silently dropped.

    Each field is one argument the agent passes; its ``description`` is what the agent reads.
    """

    model_config = ConfigDict(extra="forbid")


class NoArgs(ToolArgs):
    """Arguments of a tool that takes none."""


P = TypeVar("P", bound=Params)


@dataclass
class State:
    """The mutable world of one episode. Bootcamps subclass it (a dataclass) with their own fields.

    ``finished`` is set by the engine when a final tool returns; ``answer`` is where submit-style
    tools put what was submitted (None until then, and still None when :meth:`Bootcamp.score` runs
    after an episode that ended without a final tool).
    """

    finished: bool = False
    answer: Any = None


S = TypeVar("S", bound=State)


@dataclass(frozen=True)
class Instance(Generic[P]):
    """One task: the params and seed it came from, the generated identity and its content-hash id.

    ``data`` is JSON-able and fully determines the task; ``id`` is a hash of (bootcamp, version,
    params, seed), so the same id always means the same task.
    """

    id: str
    bootcamp: str
    version: str
    params: P
    seed: int
    data: Mapping[str, Any]

    @property
    def level(self) -> int:
        """The difficulty tier of this instance's params."""
        return self.params.level


@dataclass
class Observation:
    """What a tool call returns to the agent.

    Attributes:
        text: the observation as text (always present; for vision bootcamps a caption).
        image: PNG bytes shown to the agent as an image content part, or None. Not shown when
            ``final`` is True (the episode is over).
        final: True when this call ends the episode (submit, done, checkout).
    """

    text: str
    image: bytes | None = None
    final: bool = False


@dataclass(frozen=True)
class Action:
    """A tool call as the oracle (or a test policy) means it: a tool name and its JSON-able arguments."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Score:
    """The reward layer's verdict on one episode.

    Attributes:
        reward: in [0, 1]; partial credit where the task has natural parts.
        success: whether the task counts as solved.
        details: JSON-able specifics; on failure include ``reason`` (a short slug such as ``carry``,
            ``wrong_cell``), which failure mining turns into the category ``wrong_answer:<reason>``.
    """

    reward: float
    success: bool
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.reward <= 1.0:
            raise ValueError(f"reward must lie in [0, 1], got {self.reward!r}")


def instance_id(bootcamp: str, version: str, params: Params, seed: int) -> str:
    """Content-hash id of an instance: the same (bootcamp, version, params, seed), the same id."""
    payload = canonical_json([bootcamp, version, params.model_dump(mode="json"), int(seed)])
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per pydantic error: ``key = value: what was expected``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        if err["type"] == "missing":
            parts.append(f"{loc} is required")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{loc} is not a known field")
        else:
            parts.append(f"{loc} = {clip(repr(err.get('input')), 60)}: {err['msg']}")
    return "; ".join(parts)
