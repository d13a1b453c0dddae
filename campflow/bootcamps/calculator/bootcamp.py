"""calculator: multi-step arithmetic word problems solved with a calculator tool."""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from campflow.bootcamps.arithmetic import evaluate, format_number
from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    Observation,
    Params,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.errors import ToolError

_WORLDS = [
    ("Ada", "apples"),
    ("Ben", "books"),
    ("Chen", "coins"),
    ("Dara", "stamps"),
    ("Eli", "marbles"),
    ("Fay", "shells"),
    ("Gus", "cards"),
    ("Hana", "pencils"),
    ("Ivo", "boxes"),
    ("June", "bottles"),
]
_DISTRACTORS = [
    "{other} owns {m} {things}, which play no part here.",
    "Nearby, {other} counts {m} {things}.",
    "The shop sells {things} for {m} cents each, but nobody buys any.",
]
_PHRASES = {
    "+": ["{name} gets {n} more {items}.", "Then {n} more {items} arrive.", "{name} finds {n} extra {items}."],
    "-": ["{name} gives away {n} {items}.", "Then {n} {items} are lost.", "{name} sells {n} {items}."],
    "*": ["The number of {items} is then multiplied by {n}.", "{name} ends up with {n} times as many {items}."],
    "/": ["The {items} are split equally into {n} groups and {name} keeps one group."],
}


class CalculatorParams(Params):
    """Knobs of a calculator problem."""

    steps: int = Field(1, ge=1, le=8, description="arithmetic operations in the problem")
    max_operand: int = Field(20, ge=5, le=10_000, description="largest number that appears as an operand")
    operations: str = Field(
        "+-", pattern=r"^[+\-*/]{1,4}$", description="operators that may appear, a subset of '+-*/' without repeats"
    )
    distractors: int = Field(0, ge=0, le=3, description="irrelevant sentences with numbers in them")

    @field_validator("operations")
    @classmethod
    def _distinct(cls, v: str) -> str:
        if len(set(v)) != len(v):
            raise ValueError(f"operators must not repeat, got {v!r}")
        return v


class CalculateArgs(ToolArgs):
    expression: str = Field(description="an arithmetic expression such as '12 + 7 * 3'")


class SubmitArgs(ToolArgs):
    answer: float = Field(description="the final numeric answer")


@dataclass
class CalculatorState(State):
    results: list[int | float] = field(default_factory=list)


class Calculator(Bootcamp[CalculatorParams, CalculatorState]):
    """Solve a multi-step arithmetic word problem.

    Read the story, compute each step with `calculate`, one operation per call, then `submit` the
    final number. Some sentences may mention numbers that do not matter.

    Higher levels have more steps, larger numbers, multiplication and division, and distracting
    sentences. Reward is 1 for the right number (within 1e-6), else 0; failure reasons are
    `intermediate` (an earlier step's value), `sign`, `magnitude` (off by a power of ten), `carry`
    (one digit off) and `arithmetic`.
    """

    name = "calculator"
    version = "1"
    params_model = CalculatorParams
    state_model = CalculatorState
    levels = {
        1: CalculatorParams(level=1, steps=1, max_operand=20, operations="+-"),
        2: CalculatorParams(level=2, steps=2, max_operand=50, operations="+-"),
        3: CalculatorParams(level=3, steps=3, max_operand=100, operations="+-*", distractors=1),
        4: CalculatorParams(level=4, steps=5, max_operand=500, operations="+-*/", distractors=2),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: CalculatorParams, rng: random.Random) -> dict[str, Any]:
        name, items = rng.choice(_WORLDS)
        value = rng.randint(2, params.max_operand)
        values, ops, operands = [value], [], []
        for _ in range(params.steps):
            op, n = _next_step(value, params, rng)
            value = _apply(value, op, n)
            ops.append(op)
            operands.append(n)
            values.append(value)
        sentences = [f"{name} has {values[0]} {items}."]
        sentences += [rng.choice(_PHRASES[op]).format(name=name, n=n, items=items) for op, n in zip(ops, operands)]
        for _ in range(params.distractors):
            other, things = rng.choice([w for w in _WORLDS if w[0] != name])
            text = rng.choice(_DISTRACTORS).format(other=other, m=rng.randint(2, params.max_operand), things=things)
            sentences.insert(rng.randint(1, len(sentences)), text)
        question = f"How many {items} does {name} have now?"
        return {
            "story": " ".join(sentences),
            "question": question,
            "start": values[0],
            "ops": ops,
            "operands": operands,
            "values": values,
            "answer": values[-1],
        }

    def prompt(self, instance: Instance[CalculatorParams]) -> list[dict[str, Any]]:
        d = instance.data
        return self.chat(f"{d['story']} {d['question']}")

    def max_turns(self, instance: Instance[CalculatorParams]) -> int:
        return 2 * instance.params.steps + 4

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def calculate(self, instance: Instance, state: CalculatorState, args: CalculateArgs) -> Observation:
        """Evaluate an arithmetic expression with + - * / and parentheses."""
        value = evaluate(args.expression)
        state.results.append(value)
        return Observation(format_number(value))

    @tool(final=True)
    def submit(self, instance: Instance, state: CalculatorState, args: SubmitArgs) -> Observation:
        """Submit the final numeric answer. This ends the episode."""
        if not math.isfinite(args.answer):
            raise ToolError(f"answer {args.answer!r} is not a finite number")
        state.answer = args.answer
        return Observation(f"Submitted {format_number(args.answer)}.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: CalculatorState, transcript: Any) -> Score:
        expected = instance.data["answer"]
        if state.answer is None:
            return Score(0.0, False, {"reason": "no_answer", "expected": expected})
        got = state.answer
        if math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6):
            return Score(1.0, True, {"expected": expected})
        return Score(
            0.0,
            False,
            {"reason": _reason(got, expected, instance.data["values"][:-1]), "expected": expected, "submitted": got},
        )

    # -- oracle ----------------------------------------------------------------------------------

    # demonstrate() is the oracle: the prompt states every number, and each step computes on the
    # previous `calculate` result shown, so nothing it passes is hidden.
    def oracle(self, instance: Instance, state: CalculatorState) -> Action:
        d = instance.data
        done = _steps_done(d["values"], state.results)
        if done < len(d["ops"]):
            a, op, n = d["values"][done], d["ops"][done], d["operands"][done]
            return Action("calculate", {"expression": f"{a} {op} {n}"})
        return Action("submit", {"answer": d["answer"]})

    def perturb(self, instance: Instance, state: CalculatorState, action: Action, rng: random.Random) -> Action:
        if action.name != "calculate":
            return action
        a, op, n = action.arguments["expression"].split(" ")
        n2 = int(n) + rng.choice([-3, -2, -1, 1, 2, 3])
        return Action("calculate", {"expression": f"{a} {op} {max(n2, 1)}"})

    def wrong_answer(self, instance: Instance, state: CalculatorState, rng: random.Random) -> Action:
        answer = instance.data["answer"]
        return Action("submit", {"answer": answer + rng.choice([-10, -2, -1, 1, 2, 10, 100])})

    # -- where a failure began -------------------------------------------------------------------

    def normalize_arguments(self, instance: Instance, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """A `calculate` call is the number it computes ("5+12" is "12 + 5"): the oracle counts progress by
        results, so two expressions of one value are the same step."""
        out = super().normalize_arguments(instance, name, arguments)
        if name == "calculate":
            try:
                return {"expression": format_number(evaluate(out["expression"]))}
            except ToolError:
                return {"expression": "".join(out["expression"].split())}
        return out

    def divergence_kind(
        self,
        instance: Instance,
        state: CalculatorState,
        model_action: Action,
        oracle_action: Action,
        earlier: Sequence[Action] = (),
    ) -> str | None:
        """`operator_flipped` (a step computed with another operator than the story says),
        `distractor_number` (a number from a sentence that plays no part), `step_skipped` (a step of the
        story left out): read from the expression the model computed, or, for a submitted number, from
        the one mistake that explains it on the story's chain (the rest of the chain done right)."""
        d = instance.data
        if model_action.name == "submit":
            try:
                got = float(model_action.arguments["answer"])
            except (KeyError, TypeError, ValueError):
                return None
            return _explain_answer(d, _distractor_numbers(d), got)
        if model_action.name != "calculate" or oracle_action.name != "calculate":
            return None
        mine = _binary(str(model_action.arguments.get("expression", "")))
        theirs = _binary(str(oracle_action.arguments["expression"]))
        if mine is None or theirs is None:
            return None
        (a, op, n), (oa, oop, on) = mine, theirs
        if op != oop and sorted((a, n)) == sorted((oa, on)):
            return "operator_flipped"
        chain = {d["start"], *d["operands"], *d["values"]}
        if any(x in _distractor_numbers(d) and x not in chain for x in (a, n)):
            return "distractor_number"
        done = _steps_done(d["values"], state.results)
        later = {d["operands"][k] for k in range(done + 1, len(d["ops"]))}
        if a == oa and n != on and n in later:
            return "step_skipped"
        return None


def _next_step(value: int, params: CalculatorParams, rng: random.Random) -> tuple[str, int]:
    ops = list(params.operations)
    rng.shuffle(ops)
    for op in ops:
        if op == "+":
            return op, rng.randint(1, params.max_operand)
        if op == "-" and value > 1:
            return op, rng.randint(1, min(value - 1, params.max_operand))
        if op == "*" and abs(value) * 2 <= 1_000_000:
            return op, rng.randint(2, min(12, params.max_operand))
        if op == "/":
            divisors = [d for d in range(2, 13) if value % d == 0 and value // d > 0]
            if divisors:
                return op, rng.choice(divisors)
    return "+", rng.randint(1, params.max_operand)


def _apply(value: int, op: str, n: int) -> int:
    return {"+": value + n, "-": value - n, "*": value * n, "/": value // n}[op]


def _steps_done(values: list[int], results: list[int | float]) -> int:
    """How many chain steps the results so far have computed, in order (the oracle's progress)."""
    done = 0
    for r in results:
        if done < len(values) - 1 and r == values[done + 1]:
            done += 1
    return done


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_BINARY = re.compile(r"^\s*\(?\s*(-?\d+(?:\.\d+)?)\s*([+\-*/])\s*(-?\d+(?:\.\d+)?)\s*\)?\s*$")


def _binary(expression: str) -> tuple[float, str, float] | None:
    """``a op n`` of a one-operation expression, else None."""
    m = _BINARY.match(expression)
    return (float(m.group(1)), m.group(2), float(m.group(3))) if m else None


def _distractor_numbers(data: Mapping[str, Any]) -> list[float]:
    """The story's numbers that are not on its chain: those of the sentences that play no part."""
    chain = Counter(float(x) for x in [data["start"], *data["operands"]])
    out = []
    for x in _NUMBER.findall(data["story"]):
        v = float(x)
        if chain[v] > 0:
            chain[v] -= 1
        else:
            out.append(v)
    return out


def _true(a: float, op: str, n: float) -> float | None:
    if op == "/" and n == 0:
        return None
    return {"+": a + n, "-": a - n, "*": a * n, "/": a / n if n else 0.0}[op]


def _explain_answer(data: Mapping[str, Any], distractors: Sequence[float], got: float) -> str | None:
    """The one mistake on the story's chain that leads to ``got`` (the steps after it done right, to any
    step): an operator flipped, a distractor's number in a step's place, or a step left out."""
    start, ops, operands = float(data["start"]), data["ops"], [float(n) for n in data["operands"]]

    def runs(value: float | None, first: int) -> list[float]:
        out = [] if value is None else [value]
        for k in range(first, len(ops)):
            if value is None:
                break
            value = _true(value, ops[k], operands[k])
            if value is not None:
                out.append(value)
        return out

    def hits(candidates: Sequence[float]) -> bool:
        return any(math.isclose(got, c, rel_tol=1e-6, abs_tol=1e-6) for c in candidates)

    prefix = runs(start, 0)  # the chain's values, start first
    for i in range(len(ops)):
        if hits([v for op in "+-*/" if op != ops[i] for v in runs(_true(prefix[i], op, operands[i]), i + 1)]):
            return "operator_flipped"
    if hits([v for x in distractors for v in runs(x, 0)]) or hits(
        [v for i in range(len(ops)) for x in distractors for v in runs(_true(prefix[i], ops[i], x), i + 1)]
    ):
        return "distractor_number"
    if hits([v for i in range(len(ops)) for v in runs(prefix[i], i + 1)[1:] if i + 1 < len(ops)]):
        return "step_skipped"
    return None


def _reason(got: float, expected: int, intermediates: list[int]) -> str:
    if any(math.isclose(got, v) for v in intermediates):
        return "intermediate"
    if expected != 0 and math.isclose(got, -expected):
        return "sign"
    if expected != 0 and got != 0:
        ratio = abs(got / expected)
        k = round(math.log10(ratio)) if ratio > 0 else 0
        if k != 0 and math.isclose(ratio, 10.0**k, rel_tol=1e-9):
            return "magnitude"
    diff = abs(got - expected)
    if diff > 0 and diff == int(diff):
        k = round(math.log10(diff))
        if math.isclose(diff, 10.0**k):
            return "carry"
    return "arithmetic"
