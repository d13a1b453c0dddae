"""calculator: multi-step arithmetic word problems solved with a calculator tool."""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator, model_serializer, model_validator

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
    problem: str | None = Field(
        None,
        description="a fixed chain instead of a drawn one: the start, then per step the operator, the operand "
        "and which of the operator's phrasings tells it (from 0), e.g. '12 +5:2 -3:0'; None draws the numbers",
    )

    @field_validator("operations")
    @classmethod
    def _distinct(cls, v: str) -> str:
        if len(set(v)) != len(v):
            raise ValueError(f"operators must not repeat, got {v!r}")
        return v

    @model_validator(mode="after")
    def _fits(self) -> CalculatorParams:
        if self.problem is not None:
            start, steps = parse_problem(self.problem)
            if len(steps) != self.steps:
                raise ValueError(f"problem {self.problem!r} has {len(steps)} steps, steps is {self.steps}")
            if bad := sorted({op for op, _, _ in steps} - set(self.operations)):
                raise ValueError(f"problem {self.problem!r} uses {''.join(bad)}, not in operations {self.operations!r}")
            if max(start, *(n for _, n, _ in steps)) > self.max_operand:
                raise ValueError(f"problem {self.problem!r} has a number above max_operand {self.max_operand}")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        # a drawn problem dumps as it did before the knob existed: its instance ids stay what they were
        out = handler(self)
        if out.get("problem") is None:
            out.pop("problem", None)
        return out


def parse_problem(text: str) -> tuple[int, list[tuple[str, int, int]]]:
    """``'12 +5:2 -3:0'`` -> ``(12, [('+', 5, 2), ('-', 3, 0)])``, checked: every value on the chain a
    positive whole number, every phrasing one the operator has.

    Raises:
        ValueError: naming the part that does not fit.
    """
    head, *rest = text.split()
    if not head.isdigit() or int(head) < 2:
        raise ValueError(f"problem {text!r}: the start {head!r} is not a whole number of at least 2")
    value, steps = int(head), []
    for part in rest:
        m = re.fullmatch(r"([+\-*/])(\d+):(\d+)", part)
        if m is None:
            raise ValueError(f"problem {text!r}: step {part!r} is not <op><operand>:<phrasing>, e.g. +5:0")
        op, n, k = m.group(1), int(m.group(2)), int(m.group(3))
        if k >= len(_PHRASES[op]):
            raise ValueError(f"problem {text!r}: {op} has phrasings 0-{len(_PHRASES[op]) - 1}, got {k}")
        if n < 1 or (op == "-" and n >= value) or (op == "/" and (n < 2 or value % n)):
            raise ValueError(f"problem {text!r}: {value} {op} {n} leaves the positive whole numbers")
        value = _apply(value, op, n)
        steps.append((op, n, k))
    if not steps:
        raise ValueError(f"problem {text!r} has no step")
    return int(head), steps


def problem_text(start: int, steps: Sequence[tuple[str, int, int]]) -> str:
    """The ``problem`` knob's text of a chain (:func:`parse_problem` reads it back)."""
    return " ".join([str(start), *(f"{op}{n}:{k}" for op, n, k in steps)])


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
        pinned = None
        if params.problem is not None:
            # a pinned chain's words are drawn from its numbers: two problems of the same numbers, one step
            # told another way, read alike but for that step (the pair :meth:`contrasts` makes)
            start, pinned = parse_problem(params.problem)
            numbers = [start, *(n for _, n, _ in pinned), params.distractors, params.max_operand]
            rng = random.Random("calculator:" + ",".join(map(str, numbers)))
        name, items = rng.choice(_WORLDS)
        value = start if pinned else rng.randint(2, params.max_operand)
        values, ops, operands = [value], [], []
        for k in range(params.steps):
            op, n = pinned[k][:2] if pinned else _next_step(value, params, rng)
            value = _apply(value, op, n)
            ops.append(op)
            operands.append(n)
            values.append(value)
        sentences = [f"{name} has {values[0]} {items}."]
        sentences += [
            (_PHRASES[op][pinned[k][2]] if pinned else rng.choice(_PHRASES[op])).format(name=name, n=n, items=items)
            for k, (op, n) in enumerate(zip(ops, operands))
        ]
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

    divergence_knobs = {
        "operator_flipped": ("operations", "steps"),
        "distractor_number": ("distractors",),
        "step_skipped": ("steps",),
    }

    def contrasts(self, instance: Instance, kind: str, model_action: Action | None = None) -> list[CalculatorParams]:
        """For ``operator_flipped``: the failed problem's numbers twice, once told as it was and once with
        the deciding step's words (and operator) changed, ``finds 5 extra`` beside ``gives away 5``: the
        pair only reading the words tells apart. The flip of a step that would leave the positive whole
        numbers is left out."""
        if kind != "operator_flipped":
            return []
        d, p = instance.data, instance.params
        got = None
        if model_action is not None and model_action.name == "submit":
            try:
                got = float(model_action.arguments["answer"])
            except (KeyError, TypeError, ValueError):
                got = None
        i = _flipped_step(d, got)
        if i is None:
            return []
        steps = list(zip(d["ops"], d["operands"], _phrasings(d), strict=True))
        op, n, k = steps[i]
        other = _FLIP[op]
        flipped = [*steps[:i], (other, n, k % len(_PHRASES[other])), *steps[i + 1 :]]
        ops = "".join(dict.fromkeys(p.operations + other))
        out = []
        for chain, operations in ((steps, p.operations), (flipped, ops)):
            try:  # a pydantic ValidationError is a ValueError
                params = {**p.model_dump(), "operations": operations, "problem": problem_text(d["start"], chain)}
                out.append(CalculatorParams.model_validate(params))
            except ValueError:
                continue
        return out if len(out) == 2 else []

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


def _phrasings(data: Mapping[str, Any]) -> list[int]:
    """Which of its operator's phrasings each step of ``data``'s story uses (read back from the story)."""
    name, out, at = data["story"].split(" has ", 1)[0], [], 0
    items = data["question"].removeprefix("How many ").split(" does ", 1)[0]
    for op, n in zip(data["ops"], data["operands"], strict=True):
        for k, phrase in enumerate(_PHRASES[op]):
            found = data["story"].find(phrase.format(name=name, n=n, items=items), at)
            if found >= 0:
                out.append(k)
                at = found
                break
        else:
            out.append(0)
    return out


def _flipped_step(data: Mapping[str, Any], got: float | None) -> int | None:
    """The step whose operator, flipped, gives ``got`` (the rest of the chain done right); else the first
    step told in words that add or take away."""
    start, ops, operands = data["start"], data["ops"], data["operands"]
    if got is not None:
        for i in range(len(ops)):
            for op in "+-*/":
                if op == ops[i]:
                    continue
                value: float | None = start
                for k in range(len(ops)):
                    value = _true(value, op if k == i else ops[k], operands[k]) if value is not None else None
                if value is not None and math.isclose(value, got, rel_tol=1e-6, abs_tol=1e-6):
                    return i
    return next((i for i, op in enumerate(ops) if op in "+-"), None)


_FLIP = {"+": "-", "-": "+", "*": "/", "/": "*"}


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
