"""A verifiers environment as a bootcamp (``campflow import verifiers MODULE_OR_PATH``).

A verifiers environment (``load_environment(**kwargs)`` returning a ``vf.Environment``) is a dataset of
rows (prompt messages, ``answer``, ``info``), an interaction protocol and a rubric. It runs in a process
of its own (:mod:`campflow.sources.verifiers_process`); campflow's engine plays its episodes:

- **instances**: one per dataset row. A train-range seed picks a row of the train rows of its level, an
  eval-range seed one of the eval rows: the environment's ``eval_dataset`` where it has one, else the
  fifth of ``dataset`` whose prompt hashes there (never both), so no eval row is trained on. Levels come
  from an ``info`` key (``--level-key``), else all rows are level 1.
- **tools**: the environment's own (name, description, JSON schema as it declares them), run by the
  environment (``ToolEnv``, ``StatefulToolEnv`` with its ``update_tool_args``, ``MCPEnv``), plus
  ``submit(answer)``, the final tool: its answer is the model's final reply in verifiers' terms (the
  turn without tool calls that ends a tool rollout, the one reply of a ``SingleTurnEnv``). The prompt's
  system message says so.
- **custom protocols** (a ``MultiTurnEnv`` with its own ``env_response`` and stop conditions): each
  ``reply(message)`` is one model turn of the dialogue; the environment's stop conditions are asked and
  its ``env_response`` answers, and that answer is the environment's turn in the episode (the tool's
  result). The environment ends the episode where its stop conditions say so (its own turn budget
  included); ``submit(answer)`` is a last reply, answered by the environment, after which campflow ends
  the rollout. The rubric scores the conversation as verifiers renders it.
- **reward**: the rubric's weighted sum on the rollout (the completion as verifiers renders it, its state),
  divided by the sum of the positive weights, so the most the rubric gives is 1; success is full reward
  after ``submit`` (in a dialogue, also where the environment ended it). Every reward function's value is
  kept in the score's details (``metrics``).
- **oracle**: the row's ``answer`` written as the environment's parser reads it (the import finds the
  format), where that reply alone earns full reward; an environment whose reward needs the tools' work
  (the reference answer alone scores less) has no oracle: teachers are endpoints and the model's passes.
- **proposed rows** (what synthesis proposes: ``new_row``, a question and its answer): the question is
  put in a prompt as the environment puts its ``question`` column (its system prompt and few-shot
  messages first), played like the environment's own rows; a proposed row is a train row, never one of
  the dataset's (an eval row's question proposed again is refused), and validation accepts it only where
  its answer, replied as the oracle replies, earns full reward and the hack battery's probes do not.

:mod:`campflow.sources.verifiers_vetting` says what the import checks.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    Observation,
    Params,
    Score,
    State,
    Tool,
    ToolArgs,
    instance_id,
    tool,
)
from campflow.bootcamps.served import ServedTools
from campflow.bootcamps.splits import is_eval_seed
from campflow.errors import ImportSourceError, InvalidParamsError, ToolServerError
from campflow.sources import ImportSpec
from campflow.sources.verifiers_process import EnvironmentProcess, shared_process

ADAPTER_REVISION = "2"
FINISH = "submit"
REPLY = "reply"
#: the ``split`` of a proposed row's instance data (played from the row itself, not the dataset)
PROPOSED = "proposed"
#: the turn budget of a custom protocol that sets none (``max_turns`` -1)
DIALOGUE_TURNS = 20
FULL = 1.0 - 1e-9
#: the options an import records (set by the vetting, read by :func:`build`)
OPTIONS = ("kwargs", "python", "level_key", "description", "answer_format", "oracle", "dropped")
SUBMIT_NOTE = (
    "When you are done, call `submit` with your final reply, written exactly as the task asks for it "
    "(this ends the episode)."
)
DIALOGUE_NOTE = (
    "Send each of your messages with `reply`: the environment's answer comes back, and the environment ends "
    "the episode when it is done. `submit` sends a message as your last one (this ends the episode)."
)
#: how campflow's model plays a turn of a custom protocol (the environment's own tools come beside it)
REPLY_TOOL = {
    "name": REPLY,
    "description": "Send your next message to the environment; its answer comes back.",
    "parameters": {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "your message, written as the task asks"}},
        "required": ["message"],
    },
}


class ProposedRow(BaseModel):
    """A new dataset row: the question of its user message and its reference answer (what synthesis proposes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str = Field(
        min_length=1, max_length=4000, description="the task's user message, written as the dataset's rows ask theirs"
    )
    answer: str = Field(
        min_length=1, max_length=1000, description="its reference answer, written as the rows' `answer` column is"
    )


class VfParams(Params):
    """Which row an instance is: a level, and optionally a row of it (else the seed picks one)."""

    row: int | None = Field(None, ge=0, description="the row's position among its level's rows; None: the seed picks")
    new_row: ProposedRow | None = Field(
        None, description="a new row instead of one of the environment's (a synthesized row, a train row of this level)"
    )

    @model_validator(mode="after")
    def _one_row(self) -> VfParams:
        if self.row is not None and self.new_row is not None:
            raise ValueError("row and new_row name two rows; give one of them")
        return self


class SubmitArgs(ToolArgs):
    """Arguments of ``submit``: the final reply as text."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    answer: str = Field(description="your final reply, written exactly as the task asks for it")


@dataclass
class VfState(State):
    """One rollout in the environment's process.

    Attributes:
        rollout: the rollout's id there (None once it is scored or closed).
        reward: the rubric's weighted sum, once scored; ``metrics`` each reward function's value.
        ended: the environment ended the rollout itself (its own turn budget, a final response).
        process: the environment's process the rollout lives in (one that dies takes the rollout with it).
    """

    rollout: str | None = None
    process: EnvironmentProcess | None = field(default=None, repr=False)
    reward: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    ended: bool = False
    calls: int = 0


@dataclass(frozen=True)
class Row:
    """One dataset row: where it lies in the environment (``split``, ``index``) and what it holds."""

    split: str
    index: int
    prompt: list[dict[str, Any]]
    answer: str | None
    info: dict[str, Any]

    @property
    def key(self) -> str:
        """A hash of the prompt: the row's identity across processes and splits."""
        return hashlib.sha256(json.dumps(self.prompt, sort_keys=True).encode()).hexdigest()[:16]


def rows_of(description: dict[str, Any]) -> tuple[list[Row], list[Row]]:
    """(train rows, eval rows) of a ``describe`` answer: ``eval_dataset`` where there is one, else the
    rows of ``dataset`` whose prompt hash falls in the held-out fifth; a train row that repeats an eval
    prompt is dropped."""

    def row(split: str, i: int, raw: dict[str, Any]) -> Row:
        answer = raw.get("answer")
        return Row(
            split, i, list(raw.get("prompt") or []), None if answer is None else str(answer), raw.get("info") or {}
        )

    train = [row("train", i, r) for i, r in enumerate(description.get("rows") or [])]
    evaluation = [row("eval", i, r) for i, r in enumerate(description.get("eval_rows") or [])]
    if not evaluation:
        held = [r for r in train if int(r.key, 16) % 5 == 0] or train[-1:]
        if len(held) == len(train) and len(train) > 1:
            held = held[-1:]
        evaluation = held
    eval_keys = {r.key for r in evaluation}
    return [r for r in train if r.key not in eval_keys], evaluation


class VerifiersBootcamp(ServedTools[VfParams, VfState], Bootcamp[VfParams, VfState]):
    """A verifiers environment's rows, played through its own protocol and rubric (see the module docstring)."""

    params_model = VfParams
    state_model = VfState

    def __init__(self, spec: ImportSpec, description: dict[str, Any], levels_of: dict[str, int]) -> None:
        options = spec.options
        self.source = spec.source
        self.kwargs: dict[str, Any] = options.get("kwargs") or {}
        self.python: str | None = options.get("python")
        self.description = description
        self.answer_format: str = options.get("answer_format") or "{answer}"
        self.has_oracle = bool(options.get("oracle"))
        self.dialogue = description.get("protocol") == "multi_turn"
        weights = [f["weight"] for f in description.get("reward_functions") or []]
        self.full_reward = sum(w for w in weights if w > 0) or 1.0
        dropped = set(options.get("dropped") or [])
        train, evaluation = rows_of(description)
        self.rows: dict[tuple[str, int], list[Row]] = {}
        for r in [*train, *evaluation]:
            if f"{r.split}:{r.index}" not in dropped:
                self.rows.setdefault((r.split, levels_of.get(r.key, 1)), []).append(r)
        self.row_keys = {r.key: r for r in [*train, *evaluation]}
        declared = [*(description.get("tools") or []), *([REPLY_TOOL] if self.dialogue else [])]
        self._tool_list = (*env_tools(declared, reserved=bool(self.dialogue)), self._tools[FINISH])

    # -- instances ---------------------------------------------------------------------------------

    def generate(self, params: VfParams | Any, seed: int) -> Instance[VfParams]:
        """The row the seed picks among its level's rows of the seed's split (eval range: eval rows).

        Overrides :meth:`Bootcamp.generate` because the split follows the seed, which ``build`` is not given.
        """
        p = self.params(params)
        iid = instance_id(self.name, self.version, p, seed)
        split = "eval" if is_eval_seed(seed) else "train"
        if p.new_row is not None:
            return Instance(
                id=iid, bootcamp=self.name, version=self.version, params=p, seed=seed, data=self._proposed(p, split)
            )
        rows = self.rows.get((split, p.level)) or []
        if not rows:
            raise InvalidParamsError(f"{self.name}: level {p.level} has no {split} rows")
        if p.row is not None:
            if p.row >= len(rows):
                raise InvalidParamsError(
                    f"{self.name}: row {p.row} of level {p.level}; it has {len(rows)} {split} rows"
                )
            chosen = rows[p.row]
        else:
            chosen = random.Random(iid).choice(rows)
        data = {
            "split": chosen.split,
            "index": chosen.index,
            "prompt": chosen.prompt,
            "answer": chosen.answer,
            "info": chosen.info,
        }
        return Instance(id=iid, bootcamp=self.name, version=self.version, params=p, seed=seed, data=data)

    def _proposed(self, p: VfParams, split: str) -> dict[str, Any]:
        """Instance data of a proposed row: its question in a prompt as the environment formats its
        ``question`` column (system prompt, few-shot messages, then the question).

        Raises:
            InvalidParamsError: an eval-range seed (a proposed row is a train row), or a question the
                dataset already has (an eval row's is never trained on; a train row's is that row).
        """
        assert p.new_row is not None
        if split == "eval":
            raise InvalidParamsError(f"{self.name}: a proposed row is a train row; eval-range seeds play the eval rows")
        system = self.description.get("system_prompt")
        prompt = [
            *([{"role": "system", "content": system}] if system else []),
            *(self.description.get("few_shot") or []),
            {"role": "user", "content": p.new_row.question},
        ]
        same = self.row_keys.get(Row(PROPOSED, -1, prompt, None, {}).key)
        if same is not None:
            raise InvalidParamsError(
                f"{self.name}: the proposed question is {same.split} row {same.index}'s"
                + ("; an eval row is never trained on" if same.split == "eval" else "; it is no new row")
            )
        return {"split": PROPOSED, "index": -1, "prompt": prompt, "answer": p.new_row.answer, "info": {}}

    def prompt(self, instance: Instance[VfParams]) -> list[dict[str, Any]]:
        """The row's prompt as the environment wrote it, how to reply added to its system message."""
        note = DIALOGUE_NOTE if self.dialogue else SUBMIT_NOTE
        messages = [dict(m) for m in instance.data["prompt"]]
        if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
            messages[0]["content"] = f"{messages[0]['content']}\n\n{note}"
        else:
            messages.insert(0, {"role": "system", "content": note})
        return messages

    # -- tools: the environment's, run in its process -----------------------------------------------

    def tools(self, instance: Instance[VfParams]) -> tuple[Tool, ...]:
        return self._tool_list

    def process(self) -> EnvironmentProcess:
        """This campflow process's environment process (started on first use)."""
        return shared_process(self.source, self.kwargs, self.python)

    def _process_of(self, state: VfState) -> EnvironmentProcess:
        """The process ``state``'s rollout lives in (requests to it fail where it has died since)."""
        if state.process is None:
            raise ToolServerError(f"{self.name}: the rollout is not open")
        return state.process

    @asynccontextmanager
    async def episode(self, instance: Instance[VfParams]) -> AsyncIterator[VfState]:
        process = self.process()
        data = instance.data
        row = {k: data[k] for k in ("prompt", "answer", "info")} if data["split"] == PROPOSED else None
        opened = await process.arequest("open", split=data["split"], index=data["index"], row=row)
        state = VfState(rollout=opened["rollout"], process=process)
        try:
            yield state
        finally:
            if state.rollout is not None and process.alive:
                try:
                    await process.arequest("close", rollout=state.rollout)
                except ToolServerError:
                    pass  # the rollout is dropped with the process
            state.rollout = None

    async def call_served(self, instance: Instance[VfParams], state: VfState, name: str, args: ToolArgs) -> Observation:
        if name == FINISH and not self.dialogue:
            return self.submit(instance, state, args)  # type: ignore[arg-type]
        if state.rollout is None:
            raise ToolServerError(f"{self.name}: the rollout is not open")
        if self.dialogue and name in (REPLY, FINISH):
            return await self._say(state, name, args)
        state.calls += 1
        arguments = args.model_dump(mode="json", by_alias=True, exclude_unset=True)
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{state.calls}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
        answered = await self._process_of(state).arequest("step", rollout=state.rollout, message=message)
        state.ended = state.ended or bool(answered["done"])
        text = "\n".join(_text(m.get("content")) for m in answered["messages"]) or "(no output)"
        if state.ended:
            text += "\n(The environment has ended the episode; call submit.)"
        return Observation(text)

    async def _say(self, state: VfState, name: str, args: ToolArgs) -> Observation:
        """One turn of a custom protocol: the message to the environment, its answer back (the episode ends
        where the environment ends it, and after ``submit``)."""
        said_by_model = args.model_dump(mode="json", by_alias=True)
        text = str(said_by_model.get("message" if name == REPLY else "answer") or "")
        if name == FINISH:
            state.answer = text
        message = {"role": "assistant", "content": text}
        answered = await self._process_of(state).arequest("step", rollout=state.rollout, message=message)
        state.ended = state.ended or bool(answered["done"])
        said = "\n".join(_text(m.get("content")) for m in answered["messages"])
        if state.ended:
            said = f"{said}\n(The environment has ended the episode.)".strip()
        return Observation(said or "(the environment said nothing)", final=state.ended or name == FINISH)

    async def conclude(self, instance: Instance[VfParams], state: VfState) -> None:
        """The rubric on the rollout: the submitted reply as its last turn (none where nothing was submitted;
        in a custom protocol every reply is already a turn of the rollout)."""
        if state.rollout is None:
            raise ToolServerError(f"{self.name}: the rollout is not open")
        answer = state.answer if state.finished and not self.dialogue else None
        scored = await self._process_of(state).arequest("finish", rollout=state.rollout, answer=answer)
        state.rollout = None
        state.reward, state.metrics = float(scored["reward"]), dict(scored["metrics"])

    @tool(final=True)
    def submit(self, instance: Instance[VfParams], state: VfState, args: SubmitArgs) -> Observation:
        """Submit your final reply. This ends the episode."""
        state.answer = args.answer
        return Observation("Submitted.", final=True)

    # -- interaction, reward, oracle ---------------------------------------------------------------

    def max_turns(self, instance: Instance[VfParams]) -> int:
        """The environment's turn budget and one turn to submit (a single-turn environment: room for one
        malformed call)."""
        budget = int(self.description.get("max_turns") or -1)
        if self.dialogue and budget <= 0:
            return DIALOGUE_TURNS
        if self.description.get("protocol") == "single_turn" or budget <= 1:
            return 3
        return budget + 1

    def score(self, instance: Instance[VfParams], state: VfState, transcript: Any) -> Score:
        if state.reward is None:
            return Score(0.0, False, {"reason": "not_scored"})
        reward = min(1.0, max(0.0, state.reward / self.full_reward))
        success = reward >= FULL and state.finished
        details: dict[str, Any] = {"rubric": state.reward, "metrics": state.metrics}
        if not success:
            details["reason"] = "not_submitted" if not state.finished else ("partial" if reward > 0 else "mismatch")
        return Score(1.0 if reward >= FULL else reward, success, details)

    def oracle(self, instance: Instance[VfParams], state: VfState) -> Action:
        """The row's answer as a reply the environment's parser reads (where that alone earns full reward)."""
        if not self.has_oracle or instance.data["answer"] is None:
            raise ImportSourceError(
                f"{self.name}: the rubric gives the reference answer alone less than full reward, so instance "
                f"{instance.id} has no oracle (its reward needs the tools' work)"
            )
        return Action(FINISH, {"answer": self.answer_format.replace("{answer}", instance.data["answer"])})

    def wrong_answer(self, instance: Instance[VfParams], state: VfState, rng: random.Random) -> Action | None:
        return Action(FINISH, {"answer": ""})

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["tools"] = [
            {
                "name": t.name,
                "final": t.final,
                "description": t.description,
                "parameters": t.schema()["function"]["parameters"],
            }
            for t in self._tool_list
        ]
        return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def env_tools(defs: Sequence[dict[str, Any]], reserved: bool = False) -> tuple[Tool, ...]:
    """The environment's tool definitions as campflow tools, their schemas shown to the model verbatim
    (``reserved``: the last is campflow's ``reply``, which no tool of the environment may be named)."""
    from campflow.mcp.bootcamp import server_tools

    names = [d["name"] for d in defs]
    for name in (FINISH, *([REPLY] if reserved else [])):
        if names.count(name) > (1 if reserved and name == REPLY else 0):
            raise ImportSourceError(
                f"the environment has a tool named {name!r}, the name of campflow's tool that "
                + ("ends an episode" if name == FINISH else "plays a turn of its protocol")
            )
    return server_tools(
        [
            {"name": d["name"], "description": d.get("description") or "", "input_schema": d.get("parameters") or {}}
            for d in defs
        ]
    )


def levels_by_row(description: dict[str, Any], level_key: str | None) -> dict[str, int]:
    """Row key -> level: the ``info`` value under ``level_key`` (whole numbers from 1), else all level 1.

    Raises:
        ImportSourceError: a row lacks the key or holds no whole number >= 1 there.
    """
    if not level_key:
        return {}
    train, evaluation = rows_of(description)
    out = {}
    for r in [*train, *evaluation]:
        value = r.info.get(level_key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ImportSourceError(
                f"--level-key {level_key}: {r.split} row {r.index} has info[{level_key!r}] = {value!r}; expected a whole number >= 1"
            )
        out[r.key] = value
    return out


def build(spec: ImportSpec) -> VerifiersBootcamp:
    """The bootcamp a ``verifiers`` import spec describes (its ``description`` recorded by the import)."""
    options = dict(spec.options)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ImportSourceError(f"verifiers import {spec.name!r}: unknown options {unknown}")
    description = options.get("description")
    if not isinstance(description, dict):
        raise ImportSourceError(f"verifiers import {spec.name!r}: no description of the environment on record")
    levels_of = levels_by_row(description, options.get("level_key"))
    digest = hashlib.sha256(
        json.dumps(
            [spec.source, options.get("kwargs") or {}, description, options.get("dropped") or []], sort_keys=True
        ).encode()
    ).hexdigest()[:12]
    train, evaluation = rows_of(description)
    levels = sorted({levels_of.get(r.key, 1) for r in train}) or [1]
    dialogue = description.get("protocol") == "multi_turn"
    doc = (
        (
            "Hold the dialogue the task opens, each message a `reply`, until the environment ends it.\n\n"
            f"{DIALOGUE_NOTE}\n\n"
            if dialogue
            else "Solve the task the way it asks, using the tools where it offers them; then call `submit` with your "
            f"final reply.\n\n{SUBMIT_NOTE}\n\n"
        )
        + f"Imported from the verifiers environment {spec.source} ({description.get('class')}, "
        f"{description.get('protocol')}; {len(train)} train and {len(evaluation)} eval rows); reward is its rubric's "
        "weighted sum over the positive weights (see campflow.sources.verifiers_env). A new task is a new row: "
        'params {"level": 1, "new_row": {"question": "<the user message>", "answer": "<its reference answer>"}}, '
        "the question written as the rows ask theirs and the answer as their `answer` column holds it."
    )
    cls = type(
        "VerifiersEnv",
        (VerifiersBootcamp,),
        {
            "__doc__": doc,
            "__module__": __name__,
            "name": spec.name,
            "version": f"vf{ADAPTER_REVISION}-{digest}",
            "levels": {lv: VfParams(level=lv) for lv in levels},
            "system_prompt": DIALOGUE_NOTE if dialogue else SUBMIT_NOTE,
        },
    )
    return cls(spec, description, levels_of)
