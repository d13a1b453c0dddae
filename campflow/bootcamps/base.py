"""The bootcamp interface: four layers and an oracle.

A *bootcamp* is one family of agent tasks. Writing one means subclassing :class:`Bootcamp` and filling
in four small layers, each testable on its own:

1. **Instruction generation** -- :meth:`Bootcamp.build` turns validated params and a seed into the
   *identity* of one instance (a JSON-able dict: the maze, the numbers, the hidden word), and
   :meth:`Bootcamp.prompt` renders that identity as chat messages. :meth:`Bootcamp.generate` wraps
   ``build`` and gives the instance its content-hash id; never override it.
2. **Tools** -- methods decorated with :func:`tool`. Each takes ``(instance, state, args)`` where
   ``args`` is a validated pydantic model, and returns an :class:`Observation` (text, optionally a PNG
   image). The mutable world of one episode lives in the state object returned by
   :meth:`Bootcamp.new_state`; tools never touch the host, the network or the store. A call the world
   refuses raises :class:`~campflow.errors.ToolError` *before* changing anything.
3. **Interaction control** -- :meth:`Bootcamp.max_turns`, :meth:`Bootcamp.no_tool_call_reply` and
   :meth:`Bootcamp.feedback` decide the turn budget and what the environment says between turns. An
   episode ends when a tool returns ``Observation(final=True)`` (submit, done, checkout), when the turn
   budget is spent, or when the engine gives up on the model's output.
4. **Reward** -- :meth:`Bootcamp.score` returns a :class:`Score`: a reward in [0, 1], whether the task
   counts as solved, and details (including a short ``reason`` for failures, which failure mining
   uses). It must be deterministic and verifiable from the identity, state and transcript alone.

Every bootcamp also ships an **oracle**: :meth:`Bootcamp.oracle` returns the next correct action for a
live state. It proves instances solvable, is the teacher for SFT, and makes tests exact. Two helpers
let test and demo policies fail on purpose: :meth:`Bootcamp.perturb` (a plausible wrong step) and
:meth:`Bootcamp.wrong_answer` (a final action that scores 0).

Minimal example::

    class EchoParams(Params):
        length: int = Field(3, ge=1, le=20, description="letters in the word")

    class Echo(Bootcamp[EchoParams, State]):
        name = "echo"
        version = "1"
        params_model = EchoParams
        levels = {1: EchoParams(level=1, length=3), 2: EchoParams(level=2, length=8),
                  3: EchoParams(level=3, length=16)}

        def build(self, params, rng):
            return {"word": "".join(rng.choice("abc") for _ in range(params.length))}

        def prompt(self, instance):
            return self.chat(f"Submit the word {instance.data['word']}.")

        @tool(final=True)
        def submit(self, instance, state, args: AnswerArgs) -> Observation:
            "Submit your final answer."
            state.answer = args.answer
            return Observation("Submitted.", final=True)

        def score(self, instance, state, transcript):
            ok = state.answer == instance.data["word"]
            return Score(float(ok), ok, {} if ok else {"reason": "mismatch"})

        def oracle(self, instance, state):
            return Action("submit", {"answer": instance.data["word"]})

        def wrong_answer(self, instance, state, rng):
            return Action("submit", {"answer": instance.data["word"] + "x"})
"""

from __future__ import annotations

import base64
import functools
import hashlib
import inspect
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from campflow.bootcamps.schemas import tool_schema
from campflow.errors import InvalidParamsError

# ----------------------------------------------------------------------------------------------
# Data types


class Params(BaseModel):
    """Base of every bootcamp's params model: the difficulty and variant knobs of one instance.

    Subclasses add fields with bounds (``Field(ge=..., le=...)``) and a one-line description each;
    the synthesizer proposes values of exactly this schema, so bounds are the contract.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: int = Field(1, ge=1, le=10, description="difficulty tier these params belong to")


class ToolArgs(BaseModel):
    """Base of every tool's argument model: unknown arguments are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class NoArgs(ToolArgs):
    """Arguments of a tool that takes none."""


P = TypeVar("P", bound=Params)


@dataclass
class State:
    """The mutable world of one episode. Bootcamps subclass it with their own fields.

    ``finished`` is set by the engine when a final tool returns; ``answer`` is where submit-style
    tools put what was submitted.
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
        image: PNG bytes shown to the agent as an image content part, or None.
        final: True when this call ends the episode (submit, done, checkout).
    """

    text: str
    image: bytes | None = None
    final: bool = False


@dataclass(frozen=True)
class Action:
    """A tool call as the oracle (or a test policy) means it: a tool name and its arguments."""

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


# ----------------------------------------------------------------------------------------------
# Tools


@dataclass(frozen=True)
class Tool:
    """A tool the agent can call: its name, description, argument model and whether it ends the episode."""

    name: str
    description: str
    args_model: type[ToolArgs]
    final: bool = False
    method: Callable[..., Observation] | None = None

    def schema(self) -> dict[str, Any]:
        """The function-calling schema of this tool (built once; treat it as read-only).

        Written in the layout of transformers' ``get_json_schema`` (see campflow.bootcamps.schemas), which
        is also a valid OpenAI tool schema. Bounds and ``extra="forbid"`` are enforced on every call even
        though the schema does not spell them out.
        """
        cached = self.__dict__.get("_schema")
        if cached is None:  # built on first use and kept on the tool (which is frozen, hence object.__setattr__)
            cached = tool_schema(self.name, self.description, self.args_model)
            object.__setattr__(self, "_schema", cached)
        return cached


@functools.cache
def _system_prompt(task: str) -> str:
    return f"{SYSTEM_PREAMBLE}\n\n{task}"


@functools.cache
def _task_text(doc: str) -> str:
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p.replace("\n", " ") for p in paragraphs[:2]).strip()


def tool(fn: Callable[..., Observation] | None = None, *, final: bool = False) -> Any:
    """Mark a bootcamp method as a tool.

    The method's name is the tool's name, the first paragraph of its docstring the description, and
    the annotation of its ``args`` parameter (a :class:`ToolArgs` subclass) the argument schema.
    ``final=True`` marks tools that end the episode (submit, done, checkout).
    """

    def mark(f: Callable[..., Observation]) -> Callable[..., Observation]:
        f.__campflow_tool__ = {"final": final}  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's ``title`` keys, which only add tokens to every prompt."""
    if isinstance(schema, dict):
        return {k: _clean_schema(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


def _first_paragraph(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").split("\n\n")[0].replace("\n", " ").strip()


# ----------------------------------------------------------------------------------------------
# The base class

SYSTEM_PREAMBLE = (
    "You are an agent solving a task by calling tools. Call exactly the tools you are given, with "
    "arguments that match their schemas. Keep calling tools until the task is done."
)


class Bootcamp(Generic[P, S]):
    """One family of agent tasks, behind four layers (see the module docstring).

    Class attributes a subclass sets:
        name: registry name, lowercase (``"calculator"``).
        version: bump when generation changes, so old instance ids stop matching.
        modality: ``"text"`` or ``"vision"``.
        params_model: the :class:`Params` subclass of this bootcamp.
        levels: difficulty presets, level number -> params (at least three).
        state_model: the :class:`State` subclass (default :class:`State`).
        default_max_turns: turn budget unless :meth:`max_turns` says otherwise.
        wrong_answer_bound: the most reward :meth:`wrong_answer` can earn (0 unless partial credit
            makes a wrong final answer worth something); the property tests hold every bootcamp to it.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    modality: ClassVar[str] = "text"
    params_model: ClassVar[type[Params]] = Params
    levels: ClassVar[Mapping[int, Params]] = {}
    state_model: ClassVar[type[State]] = State
    default_max_turns: ClassVar[int] = 10
    wrong_answer_bound: ClassVar[float] = 0.0

    _tools: ClassVar[dict[str, Tool]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        tools: dict[str, Tool] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                marker = getattr(fn, "__campflow_tool__", None)
                if marker is None:
                    continue
                if any(attr in vars(base) for base in Bootcamp.__mro__):
                    raise TypeError(f"tool {cls.__name__}.{attr} would replace Bootcamp.{attr}; name the tool "
                                    "something else (e.g. describe_table rather than describe)")
                hints = get_type_hints(fn)
                args_model = hints.get("args")
                if not (isinstance(args_model, type) and issubclass(args_model, ToolArgs)):
                    raise TypeError(f"tool {cls.__name__}.{attr} must annotate `args` with a ToolArgs subclass")
                tools[attr] = Tool(attr, _first_paragraph(fn.__doc__), args_model, marker["final"], fn)
        cls._tools = tools

    # -- instruction generation -----------------------------------------------------------------

    def params(self, value: Params | Mapping[str, Any] | int | None = None) -> P:
        """Validate params: a params object, a dict of knobs, a level number, or None (level 1).

        Raises:
            InvalidParamsError: naming the bad key, the value and what was expected.
        """
        if value is None:
            value = min(self.levels)
        if isinstance(value, int) and not isinstance(value, bool):
            if value not in self.levels:
                raise InvalidParamsError(
                    f"{self.name}: level {value} does not exist; expected one of {sorted(self.levels)}"
                )
            return self.levels[value]  # type: ignore[return-value]
        if isinstance(value, self.params_model):
            return value  # type: ignore[return-value]
        raw = value.model_dump() if isinstance(value, BaseModel) else dict(value)
        try:
            return self.params_model.model_validate(raw)  # type: ignore[return-value]
        except ValidationError as exc:
            raise InvalidParamsError(f"{self.name}: {format_validation_error(exc)}") from None

    def generate(self, params: Params | Mapping[str, Any] | int | None, seed: int) -> Instance[P]:
        """Make one instance, deterministically from (params, seed). Do not override; see :meth:`build`."""
        p = self.params(params)
        iid = instance_id(self.name, self.version, p, seed)
        data = self.build(p, random.Random(iid))
        return Instance(id=iid, bootcamp=self.name, version=self.version, params=p, seed=seed, data=data)

    def build(self, params: P, rng: random.Random) -> dict[str, Any]:
        """Generate the identity of one instance from validated params, using only ``rng``."""
        raise NotImplementedError(f"{type(self).__name__} must implement build()")

    def prompt(self, instance: Instance[P]) -> list[dict[str, Any]]:
        """The system and user messages that pose the task (OpenAI message format)."""
        raise NotImplementedError(f"{type(self).__name__} must implement prompt()")

    def chat(self, user: str | list[dict[str, Any]], system: str | None = None) -> list[dict[str, Any]]:
        """Build ``[system, user]`` messages; ``user`` may be a list of content parts (text, image)."""
        return [
            {"role": "system", "content": system or _system_prompt(self.describe_task())},
            {"role": "user", "content": user},
        ]

    def describe_task(self) -> str:
        """The task as the agent reads it in the system prompt.

        Defaults to the first two paragraphs of the class docstring: by convention a one-line summary,
        then the instructions an agent needs. Later paragraphs are for developers (levels, reward).
        """
        return _task_text(type(self).__doc__ or "")

    # -- tools ---------------------------------------------------------------------------------

    def tools(self, instance: Instance[P]) -> Sequence[Tool]:
        """The tools offered for this instance (all ``@tool`` methods unless overridden)."""
        return tuple(self._tools.values())

    def tool_schemas(self, instance: Instance[P]) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of :meth:`tools`."""
        return [t.schema() for t in self.tools(instance)]

    def new_state(self, instance: Instance[P]) -> S:
        """A fresh world for one episode of ``instance``."""
        return self.state_model()  # type: ignore[return-value]

    def call(self, instance: Instance[P], state: S, name: str, args: ToolArgs) -> Observation:
        """Run tool ``name`` with validated ``args``; raises ToolError if the world refuses the call."""
        t = self._tools[name]
        return t.method(self, instance, state, args)  # type: ignore[misc]

    def apply(self, instance: Instance[P], state: S, action: Action) -> Observation:
        """Validate an :class:`Action`'s arguments and run it (no engine, no transcript)."""
        t = self._tools[action.name]
        obs = self.call(instance, state, action.name, t.args_model.model_validate(dict(action.arguments)))
        if obs.final:
            state.finished = True
        return obs

    # -- interaction control -------------------------------------------------------------------

    def max_turns(self, instance: Instance[P]) -> int:
        """How many agent turns an episode of ``instance`` may take."""
        return self.default_max_turns

    def no_tool_call_reply(self, instance: Instance[P], state: S, content: str) -> str:
        """What the environment says when the agent replies without a tool call."""
        names = ", ".join(t.name for t in self.tools(instance))
        return f"No tool call found. Reply with a tool call, one of: {names}."

    def feedback(self, instance: Instance[P], state: S, turn: int) -> str | None:
        """Optional per-turn feedback appended after the tool results (None for nothing)."""
        return None

    # -- reward --------------------------------------------------------------------------------

    def score(self, instance: Instance[P], state: S, transcript: Sequence[Mapping[str, Any]]) -> Score:
        """Reward in [0, 1], success and details; deterministic and verifiable."""
        raise NotImplementedError(f"{type(self).__name__} must implement score()")

    # -- oracle and deliberate failure -----------------------------------------------------------

    def oracle(self, instance: Instance[P], state: S) -> Action:
        """The next action of a correct solution from the live ``state`` (the oracle sees everything)."""
        raise NotImplementedError(f"{type(self).__name__} must implement oracle()")

    def wrong_answer(self, instance: Instance[P], state: S, rng: random.Random) -> Action | None:
        """The next action of a wrong ending from ``state``: a final action scoring at most
        :attr:`wrong_answer_bound`, or a step towards one (test and noisy policies call it every
        turn until the episode ends); None where no wrong ending is possible from here (a maze agent
        already on the goal)."""
        raise NotImplementedError(f"{type(self).__name__} must implement wrong_answer()")

    def perturb(self, instance: Instance[P], state: S, action: Action, rng: random.Random) -> Action:
        """A plausible but wrong version of a non-final ``action``; default: the action unchanged."""
        return action

    def solve(self, instance: Instance[P]) -> tuple[S, Score]:
        """Play the oracle against this bootcamp directly (no engine) and score the result.

        Raises:
            RuntimeError: if the oracle does not finish within :meth:`max_turns` (an unsolvable or
                mis-generated instance).
        """
        state = self.new_state(instance)
        for _ in range(self.max_turns(instance)):
            self.apply(instance, state, self.oracle(instance, state))
            if state.finished:
                return state, self.score(instance, state, ())
        raise RuntimeError(f"{self.name} oracle did not finish instance {instance.id} "
                           f"within {self.max_turns(instance)} turns")

    def is_final(self, name: str) -> bool:
        """Whether tool ``name`` ends the episode."""
        t = self._tools.get(name)
        return bool(t and t.final)

    # -- documentation ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Everything ``campflow bootcamps show`` prints: docs, levels, params schema and tools."""
        return {
            "name": self.name,
            "version": self.version,
            "modality": self.modality,
            "description": inspect.cleandoc(type(self).__doc__ or ""),
            "levels": {lvl: p.model_dump(mode="json") for lvl, p in sorted(self.levels.items())},
            "params_schema": _clean_schema(self.params_model.model_json_schema()),
            "tools": [
                {"name": t.name, "final": t.final, "description": t.description,
                 "parameters": t.schema()["function"]["parameters"]}
                for t in self._tools.values()
            ],
        }


def image_parts(caption: str, png: bytes) -> list[dict[str, Any]]:
    """OpenAI content parts carrying a caption and a PNG image as a data URL (how vision prompts and
    image observations reach a model)."""
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return [{"type": "text", "text": caption}, {"type": "image_url", "image_url": {"url": url}}]


# ----------------------------------------------------------------------------------------------
# Ids and errors


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the form that content hashes are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


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
            parts.append(f"{loc} = {_short(err.get('input'))}: {err['msg']}")
    return "; ".join(parts)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
