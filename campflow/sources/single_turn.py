"""Single-turn imported bootcamps: read a question, call ``submit(answer)`` once.

The reasoning-gym and class adapters share this shape. A subclass says how to pose the question
(:meth:`AnswerBootcamp.question`), how the source grades an answer (:meth:`AnswerBootcamp.grade`, in
[0, 1]) and what the source's reference answer is (:meth:`AnswerBootcamp.reference`); submitting,
scoring, the oracle and the deliberate wrong answer follow from those three.

Scoring: the reward is the source's grade of the submitted text; success means a full grade (1.0).
A source scorer that raises on odd model output scores 0 with reason ``scorer_error`` (the model's
failure, not the infrastructure's). Failure reasons: ``no_answer``, ``partial`` (0 < reward < 1),
``mismatch``.

Oracle: the source's reference answer, submitted only if the source's own scorer gives it full marks;
one that does not (reasoning-gym's ``jugs`` answers "No solution" for puzzles it can solve) raises
ImportSourceError, so teacher collection records ``infra_error`` and never trains on it, and the
model is still scored by the scorer on that instance.

Import options every single-turn adapter reads (:data:`BOUND_OPTION`): ``wrong_answer_bound`` sets
the bound the import measured where a source's partial credit goes above the adapter's default
(see :mod:`~campflow.sources.vetting`).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ConfigDict, Field

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
from campflow.errors import ImportSourceError

if TYPE_CHECKING:
    from campflow.sources import ImportSpec

FULL = 1.0 - 1e-9
BOUND_OPTION = "wrong_answer_bound"
#: answers no task can call right: the import probes every scorer with them (see vetting)
NONSENSE_ANSWERS = ("", "campflow probe: this is not an answer", "zq xv 0 none")


class AnswerArgs(ToolArgs):
    """Arguments of ``submit``: the final answer as text (numbers are accepted and read as text)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    answer: str = Field(description="your final answer, exactly in the format the task asks for")


class AnswerBootcamp(Bootcamp[Params, State]):
    """Answer the question, then call `submit` once with your final answer.

    Work the problem out in your reply if you need to, then call `submit` with only the final answer,
    in exactly the format the question asks for. The first submission ends the episode.
    """

    default_max_turns = 3  # one answer, with room to recover from a malformed call
    #: what the adapter decided while building this import (dropped keys, no oracle), said at import time
    import_notes: ClassVar[tuple[str, ...]] = ()

    # -- what a subclass provides -----------------------------------------------------------------

    def question(self, instance: Instance) -> str:
        """The task text shown to the agent as the user message."""
        raise NotImplementedError

    def grade(self, instance: Instance, answer: str) -> float:
        """The source's grade of ``answer`` (raising is allowed: it scores 0 as ``scorer_error``)."""
        raise NotImplementedError

    def reference(self, instance: Instance) -> str:
        """The source's reference answer; raises ImportSourceError where the source has none."""
        raise NotImplementedError

    def respec(self, spec: ImportSpec, keep: Sequence[int], wrong_answer_bound: float | None) -> ImportSpec:
        """The import spec with only levels ``keep`` (renumbered from 1) and, if given, the measured bound.

        The import calls it when its checks drop a level; each adapter records levels in its own option.
        """
        raise NotImplementedError

    # -- the four layers --------------------------------------------------------------------------

    def prompt(self, instance: Instance) -> list[dict[str, Any]]:
        return self.chat(self.question(instance))

    @tool(final=True)
    def submit(self, instance: Instance, state: State, args: AnswerArgs) -> Observation:
        """Submit your final answer. This ends the episode."""
        state.answer = args.answer
        return Observation("Submitted.", final=True)

    def score(self, instance: Instance, state: State, transcript: Sequence[Any]) -> Score:
        if state.answer is None:
            return Score(0.0, False, {"reason": "no_answer"})
        reward, error = self.safe_grade(instance, state.answer)
        if reward >= FULL:
            return Score(1.0, True, {})
        details: dict[str, Any] = {
            "reason": "scorer_error" if error else ("partial" if reward > 0 else "mismatch"),
            "submitted": state.answer[:200],
        }
        if error:
            details["error"] = error
        return Score(reward, False, details)

    def oracle(self, instance: Instance, state: State) -> Action:
        answer = self.reference(instance)
        reward, error = self.safe_grade(instance, answer)
        if reward < FULL:
            raise ImportSourceError(
                f"{self.name}: the source's reference answer {answer[:80]!r} scores {reward:g} "
                f"under its own scorer{f' ({error})' if error else ''}, so instance "
                f"{instance.id} has no oracle"
            )
        return Action("submit", {"answer": answer})

    def wrong_answer(self, instance: Instance, state: State, rng: random.Random) -> Action | None:
        """The lowest-scoring of a few near misses of the reference and answers that are no answer at all."""
        try:
            ref: str | None = self.reference(instance)
        except Exception:  # no reference: only the answers that are no answer at all are candidates
            ref = None
        candidates = [c for c in [*_near_misses(ref or "", rng), *NONSENSE_ANSWERS] if c != ref]
        scored = [(self.safe_grade(instance, c)[0], i, c) for i, c in enumerate(candidates)]
        best = min(scored)
        return Action("submit", {"answer": best[2]}) if best[0] < FULL else None

    def safe_grade(self, instance: Instance, answer: str) -> tuple[float, str | None]:
        """The source's grade clipped to [0, 1], and the scorer's error if it raised (then the grade is 0)."""
        try:
            value = float(self.grade(instance, answer))
        except Exception as exc:  # the source's scorer choking on odd output is the model's failure
            return 0.0, f"{type(exc).__name__}: {exc}"[:200]
        if value != value:  # NaN
            return 0.0, "the scorer returned NaN"
        return min(1.0, max(0.0, value)), None


def answer_instructions() -> str:
    """The submit instructions (the second paragraph of :class:`AnswerBootcamp`'s docstring), one line."""
    return inspect.cleandoc(AnswerBootcamp.__doc__ or "").split("\n\n")[1].replace("\n", " ")


def _near_misses(ref: str, rng: random.Random) -> list[str]:
    """Plausible wrong answers: the number off by one, the text altered, and nothing at all."""
    out: list[str] = []
    text = ref.strip()
    try:
        number = int(text)
        out += [str(number + rng.choice([1, 2, 3, 7])), str(-number - 1)]
    except ValueError:
        try:
            value = float(text)
            out.append(repr(value + 1.5))
        except ValueError:
            pass
    if text:
        out += [text[::-1] + "x", "x" + text[1:], "not " + text]
    out += ["", "no answer"]
    return out
