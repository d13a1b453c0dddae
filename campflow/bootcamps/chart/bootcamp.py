"""chart: read values off a rendered bar, line or pie chart and compute an answer from them."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from campflow.bootcamps.arithmetic import MAX_MAGNITUDE, evaluate, format_number
from campflow.bootcamps.base import Action, Bootcamp, Instance, Observation, Score, State, ToolArgs, tool
from campflow.bootcamps.chart.draw import ChartParams, describe, num, plot_height, render
from campflow.bootcamps.rendering import user_content
from campflow.errors import ToolError

_THEMES = [  # title, unit, categories (months keep their order; the rest are shuffled), series names
    ("Monthly sales", "units", "Jan Feb Mar Apr May Jun Jul Aug", "2021|2022|2023"),
    ("Fruit harvest", "kg", "Apples Pears Plums Cherries Figs Grapes Kiwis Limes", "North farm|South farm|East farm"),
    ("Museum visitors", "thousands", "Oslo Lima Kyiv Doha Rome Pune Cork Nice", "Spring|Summer|Autumn"),
    ("Team budget", "k$", "Design Sales Legal Ops Data Support HR Labs", "Plan|Actual|Forecast"),
]
_FOOTNOTES = [
    "Source: survey of {a:,} households, {b}.",
    "Figures revised on {b}-{c:02d}-01; {a:,} records checked.",
    "Sample of {a:,} responses collected in {b}.",
]


class CalculateArgs(ToolArgs):
    """Arguments of `calculate`."""

    expression: str = Field(description="an arithmetic expression such as '42.5 - 17'")


class SubmitArgs(ToolArgs):
    """Arguments of `submit`."""

    answer: float = Field(description="the final numeric answer")


@dataclass
class ChartState(State):
    """The results of the agent's calculations, in order; `answer` holds the submitted number."""

    results: list[int | float] = field(default_factory=list)


class Chart(Bootcamp[ChartParams, ChartState]):
    """Answer a question about a chart by reading values off it and computing with them.

    The chart (bar, line or pie) comes as an image, or as its data table in text mode. Read the values
    the question names (a value is the number printed on its bar, point or slice; without printed numbers,
    read the bar top or point against the gridlines: every value lies on a gridline or halfway between
    two), compute the answer with `calculate`, then `submit` the number. Other series, categories and
    footnotes may be there only to distract.

    Developers: questions are difference, sum (of named categories), ratio, range (max minus min), total
    (of a series) and series_difference (same category, two series). Higher levels add series, remove the
    printed values in favour of gridlines (values then snap to half a gridline step, so they stay exact),
    add decimals to printed values, and footnotes. Reward is 1 within the relative tolerance, else 0
    (reasons `misread`: the answer with one value read a gridline step or half off, `wrong_operation`: another
    operator on the same two values, `sign`, `wrong_value`, `no_answer`).
    """

    name = "chart"
    version = "1"
    modality = "vision"
    params_model = ChartParams
    state_model = ChartState
    default_max_turns = 8
    levels = {
        1: ChartParams(level=1, kind="bar", categories=4, questions=("difference", "sum")),
        2: ChartParams(level=2, kind="pie", categories=5, questions=("difference", "sum", "ratio"), tolerance=0.01),
        3: ChartParams(
            level=3,
            kind="line",
            categories=6,
            series=2,
            decimals=1,
            footnote=True,
            questions=("difference", "ratio", "range", "series_difference"),
        ),
        4: ChartParams(
            level=4,
            kind="bar",
            categories=6,
            series=3,
            value_labels=False,
            gridlines=True,
            footnote=True,
            tolerance=0.02,
            questions=("difference", "ratio", "range", "total", "series_difference"),
        ),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: ChartParams, rng: random.Random) -> dict[str, Any]:
        title, unit, cats, names = rng.choice(_THEMES)
        cats = cats.split()
        categories = cats[: params.categories] if title == "Monthly sales" else rng.sample(cats, params.categories)
        axis_max, step = _axis(params)
        values = _values(params, axis_max, step, rng)
        while not _askable(values):  # every question kind needs some values to differ
            values = _values(params, axis_max, step, rng)
        series = [{"name": n, "values": v} for n, v in zip(rng.sample(names.split("|"), params.series), values)]
        kind = rng.choice(params.questions)
        question, expression = _question(kind, categories, series, rng)
        footnote = None
        if params.footnote:
            footnote = rng.choice(_FOOTNOTES).format(
                a=rng.randint(120, 9800), b=rng.randint(2015, 2024), c=rng.randint(1, 12)
            )
        return {
            "title": f"{title} ({unit})",
            "kind": params.kind,
            "categories": categories,
            "series": series,
            "axis": {"max": axis_max, "step": step},
            "footnote": footnote,
            "question_kind": kind,
            "question": question,
            "expression": expression,
            "answer": float(f"{evaluate(expression):.10g}"),
            "image_size": [params.width, params.height],
        }

    def prompt(self, instance: Instance[ChartParams]) -> list[dict[str, Any]]:
        d = instance.data
        shown = "the image" if instance.params.observation == "image" else "the data table below"
        caption = (
            f"Question about the {d['kind']} chart in {shown}: {d['question']} "
            "Use `calculate` for the arithmetic and `submit` the number."
        )
        return self.chat(
            user_content(instance.params.observation, caption, lambda: render(instance), lambda: describe(instance))
        )

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def calculate(self, instance: Instance, state: ChartState, args: CalculateArgs) -> Observation:
        """Evaluate an arithmetic expression with + - * / and parentheses."""
        value = evaluate(args.expression)
        state.results.append(value)
        return Observation(format_number(value))

    @tool(final=True)
    def submit(self, instance: Instance, state: ChartState, args: SubmitArgs) -> Observation:
        """Submit the final numeric answer. This ends the episode."""
        if not math.isfinite(args.answer) or abs(args.answer) > MAX_MAGNITUDE:
            raise ToolError(
                f"answer {args.answer!r} is not a number a chart could give; expected a finite "
                f"number within +-{MAX_MAGNITUDE:.0e}"
            )
        state.answer = args.answer
        return Observation(f"Submitted {format_number(args.answer)}.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: ChartState, transcript: Any) -> Score:
        expected = instance.data["answer"]
        if state.answer is None:
            return Score(0.0, False, {"reason": "no_answer", "expected": expected})
        got, tol = state.answer, instance.params.tolerance
        if abs(got - expected) <= tol * abs(expected) + 1e-9:
            return Score(1.0, True, {"expected": expected})
        numbers = [float(t) for t in instance.data["expression"].split(" ")[::2]]
        a, b = numbers if len(numbers) == 2 else (math.nan, math.nan)  # operators only confuse two values
        for reason, values in (  # noqa: B007 -- the reason that matched is read after the loop
            ("sign", [-expected]),
            ("misread", _misreads(instance)),
            ("wrong_operation", [a + b, a - b, b - a, a * b, a / b, b / a]),
        ):
            if any(math.isclose(got, v, rel_tol=max(tol, 1e-9)) for v in values):
                break
        else:
            reason = "wrong_value"
        return Score(0.0, False, {"reason": reason, "expected": expected, "submitted": got})

    # -- oracle ----------------------------------------------------------------------------------

    # demonstrate() is the oracle: the chart (image, or table in text mode) shows every value its
    # expression uses, and it submits the `calculate` result shown.
    def oracle(self, instance: Instance, state: ChartState) -> Action:
        d = instance.data
        if not any(math.isclose(r, d["answer"], rel_tol=1e-9, abs_tol=1e-9) for r in state.results):
            return Action("calculate", {"expression": d["expression"]})
        return Action("submit", {"answer": d["answer"]})

    def perturb(self, instance: Instance, state: ChartState, action: Action, rng: random.Random) -> Action:
        if action.name != "calculate":
            return action
        # a misread value: one number of the expression off by a gridline step or half of one
        tokens = action.arguments["expression"].split(" ")
        i = rng.randrange(0, len(tokens), 2)
        misread = float(tokens[i]) + rng.choice([-1, -0.5, 0.5, 1]) * instance.data["axis"]["step"]
        tokens[i] = format_number(abs(misread))
        return Action("calculate", {"expression": " ".join(tokens)})

    def wrong_answer(self, instance: Instance, state: ChartState, rng: random.Random) -> Action:
        answer, tol = instance.data["answer"], instance.params.tolerance
        # a misread value where one lands outside the tolerance, else an answer 25-50% off (every answer is
        # positive, so that lies outside any allowed tolerance) or of the wrong sign
        misreads = [v for v in _misreads(instance) if abs(v - answer) > 2 * tol * answer and v > 0]
        wrong = (
            rng.choice(misreads)
            if misreads and rng.random() < 0.5
            else answer * rng.choice([0.5, 0.75, 1.25, 1.5, -1.0])
        )
        return Action("submit", {"answer": float(f"{wrong:.10g}")})


# -- generation ---------------------------------------------------------------------------------------


def _axis(params: ChartParams) -> tuple[float, float]:
    """The y-axis top (a round number at or above max_value) and the gridline step (a tenth of it)."""
    exponent = 10 ** math.floor(math.log10(params.max_value))
    top = next(m * exponent for m in (1, 2, 5, 10) if m * exponent >= params.max_value)
    return num(top), num(top / 10)


def _values(params: ChartParams, top: float, step: float, rng: random.Random) -> list[list[float]]:
    """Values per series: multiples of half a gridline step without labels, else of 10**-decimals."""
    grain = step / 2 if not params.value_labels else 10.0**-params.decimals
    high = int(params.max_value / grain)
    low = max(1, int(high * (0.4 if params.kind == "pie" else 0.1)))  # pie slices stay wide enough for labels
    # points of different line series at one category keep apart so their labels do not overlap
    gap = top * 30 / plot_height(params) / grain if params.kind == "line" else 0
    series: list[list[float]] = [[] for _ in range(params.series)]
    for _ in range(params.categories):
        for _attempt in range(50):
            column = [rng.randint(low, high) for _ in range(params.series)]
            if all(abs(a - b) >= gap for i, a in enumerate(column) for b in column[i + 1 :]):
                break
        else:  # evenly spread fallback, reached only with very crowded params
            column = [low + (high - low) * (i + 1) // (params.series + 1) for i in range(params.series)]
        for s, units in zip(series, column):
            s.append(num(units * grain))
    return series


def _misreads(instance: Instance) -> list[float]:
    """The answers computed with one value read half a gridline step or a whole step too high or low."""
    tokens, step, out = instance.data["expression"].split(" "), instance.data["axis"]["step"], []
    for i in range(0, len(tokens), 2):  # expressions alternate numbers and operators
        for delta in (-step, -step / 2, step / 2, step):
            value = float(tokens[i]) + delta
            if value > 0:  # no bar, point or slice is read below zero
                out.append(evaluate(" ".join([*tokens[:i], format_number(value), *tokens[i + 1 :]])))
    return out


def _askable(values: list[list[float]]) -> bool:
    """Whether each series has two different values and every two series differ somewhere."""
    return all(len(set(s)) > 1 for s in values) and all(a != b for i, a in enumerate(values) for b in values[i + 1 :])


def _question(kind: str, categories: list[str], series: list[dict[str, Any]], rng: random.Random) -> tuple[str, str]:
    """The question text and the arithmetic expression that answers it."""
    s = rng.choice(series)
    v = dict(zip(categories, s["values"]))
    where = f" for {s['name']}" if len(series) > 1 else ""
    f = format_number
    if kind in ("difference", "ratio"):
        pairs = [(a, b) for a in categories for b in categories if v[a] > v[b]]
        a, b = rng.choice(pairs)
        if kind == "difference":
            return f"How much larger is the value of {a} than that of {b}{where}?", f"{f(v[a])} - {f(v[b])}"
        return f"What is the value of {a} divided by the value of {b}{where}?", f"{f(v[a])} / {f(v[b])}"
    if kind == "sum":
        named = rng.sample(categories, rng.randint(2, min(3, len(categories))))
        return (
            f"What is the sum of the values of {', '.join(named[:-1])} and {named[-1]}{where}?",
            " + ".join(f(v[c]) for c in named),
        )
    if kind == "total":
        return f"What is the total of all values{where}?", " + ".join(f(x) for x in s["values"])
    if kind == "range":
        return (
            f"What is the largest value minus the smallest value{where}?",
            f"{f(max(s['values']))} - {f(min(s['values']))}",
        )
    a_series, b_series = rng.sample(series, 2)
    pairs = [(c, x, y) for c, x, y in zip(categories, a_series["values"], b_series["values"]) if x != y]
    c, x, y = rng.choice(pairs)
    (hi, hv), (lo, lv) = sorted([(a_series["name"], x), (b_series["name"], y)], key=lambda t: -t[1])
    return f"For {c}, how much larger is the value of {hi} than that of {lo}?", f"{f(hv)} - {f(lv)}"
