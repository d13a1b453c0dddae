"""Function-calling data: each row (messages, tools, expected calls) becomes an instance.

Mapping (the row format is in :mod:`~campflow.sources.function_calling_rows`):
    params  ``first_row``/``last_row`` select a range of rows (numbered from 0 in file order) and
            ``min_calls``/``max_calls`` a difficulty (how many calls a row expects); the seed picks
            one matching row. Levels split the distinct call counts into three tiers (one call, two,
            more, in a typical file); a file with fewer than three counts has three identical tiers.
    tools   the row's own tools, with the row's JSON schemas shown to the agent verbatim and
            arguments validated by models built from them; a call is recorded and answered with a
            neutral observation. ``finish`` ends the episode (a row may not define a tool named so).
    reward  matched expected calls / max(expected, made): a made call matches an expected one when
            the names are equal and the normalized arguments are equal. Order-insensitive rows match
            as multisets; ``order_sensitive`` rows by longest common subsequence. Success: every
            expected call made and nothing else. A row that expects no call scores 1 only when none is
            made. Failure reasons: ``no_calls``, ``wrong_arguments``, ``wrong_tool``, ``missing_call``,
            ``extra_call``, ``wrong_order``.
    oracle  replays the expected calls it has not matched yet, in order, then calls ``finish``.
            ``wrong_answer`` finishes before any matching call (reward 0); it is None for rows that
            expect no call, where finishing at once is right.

Rows have different tools, so RL through TRL's ``environment_factory`` (one fixed method set per
bootcamp) fits only files whose rows share one tool set; evaluation and SFT data take any file.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, ValidationError, model_validator

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    NoArgs,
    Observation,
    Params,
    Score,
    State,
    Tool,
    ToolArgs,
    tool,
)
from campflow.errors import ImportSourceError
from campflow.sources import ImportSpec
from campflow.sources.function_calling_rows import Row, args_model, load_rows

ADAPTER_REVISION = "1"
FINISH = "finish"


@dataclass(frozen=True)
class RowTool(Tool):
    """A tool from a row: the agent sees the row's own schema, kept as JSON text so the tool stays hashable."""

    schema_json: str = "{}"

    def schema(self) -> dict[str, Any]:
        return json.loads(self.schema_json)


@dataclass
class CallState(State):
    """The calls made so far, each ``{"name", "arguments"}`` with normalized arguments."""

    calls: list[dict[str, Any]] = field(default_factory=list)


def build(spec: ImportSpec) -> Bootcamp:
    """The bootcamp for a function-calling file or saved dataset (raises ImportSourceError for a bad source)."""
    options = dict(spec.options)
    split = options.pop("split", None)
    if options:
        raise ImportSourceError(f"function-calling imports take only the option 'split'; got {sorted(options)}")
    rows, digest = load_rows(spec.source, split)
    for row in rows:
        if any(t["name"] == FINISH for t in row.tools):
            raise ImportSourceError(
                f"{spec.source}, {row.where}: a tool named {FINISH!r} clashes with the tool that ends the episode"
            )
    counts = [len(r.expected_calls) for r in rows]
    model = _params_model(counts)
    levels = {i: model(level=i, **tier) for i, tier in enumerate(_tiers(counts), start=1)}
    doc = (
        f"Make the function calls the conversation asks for, then call `{FINISH}`.\n\n"
        f"Read the conversation and call the tools it needs, with exactly the right arguments, then "
        f"call `{FINISH}` once. Each call is recorded; calls the request does not need cost reward.\n\n"
        f"Imported from {spec.source} ({len(rows)} rows); reward is call matching on names and "
        f"arguments (see campflow.sources.function_calling)."
    )
    cls = type(
        "FunctionCalling",
        (FunctionCallingBootcamp,),
        {
            "__doc__": doc,
            "name": spec.name,
            "version": f"fc{ADAPTER_REVISION}-{digest}",
            "params_model": model,
            "levels": levels,
            "__module__": __name__,
        },
    )
    return cls(rows)


class FunctionCallingBootcamp(Bootcamp[Params, CallState]):
    """Rows of function-calling data as a bootcamp (one dynamic subclass per import)."""

    state_model = CallState
    wrong_answer_bound = 0.0

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: Params, rng: random.Random) -> dict[str, Any]:
        p = params.model_dump()
        matching = [
            i
            for i in range(p["first_row"], p["last_row"] + 1)
            if p["min_calls"] <= len(self.rows[i].expected_calls) <= p["max_calls"]
        ]
        position = rng.choice(matching)
        row = self.rows[position]
        return {
            "row": position,
            "messages": row.messages,
            "tools": row.tools,
            "expected_calls": row.expected_calls,
            "order_sensitive": row.order_sensitive,
        }

    def prompt(self, instance: Instance) -> list[dict[str, Any]]:
        messages = copy.deepcopy(list(instance.data["messages"]))
        system = self.chat("")[0]["content"]
        if messages[0].get("role") == "system":
            messages[0]["content"] = f"{system}\n\n{messages[0].get('content') or ''}".rstrip()
            return messages
        return [{"role": "system", "content": system}, *messages]

    def max_turns(self, instance: Instance) -> int:
        return len(instance.data["expected_calls"]) + 3

    # -- tools -----------------------------------------------------------------------------------

    def tools(self, instance: Instance) -> tuple[Tool, ...]:
        row_tools = tuple(
            RowTool(
                name=t["name"],
                description=t["description"],
                args_model=args_model(t),
                schema_json=json.dumps({"type": "function", "function": t}),
            )
            for t in instance.data["tools"]
        )
        return (*row_tools, self._tools[FINISH])

    def call(self, instance: Instance, state: CallState, name: str, args: ToolArgs) -> Observation:
        if name == FINISH:
            return super().call(instance, state, name, args)
        state.calls.append({"name": name, "arguments": args.model_dump(mode="json", by_alias=True)})
        return Observation(f"Call to {name} recorded.")

    def apply(self, instance: Instance, state: CallState, action: Action) -> Observation:
        t = {t.name: t for t in self.tools(instance)}[action.name]
        obs = self.call(instance, state, action.name, t.args_model.model_validate(dict(action.arguments)))
        if obs.final:
            state.finished = True
        return obs

    @tool(final=True)
    def finish(self, instance: Instance, state: CallState, args: NoArgs) -> Observation:
        """Call this once all the needed calls are made. This ends the episode."""
        return Observation(f"Finished after {len(state.calls)} call(s).", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: CallState, transcript: Any) -> Score:
        expected, made = instance.data["expected_calls"], state.calls
        matched = _matched(expected, made, instance.data["order_sensitive"])
        denominator = max(len(expected), len(made))
        reward = 1.0 if denominator == 0 else matched / denominator
        success = matched == len(expected) == len(made)
        details: dict[str, Any] = {"matched": matched, "expected": len(expected), "made": len(made)}
        if not success:
            details["reason"] = _reason(expected, made, matched, instance.data["order_sensitive"])
        return Score(reward, success, details)

    # -- oracle and deliberate failure -----------------------------------------------------------

    def oracle(self, instance: Instance, state: CallState) -> Action:
        remaining = _unmatched(instance.data["expected_calls"], state.calls)
        if remaining:  # the arguments as the row wrote them: demonstrations should not spell out nulls
            return Action(remaining[0]["name"], remaining[0]["given"])
        return Action(FINISH, {})

    def wrong_answer(self, instance: Instance, state: CallState, rng: random.Random) -> Action | None:
        expected = instance.data["expected_calls"]
        if not expected or _matched(expected, state.calls, instance.data["order_sensitive"]) > 0:
            return None  # finishing now would be right, or would earn credit
        return Action(FINISH, {})

    def perturb(self, instance: Instance, state: CallState, action: Action, rng: random.Random) -> Action:
        if action.name == FINISH or not action.arguments:
            return action
        spec = next(t for t in instance.data["tools"] if t["name"] == action.name)
        key = rng.choice(sorted(action.arguments))
        value = action.arguments[key]
        changed = (
            not value
            if isinstance(value, bool)
            else value + 1
            if isinstance(value, int | float)
            else f"{value} x"
            if isinstance(value, str)
            else None
        )
        arguments = {**action.arguments, key: changed}
        try:
            args_model(spec).model_validate(arguments)
        except ValidationError:
            return action  # an enum or a type the change broke: keep the correct call
        return Action(action.name, arguments)


def _params_model(counts: list[int]) -> type[Params]:
    last, top = len(counts) - 1, max(counts)

    class FunctionCallingParams(Params):
        """Which rows an instance is drawn from: a row range and a number of expected calls."""

        first_row: int = Field(0, ge=0, le=last, description="first row of the range (0-based, file order)")
        last_row: int = Field(last, ge=0, le=last, description="last row of the range, inclusive")
        min_calls: int = Field(min(counts), ge=0, le=top, description="fewest expected calls a drawn row has")
        max_calls: int = Field(top, ge=0, le=top, description="most expected calls a drawn row has")

        @model_validator(mode="after")
        def _some_row(self) -> FunctionCallingParams:
            if self.first_row > self.last_row or self.min_calls > self.max_calls:
                raise ValueError("first_row must not exceed last_row, nor min_calls max_calls")
            if not any(self.min_calls <= counts[i] <= self.max_calls for i in range(self.first_row, self.last_row + 1)):
                raise ValueError(
                    f"no row in {self.first_row}..{self.last_row} expects {self.min_calls}..{self.max_calls} calls"
                )
            return self

    return FunctionCallingParams


def _tiers(counts: list[int]) -> list[dict[str, int]]:
    """Three difficulty tiers over the distinct call counts (identical tiers if fewer than three)."""
    distinct = sorted(set(counts))
    if len(distinct) < 3:
        return [{"min_calls": distinct[0], "max_calls": distinct[-1]}] * 3
    size, extra = divmod(len(distinct), 3)
    tiers, start = [], 0
    for i in range(3):
        end = start + size + (1 if i < extra else 0)
        tiers.append({"min_calls": distinct[start], "max_calls": distinct[end - 1]})
        start = end
    return tiers


def _key(call: dict[str, Any]) -> str:
    return json.dumps([call["name"], call["arguments"]], sort_keys=True)


def _matched(expected: list[dict[str, Any]], made: list[dict[str, Any]], ordered: bool) -> int:
    a, b = [_key(c) for c in expected], [_key(c) for c in made]
    if not ordered:
        return sum((Counter(a) & Counter(b)).values())
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]  # longest common subsequence
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def _unmatched(expected: list[dict[str, Any]], made: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Expected calls not yet made, in order (each made call consumes one equal expected call)."""
    left = Counter(_key(c) for c in made)
    out = []
    for call in expected:
        k = _key(call)
        if left[k] > 0:
            left[k] -= 1
        else:
            out.append(call)
    return out


def _reason(expected: list[dict[str, Any]], made: list[dict[str, Any]], matched: int, ordered: bool) -> str:
    if not made:
        return "no_calls"
    if ordered and _matched(expected, made, False) == len(expected) == len(made):
        return "wrong_order"
    missing = Counter(c["name"] for c in _unmatched(expected, made))
    surplus = Counter(c["name"] for c in _unmatched(made, expected))
    if missing and surplus:
        return "wrong_arguments" if set(missing) & set(surplus) else "wrong_tool"
    return "missing_call" if missing else "extra_call"
