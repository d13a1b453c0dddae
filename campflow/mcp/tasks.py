"""Task files for an MCP server: rows of prompt, fixtures, reference solution and checks on the final state.

One JSON object a line (``tasks.jsonl``)::

    {"id": "count-orders", "level": 1,
     "prompt": "Create a table orders (id INTEGER, total REAL) and insert the orders 1: 9.5 and 2: 20.",
     "fixtures": {"notes.txt": "optional files written into {workdir} before the server starts"},
     "reference": [{"tool": "create_table", "arguments": {"query": "CREATE TABLE orders (id INTEGER, total REAL)"}},
                   {"tool": "write_query", "arguments": {"query": "INSERT INTO orders VALUES (1, 9.5), (2, 20)"}}],
     "answer": "",
     "checks": [{"call": {"tool": "read_query", "arguments": {"query": "SELECT COUNT(*) AS n FROM orders"}},
                 "path": [0, "n"], "equals": 2},
                {"call": {"tool": "read_query", "arguments": {"query": "SELECT SUM(total) AS s FROM orders"}},
                 "path": [0, "s"], "approx": 29.5, "tolerance": 0.01}]}

``reference`` is the oracle: its calls in order, then ``submit`` with ``answer``. A check makes one
tool ``call`` on the final server state (or reads the submitted ``answer``, with ``"answer": true``),
takes its result as JSON (:meth:`~campflow.mcp.server.ToolResult.json`: structured content, else the
text read as JSON, else as a Python literal, else the text), walks ``path`` (keys and indices) and
applies one predicate: ``result`` (the whole text, stripped, equal), ``equals`` (JSON equal),
``contains`` (a substring of a text, an element of a list, a sub-object of an object or of a list's
element), ``approx`` (a number within ``tolerance``). A call the server refuses fails its check.

Reward: the share of checks passed (partial credit); success: all of them, after ``submit``. Doing
nothing scores the share of checks a fresh server already passes: the import measures it and records it
as the bootcamp's wrong-answer bound.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from campflow.bootcamps.base import Action, Instance, Params, Score, format_validation_error
from campflow.errors import ImportSourceError
from campflow.mcp.bootcamp import FINISH, McpBootcamp, McpState, SubmitArgs, workdir_text
from campflow.mcp.server import ServerSpec, ToolResult
from campflow.sources import ImportSpec

ADAPTER_REVISION = "1"
PREDICATES = ("result", "equals", "contains", "approx")


class _Unread:
    """What :meth:`Check.compared` gives where a check has nothing to compare (one instance, :data:`UNREAD`)."""

    def __repr__(self) -> str:
        return "nothing (the call was refused, or its result has no such path)"


UNREAD = _Unread()


class ToolCall(BaseModel):
    """One call: a tool of the server and its arguments (``{workdir}`` and ``{seed}`` are filled)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class Check(BaseModel):
    """One check on the final state: a ``call`` (or the submitted ``answer``), a ``path`` and one predicate.

    Written in a task file with the predicate as its key (``"equals": 2``); kept as ``predicate`` and
    ``expected``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    call: ToolCall | None = None
    answer: bool = Field(False, description="check the submitted answer instead of a call's result")
    path: list[str | int] = Field(default_factory=list, description="keys and indices into the result's JSON")
    predicate: Literal["result", "equals", "contains", "approx"]
    expected: Any = None
    tolerance: float = Field(1e-6, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _predicate_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "predicate" not in data:
            given = [p for p in PREDICATES if p in data]
            if len(given) != 1:
                raise ValueError(
                    f"a check needs exactly one predicate of {', '.join(PREDICATES)}; got {given or 'none'}"
                )
            expected = data[given[0]]
            data = {k: v for k, v in data.items() if k != given[0]}
            data.update(predicate=given[0], expected=expected)
        return data

    @model_validator(mode="after")
    def _one_source(self) -> Check:
        if (self.call is None) == (not self.answer):
            raise ValueError("a check needs exactly one of call and answer: true")
        if self.predicate == "approx" and not isinstance(self.expected, int | float):
            raise ValueError(f"approx needs a number; got {self.expected!r}")
        return self

    def passes(self, result: ToolResult | None, answer: str | None) -> bool:
        """Whether the check holds for its call's ``result`` (or the submitted ``answer``)."""
        value = self.compared(result, answer)
        if value is UNREAD:
            return False
        if self.predicate == "result":
            return value.strip() == str(self.expected).strip()
        return _holds(self.predicate, value, self.expected, self.tolerance)

    def compared(self, result: ToolResult | None, answer: str | None) -> Any:
        """What the predicate is applied to: the answer, or the result's JSON at ``path`` (its whole text for
        ``result``); :data:`UNREAD` where there is nothing (a refused or missing call, a path not there)."""
        if self.answer:
            value: Any = answer if answer is not None else ""
            text = value
        else:
            if result is None or result.is_error:
                return UNREAD
            value, text = result.json(), result.text
        if self.predicate == "result":
            return text
        for step in self.path:
            try:
                value = value[step]
            except (KeyError, IndexError, TypeError):
                return UNREAD
        return value


def _holds(predicate: str, value: Any, expected: Any, tolerance: float) -> bool:
    if predicate == "equals":
        return value == expected and isinstance(value, bool) == isinstance(expected, bool)
    if predicate == "approx":
        try:
            return math.isclose(float(value), float(expected), rel_tol=0.0, abs_tol=tolerance)
        except (TypeError, ValueError):
            return False
    if isinstance(value, str):
        return isinstance(expected, str) and expected in value
    if isinstance(value, list):
        return any(item == expected or _sub_object(expected, item) for item in value)
    return _sub_object(expected, value)


def _sub_object(part: Any, whole: Any) -> bool:
    return (
        isinstance(part, dict)
        and isinstance(whole, dict)
        and all(k in whole and whole[k] == v for k, v in part.items())
    )


class TaskRow(BaseModel):
    """One task of a task file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    level: int = Field(1, ge=1, le=10)
    prompt: str = Field(min_length=1)
    fixtures: dict[str, str] = Field(default_factory=dict, description="relative path -> file text")
    reference: list[ToolCall] = Field(default_factory=list, description="the oracle's calls, in order")
    answer: str = Field("", description="what the reference submits")
    checks: list[Check] = Field(min_length=1)
    max_turns: int | None = Field(None, ge=1, le=200)


def read_tasks(path: Path) -> list[TaskRow]:
    """The rows of a JSONL task file.

    Raises:
        ImportSourceError: a missing file, a line that is not JSON or not a task (naming the line), a repeated id.
    """
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ImportSourceError(f"task file {path}: {exc.strerror or exc}") from None
    return parse_tasks(lines, str(path))


def parse_tasks(lines: Sequence[str], where: str) -> list[TaskRow]:
    """Rows from JSON lines (blank lines skipped); see :func:`read_tasks`."""
    rows: list[TaskRow] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(TaskRow.model_validate(json.loads(line)))
        except ValueError as exc:
            detail = format_validation_error(exc) if isinstance(exc, ValidationError) else f"not JSON ({exc})"
            raise ImportSourceError(f"{where}, line {number}: {detail}") from None
    if not rows:
        raise ImportSourceError(f"{where}: no tasks; expected one JSON object a line")
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise ImportSourceError(f"{where}: task id {row.id!r} appears twice")
        seen.add(row.id)
    return rows


class McpTaskParams(Params):
    """Which task an instance is: a level, and optionally one task by id (else the seed picks one), or a
    new task row (what the LLM synthesizer proposes)."""

    task: str | None = Field(None, description="a task id of the file; None: the seed picks one of the level")
    row: TaskRow | None = Field(
        None, description="a new task instead of one of the file's (a synthesized row); its level is this level"
    )

    @model_validator(mode="after")
    def _one_task(self) -> McpTaskParams:
        if self.row is not None and (self.task is not None or self.row.level != self.level):
            raise ValueError("a row comes without a task id, at the params' own level")
        return self


class McpTaskBootcamp(McpBootcamp[McpTaskParams]):
    """Task rows on an MCP server (one dynamic subclass per import; see the module docstring)."""

    params_model = McpTaskParams

    def __init__(self, rows: Sequence[TaskRow]) -> None:
        self.rows = {r.id: r for r in rows}

    def build(self, params: McpTaskParams, rng: random.Random) -> dict[str, Any]:
        if params.row is not None:
            return params.row.model_dump(mode="json")
        if params.task is not None:
            row = self.rows.get(params.task)
            if row is None:
                raise ValueError(f"task {params.task!r} is not in {self.name}; tasks: {', '.join(self.rows)}")
        else:
            row = rng.choice([r for r in self.rows.values() if r.level == params.level])
        return row.model_dump(mode="json")

    def prompt(self, instance: Instance[McpTaskParams]) -> list[dict[str, Any]]:
        return self.chat(workdir_text(instance.data["prompt"], instance.seed))

    def fixtures(self, instance: Instance[McpTaskParams]) -> Mapping[str, str]:
        return instance.data["fixtures"]

    def max_turns(self, instance: Instance[McpTaskParams]) -> int:
        return instance.data["max_turns"] or len(instance.data["reference"]) + 6

    def scores_answer(self, instance: Instance[McpTaskParams]) -> bool:
        """Whether a check of the task reads the submitted answer."""
        return any(c["answer"] for c in instance.data["checks"])

    def final_calls(self, instance: Instance[McpTaskParams]) -> Sequence[Action]:
        return [Action(c["call"]["tool"], c["call"]["arguments"]) for c in instance.data["checks"] if c["call"]]

    def score(self, instance: Instance[McpTaskParams], state: McpState, transcript: Any) -> Score:
        results = iter(state.final)
        passed = []
        for raw in instance.data["checks"]:
            check = Check.model_validate(raw)
            result = None if check.answer else next(results, None)
            passed.append(check.passes(result, state.answer))
        share = sum(passed) / len(passed)
        success = all(passed)
        details: dict[str, Any] = {"checks_passed": sum(passed), "checks": len(passed)}
        if not success:
            details["reason"] = f"check_{passed.index(False)}" if state.finished else "not_submitted"
        return Score(share, success, details)

    def oracle(self, instance: Instance[McpTaskParams], state: McpState) -> Action:
        """The first reference call not yet made, in order (a call made twice, or another call between two,
        does not hold it up; a call made with other arguments is not made); then ``submit`` with the answer."""
        reference = [
            Action(c["tool"], _filled(c["arguments"], state, instance.seed)) for c in instance.data["reference"]
        ]
        made = 0
        for call in state.calls:
            if made < len(reference) and call["name"] == reference[made].name:
                if call["arguments"] == self._as_sent(instance, reference[made]):
                    made += 1
        if made < len(reference):
            return reference[made]
        return Action(FINISH, {"answer": workdir_text(instance.data["answer"], instance.seed)})

    def _as_sent(self, instance: Instance[McpTaskParams], action: Action) -> dict[str, Any]:
        """``action``'s arguments as :meth:`call_served` records them (validated by the tool's schema, dumped)."""
        tool = next((t for t in self.tools(instance) if t.name == action.name), None)
        try:
            args = tool.args_model.model_validate(dict(action.arguments))  # type: ignore[union-attr]
        except (AttributeError, ValueError):  # an unknown tool, or arguments its schema refuses: as written
            return dict(action.arguments)
        return args.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def perturb(self, instance: Instance[McpTaskParams], state: McpState, action: Action, rng: random.Random) -> Action:
        """The reference call with its last number one higher (an amount, a value or a row off by one: a
        numeric argument, else the last number written in a text argument); a call without one, or to a tool
        the server declares read-only (``readOnlyHint``: looking elsewhere changes no state), is unchanged."""
        if any(t["name"] == action.name and t.get("read_only") for t in self._declared or ()):
            return action
        return Action(action.name, _bumped(dict(action.arguments)))

    def wrong_answer(self, instance: Instance[McpTaskParams], state: McpState, rng: random.Random) -> Action | None:
        return Action(FINISH, {"answer": ""})  # doing nothing: submit at once

    async def do_nothing(self, instance: Instance[McpTaskParams]) -> Score:
        """The score of submitting at once on a fresh server."""
        async with self.episode(instance) as state:
            await self.call_served(instance, state, FINISH, SubmitArgs())
            state.finished = True
            await self.conclude(instance, state)
            return self.score(instance, state, ())

    async def solve_served(self, instance: Instance[McpTaskParams]) -> tuple[McpState, Score]:
        """The oracle on a fresh server; for a new row (synthesized, not vetted at import) doing nothing
        must also fail on another fresh server.

        Raises:
            ValueError: doing nothing passes every check of a new row (the checks cannot tell done from untouched).
        """
        state, score = await super().solve_served(instance)
        if score.success and instance.params.row is not None and (await self.do_nothing(instance)).success:
            raise ValueError(
                "doing nothing passes every check, so the checks cannot tell a done task from an untouched one"
            )
        return state, score


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _bumped(value: Any) -> Any:
    """``value`` with its last number (in key order, numbers inside texts included) one higher."""
    leaves: list[tuple[tuple[Any, ...], Any]] = []

    def walk(path: tuple[Any, ...], node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk((*path, k), v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk((*path, i), v)
        elif (isinstance(node, int | float) and not isinstance(node, bool)) or (
            isinstance(node, str) and _NUMBER.search(node)
        ):
            leaves.append((path, node))

    walk((), value)
    if not leaves:
        return value
    path, leaf = leaves[-1]
    if isinstance(leaf, str):
        last = list(_NUMBER.finditer(leaf))[-1]
        number = last.group()
        bumped = str(int(number) + 1) if "." not in number else repr(float(number) + 1)
        new: Any = leaf[: last.start()] + bumped + leaf[last.end() :]
    else:
        new = leaf + 1
    out = copy.deepcopy(value)
    node = out
    for step in path[:-1]:
        node = node[step]
    if path:
        node[path[-1]] = new
        return out
    return new


def _filled(arguments: Mapping[str, Any], state: McpState, seed: int) -> dict[str, Any]:
    from campflow.mcp.server import fill

    return fill(dict(arguments), state.workdir, seed) if state.workdir is not None else dict(arguments)


def task_instances(bootcamp: McpTaskBootcamp) -> list[Instance[McpTaskParams]]:
    """One instance of each task of ``bootcamp`` (seed 0), in file order."""
    return [bootcamp.generate(McpTaskParams(level=r.level, task=r.id), 0) for r in bootcamp.rows.values()]


def build(spec: ImportSpec) -> McpBootcamp:
    """The bootcamp an ``mcp`` import spec describes (options: ``server``, ``tasks``, ``tools``, ``wrong_answer_bound``)."""
    options = dict(spec.options)
    try:
        server = ServerSpec.model_validate(options.pop("server"))
        rows = [TaskRow.model_validate(r) for r in options.pop("tasks")]
    except KeyError as exc:
        raise ImportSourceError(f"mcp import {spec.name!r}: option {exc.args[0]!r} is missing") from None
    except ValidationError as exc:
        raise ImportSourceError(f"mcp import {spec.name!r}: {format_validation_error(exc)}") from None
    declared = options.pop("tools", None)
    bound = float(options.pop("wrong_answer_bound", 0.0))
    if options:
        raise ImportSourceError(f"mcp import {spec.name!r}: unknown options {sorted(options)}")
    if not rows:
        raise ImportSourceError(f"mcp import {spec.name!r}: no tasks")
    levels = sorted({r.level for r in rows})
    digest = hashlib.sha256(
        json.dumps([server.model_dump(mode="json"), [r.model_dump(mode="json") for r in rows]], sort_keys=True).encode()
    ).hexdigest()[:12]
    doc = (
        "Do the task with the tools of the MCP server, then call `submit`.\n\n"
        "Use the tools to do what the task asks; when it is done, call `submit` once (with your answer, "
        "if the task asks a question). The result is checked on the server's final state.\n\n"
        f"Imported from the MCP server {server.describe()} ({len(rows)} tasks); reward is the share of a "
        f"task's checks that pass (see campflow.mcp.tasks)."
    )
    cls = type(
        "McpTasks",
        (McpTaskBootcamp,),
        {
            "__doc__": doc,
            "__module__": __name__,
            "name": spec.name,
            "version": f"mcp{ADAPTER_REVISION}-{digest}",
            "server": server,
            "levels": {lv: McpTaskParams(level=lv) for lv in levels},
            "wrong_answer_bound": bound,
            "_declared": declared,
        },
    )
    return cls(rows)
