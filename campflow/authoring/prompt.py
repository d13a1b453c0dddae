"""What the authoring LLM reads and what is read back from it.

:func:`system_prompt` gives the model the interface it writes against, taken from the code itself so it
never drifts: the module docstring of :mod:`campflow.bootcamps.base` (the four layers, the runnable
example), the docstrings of the methods a bootcamp writes, the value types' source and the contract
(:mod:`campflow.bootcamps.contract`); then the rules an authored module follows and what to return
(one ``python`` code block). :func:`task_message` poses the task and its examples; :func:`repair_message`
sends failures back with their evidence; :func:`read_module` takes the module out of a reply.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Sequence
from typing import Any

from campflow.authoring.contract_run import ContractReport, Verdict
from campflow.bootcamps import base, contract, values
from campflow.config import AuthorConfig
from campflow.rollout.parsing import split_reasoning

# the methods an authored bootcamp writes (or may override), documented for the model from base.py
WRITTEN_METHODS = ("build", "prompt", "new_state", "max_turns", "score", "oracle", "wrong_answer", "perturb")
VALUE_TYPES = ("Params", "State", "ToolArgs", "NoArgs", "Action", "Observation", "Score")
SHOWN_EXAMPLES = 20  # examples quoted in the task message (all of them are checked)
SHOWN_FAILURES = 8  # failures sent back in full per round

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
_PYTHON = {"python", "py", "python3"}

RULES = """\
1. Import only the Python standard library, pydantic, `campflow.bootcamps.base` (it exports Action,
   Bootcamp, Instance, NoArgs, Observation, Params, Score, State, ToolArgs and tool) and
   `campflow.errors.ToolError`. Define exactly one Bootcamp subclass.
2. Set `name = "{name}"` and `version = "1"`. The class docstring: a one-line summary, a blank line,
   then everything the agent must know to do the task (the agent reads these two paragraphs as its
   instructions), then notes for developers (levels, reward).
3. Declare at least three levels, `levels = {{1: MyParams(level=1, ...), 2: ..., 3: ...}}`, harder as
   the level rises. Every knob is a pydantic Field with bounds (ge=, le=) and a description.
4. `build(params, rng)` returns a JSON-able dict (the identity) drawn from `rng` alone, never the global
   `random` module, the clock, `hash()`, `id()` or the iteration order of a set: the same params and
   seed must give the same identity in every process (checked under PYTHONHASHSEED 1 and 2, with
   instances generated in opposite orders).
5. Tools are methods marked `@tool` (`@tool(final=True)` for those that end the episode) whose `args`
   parameter is annotated with a ToolArgs subclass (NoArgs for none). A final tool stores what was
   submitted in `state.answer`. A call the world refuses raises ToolError before changing anything.
   For a multi-turn task, subclass State (a dataclass) with the fields the tools change and override
   `new_state` to set them up from `instance.data` (copy what the tools mutate).
6. `score(instance, state, transcript)` judges the state (the transcript may be empty). It also runs
   when nothing was submitted (`state.answer` None): an episode in which the agent did nothing must
   not succeed, nor score above `wrong_answer_bound`.
7. `oracle(instance, state)` returns the next correct Action from any state. Played turn after turn it
   must end with a final tool scoring reward 1.0 and success True within `max_turns(instance)`, on
   every one of {instances} instances of every level.
8. `wrong_answer(instance, state, rng)` returns a final Action, or a step towards one, that never
   succeeds and scores at most `wrong_answer_bound` (0 unless you set it for partial credit).
{examples_rule}
10. Nothing runs at module level but imports and definitions: no `registry` calls, no prints, asserts
   or I/O (the example in the reference ends with lines for its documentation; leave them out).
11. While it is checked the module runs in a sandbox: no network, no files outside its folder, no
   processes or threads, at most {memory_mb} MiB of memory and {cpu_s} s of CPU for all the checks. A
   bootcamp needs none of these; anything that tries them fails the check it happened in.

Reply with the complete module in a single ```python code block."""

EXAMPLES_RULE = """\
9. The task comes with examples (an input and its answer). Define
   `example_identity(self, example_input) -> dict` returning the identity (what `build` returns) of
   the task that an example's input describes. Played on that identity, your oracle must end with
   `state.answer` equal to the example's answer (compared as JSON, as text, or as numbers)."""


def system_prompt(cfg: AuthorConfig, name: str, *, with_examples: bool) -> str:
    """The system message: the interface, the contract, the rules and what to return."""
    rules = RULES.format(
        name=name,
        instances=cfg.instances,
        memory_mb=cfg.sandbox.memory_mb,
        cpu_s=cfg.sandbox.cpu_s,
        examples_rule=EXAMPLES_RULE if with_examples else "9. (No examples come with this task.)",
    )
    return (
        "You write bootcamps for campflow: Python modules that generate agent tasks, give the agent "
        "tools, score its episodes and solve every task with an oracle. Your module is accepted only "
        "when it passes the contract below, run on it automatically; failures come back to you with "
        "their evidence.\n\n"
        f"# The interface: campflow/bootcamps/base.py\n\n{inspect.cleandoc(base.__doc__ or '')}\n\n"
        f"## The methods a bootcamp writes\n\n{_methods()}\n\n"
        f"## The value types (campflow/bootcamps/values.py)\n\n```python\n{_values()}\n```\n\n"
        f"# The contract: campflow/bootcamps/contract.py\n\n{inspect.cleandoc(contract.__doc__ or '')}\n\n"
        f"# Rules for the module you write\n\n{rules}"
    )


def task_message(task: str, examples: Sequence[dict[str, Any]], name: str) -> str:
    """The first user message: the task description and (some of) its examples."""
    text = f"Write the bootcamp `{name}` for this task.\n\n## Task\n\n{task.strip()}\n"
    if examples:
        shown = "\n".join(json.dumps(e, ensure_ascii=False) for e in examples[:SHOWN_EXAMPLES])
        more = len(examples) - SHOWN_EXAMPLES
        text += f"\n## Examples ({len(examples)}; JSON lines of input and answer)\n\n{shown}\n" + (
            f"(and {more} more, checked alike)\n" if more > 0 else ""
        )
    return text


def repair_message(report: ContractReport | None, problem: str = "") -> str:
    """The user message after a failed round: each failure with its evidence, what passed, what to do.

    ``report`` is None when the reply held no module; ``problem`` then says what was wrong with it.
    """
    if report is None:
        return (
            f"Your reply could not be used: {problem}. Reply with the complete module in a single ```python code block."
        )
    failures = report.failures
    parts = [f"Your module (sha256 {report.sha256[:12]}) does not pass the contract yet. What failed:\n"]
    for v in failures[:SHOWN_FAILURES]:
        parts.append(_failure_text(v))
    if len(failures) > SHOWN_FAILURES:
        parts.append(f"(and {len(failures) - SHOWN_FAILURES} more failures)")
    passed = _grouped(v for v in report.verdicts if v.passed)
    not_run = [v for v in report.verdicts if v.passed is None]
    if passed:
        parts.append(f"Passed: {passed}.")
    if not_run:
        parts.append(f"Not run yet: {_grouped(not_run)} ({not_run[0].reason.removeprefix('not run: ')}).")
    parts.append("Fix every failure and reply with the whole corrected module in a single ```python code block.")
    return "\n".join(parts)


def read_module(reply: str) -> tuple[str | None, str]:
    """The module in a reply and ``""``, or None and what was wrong.

    The module is the last ``python`` fenced block that mentions Bootcamp (else the last ``python``
    block, else an unlabelled block defining a Bootcamp subclass); reasoning (``<think>``) is ignored.
    """
    _, visible = split_reasoning(reply or "")
    blocks = _FENCE.findall(visible)
    python = [body for lang, body in blocks if lang.lower() in _PYTHON]
    python = python or [body for lang, body in blocks if not lang and re.search(r"class \w+\(Bootcamp", body)]
    if not python:
        if re.search(r"```[ \t]*(python|py)\b", visible):
            return None, "its ```python code block is not closed (was the reply cut off at its token limit?)"
        snippet = " ".join(visible.split())[:80]
        return None, f"the reply holds no ```python code block ({snippet!r})" if snippet else "the reply was empty"
    chosen = next((b for b in reversed(python) if "Bootcamp" in b), python[-1])
    return chosen.strip() + "\n", ""


def _failure_text(v: Verdict) -> str:
    lines = [f"- {v.line()}"]
    ev = v.evidence
    for key, label in (
        ("instance", "instance identity"),
        ("input", "example input"),
        ("expected", "expected answer"),
        ("oracle_answer", "oracle's answer"),
    ):
        if ev.get(key) not in (None, ""):
            lines.append(f"  {label}: {ev[key] if isinstance(ev[key], str) else json.dumps(ev[key])}")
    for key in ("traceback", "stderr"):
        if ev.get(key):
            body = "\n".join(f"    {line}" for line in str(ev[key]).splitlines())
            lines.append(f"  {key} (last lines):\n{body}")
    return "\n".join(lines)


def _grouped(verdicts: Any) -> str:
    """``deterministic (levels 1, 2, 3), oracle (levels 1, 2)``: checks in order, levels gathered."""
    by_check: dict[str, list[int]] = {}
    for v in verdicts:
        by_check.setdefault(v.check, [])
        if v.level is not None:
            by_check[v.check].append(v.level)
    return ", ".join(
        f"{check} (level{'s' if len(lv) > 1 else ''} {', '.join(map(str, lv))})" if lv else check
        for check, lv in by_check.items()
    )


def _methods() -> str:
    out = []
    for name in WRITTEN_METHODS:
        fn = getattr(base.Bootcamp, name)
        out.append(f"### Bootcamp.{name}{inspect.signature(fn)}\n\n{inspect.getdoc(fn)}")
    out.append(f"### tool (decorator)\n\n{inspect.getdoc(base.tool)}")
    out.append(f"### class Bootcamp\n\n{inspect.getdoc(base.Bootcamp)}")
    return "\n\n".join(out)


def _values() -> str:
    return "\n\n".join(inspect.getsource(getattr(values, name)).rstrip() for name in VALUE_TYPES)
