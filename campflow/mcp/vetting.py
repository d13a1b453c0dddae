"""What ``campflow import mcp`` proves about each task before it records it.

Each task of the file is played on fresh servers, through the bootcamp the import will record (the
same episode, tool-call and check code an evaluation runs):

======================================  ===================================================================
finding                                 what the import does
======================================  ===================================================================
the reference solution fails one of     the task is dropped, with the check (or the refused reference call)
its checks, or a reference call is      named
refused (``isError``)
doing nothing (``submit`` at once)      the task is dropped: its checks do not tell done from not done
passes every check
a second fresh server decides a check   the task is dropped naming the check: the server keeps state
otherwise for the reference (or         between episodes, or the task depends on the clock or chance
refuses one of its calls)
the server fails (start, crash, hang)   the task is dropped with the server's error
no task left                            the import is refused, with the first reasons
the hack battery (after vetting) wins   the task is dropped naming the exploit (:func:`drop_weak_tasks`);
on the task                             the import is refused only when no task is left
======================================  ===================================================================

Two servers are compared by what the checks decide (:class:`Outcome`), not by the text they read: real
servers put request ids, commit hashes, times and the episode's own folder into their replies. A check
agrees when it passes on both and, where its predicate compares a whole value (``result``, ``equals``,
``approx``), that value is the same with the episode's folder written ``{workdir}``; a ``contains``
check agrees on its pass alone.

Doing nothing may pass some checks (a check that a table is still empty): the largest share it passes
over the kept tasks is the bootcamp's wrong-answer bound, recorded with the import. Tasks are vetted a
few at a time (:data:`CONCURRENCY` servers at once); each costs three server starts, after one start
that shows the server starts at all (else the import is refused with the server's own error).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from campflow.errors import CampflowError, ImportSourceError, ToolServerError
from campflow.integrity.battery import BatteryReport, Probe
from campflow.mcp.bootcamp import FINISH
from campflow.mcp.server import ToolResult
from campflow.mcp.tasks import Check, McpTaskBootcamp, McpTaskParams, TaskRow, build, task_instances
from campflow.sources import ImportSpec

CONCURRENCY = 4


@dataclass
class Vetted:
    """The outcome of vetting a task file: the tasks kept, the reasons for those dropped, the bound."""

    kept: list[TaskRow]
    dropped: dict[str, str] = field(default_factory=dict)
    wrong_answer_bound: float = 0.0
    tools: list[dict[str, Any]] = field(default_factory=list)


def vet_tasks(spec: ImportSpec, say: Callable[[str], None] | None = None) -> Vetted:
    """Vet every task of ``spec`` (options ``server`` and ``tasks``) on fresh servers; see the module docstring.

    Raises:
        ImportSourceError: no task passes (the message gives the first reasons).
    """
    from campflow.bootcamps.served import run_async

    bootcamp = build(spec)
    rows = list(bootcamp.rows.values())
    try:  # a server that does not start at all is one line, not one per task
        run_async(_starts(bootcamp, rows[0]))
    except ToolServerError as exc:
        raise ImportSourceError(str(exc)) from None
    outcomes = run_async(_vet_all(bootcamp, rows))
    vetted = Vetted(kept=[], tools=list(bootcamp._declared or []))
    for row, (reason, share) in zip(rows, outcomes):
        if reason is None:
            vetted.kept.append(row)
            vetted.wrong_answer_bound = max(vetted.wrong_answer_bound, share)
        else:
            vetted.dropped[row.id] = reason
            (say or (lambda _: None))(f"task {row.id} dropped: {reason}")
    if not vetted.kept:
        reasons = "; ".join(f"{tid}: {why}" for tid, why in list(vetted.dropped.items())[:3])
        raise ImportSourceError(f"mcp source {spec.source!r}: no task passes its vetting ({reasons[:600]})")
    return vetted


def drop_weak_tasks(
    spec: ImportSpec, bootcamp: McpTaskBootcamp, report: BatteryReport, say: Callable[[str], None] | None = None
) -> tuple[ImportSpec, McpTaskBootcamp, BatteryReport]:
    """Drop each task on which the hack battery found an exploit (a weak check belongs to one task).

    Returns the spec, the bootcamp and the report of the tasks left (the report's probes carry their
    instances' new ids: the bootcamp's version hashes its tasks). ``say`` gets one line per dropped task,
    naming the exploit. Where no task is weak, or every task is, all three come back unchanged (the caller
    refuses a file with no task left, with the battery's own refusal).
    """
    tasks = {i.id: i.params.task for i in task_instances(bootcamp)}
    weak: dict[str, list[Probe]] = {}
    for probe in report.hacks:
        weak.setdefault(tasks[probe.instance_id], []).append(probe)
    if not weak or len(weak) == len(tasks):
        return spec, bootcamp, report
    for task, probes in weak.items():
        one = BatteryReport(report.bootcamp, report.bound, probes, report.partial_refuses)
        (say or (lambda _: None))(f"task {task} dropped: {one.refusal().removeprefix(f'{report.bootcamp}: ')}")
    options = dict(spec.options)
    options["tasks"] = [t for t in options["tasks"] if t["id"] not in weak]
    kept = build(spec.model_copy(update={"options": options}))
    spec = spec.model_copy(update={"options": options, "version": kept.version})
    renamed = {i.params.task: i.id for i in task_instances(kept)}
    probes = [
        replace(p, instance_id=renamed[tasks[p.instance_id]]) for p in report.probes if tasks[p.instance_id] not in weak
    ]
    return spec, kept, BatteryReport(report.bootcamp, report.bound, probes, report.partial_refuses)


async def _starts(bootcamp: McpTaskBootcamp, row: TaskRow) -> None:
    async with bootcamp.episode(bootcamp.generate(McpTaskParams(level=row.level, task=row.id), 0)):
        pass


async def _vet_all(bootcamp: McpTaskBootcamp, rows: Sequence[TaskRow]) -> list[tuple[str | None, float]]:
    gate = asyncio.Semaphore(1 if bootcamp.server.url else CONCURRENCY)

    async def one(row: TaskRow) -> tuple[str | None, float]:
        async with gate:
            try:
                return await vet_task(bootcamp, row)
            except CampflowError as exc:
                return str(exc), 0.0

    return await asyncio.gather(*(one(r) for r in rows))


async def vet_task(bootcamp: McpTaskBootcamp, row: TaskRow) -> tuple[str | None, float]:
    """Vet one task: (None, share of checks doing nothing passes) if it is kept, else (reason, 0)."""
    instance = bootcamp.generate(McpTaskParams(level=row.level, task=row.id), 0)
    first, reason = await _reference(bootcamp, instance)
    if reason is not None:
        return reason, 0.0
    failed = [i for i, outcome in enumerate(first) if not outcome.passed]
    if failed:
        check = row.checks[failed[0]]
        return f"the reference solution fails check {failed[0]} ({_describe(check)}): {first[failed[0]].seen}", 0.0
    nothing = await bootcamp.do_nothing(instance)
    if nothing.success:
        return "doing nothing passes every check, so the checks cannot tell a done task from an untouched one", 0.0
    second, reason = await _reference(bootcamp, instance)
    if reason is not None:
        return f"on a second fresh server, {reason} ({UNSTEADY})", 0.0
    for i, (one, two) in enumerate(zip(first, second)):
        if one.decided != two.decided:
            return (
                f"a second fresh server decides check {i} ({_describe(row.checks[i])}) otherwise: {_versus(one, two)} ({UNSTEADY})",
                0.0,
            )
    return None, nothing.reward


UNSTEADY = "state kept between servers, or the clock or chance"


@dataclass(frozen=True)
class Outcome:
    """What one check decided on the reference's final state, as vetting compares two servers by it.

    Attributes:
        passed: whether the check held.
        value: what the predicate compared as a whole (``result``, ``equals``, ``approx``), the episode's
            folder written ``{workdir}``; None for ``contains``, which looks for a part (the rest of a git
            log, a reply's request id and time, may differ on every server without changing the decision).
        seen: what the check read, clipped, for messages.
    """

    passed: bool
    value: Any
    seen: str

    @property
    def decided(self) -> tuple[bool, Any]:
        """What two fresh servers must agree on."""
        return self.passed, self.value


def outcome(check: Check, result: ToolResult | None, answer: str | None, folder: Path | None) -> Outcome:
    """The :class:`Outcome` of ``check`` on a final state whose episode ran in ``folder``."""
    compared = check.compared(result, answer)
    value = None if check.predicate == "contains" else _normalized(compared, folder)
    if check.answer:
        seen: Any = answer
    elif result is not None and result.is_error:
        seen = f"a refusal: {result.text}"
    else:
        seen = result.json() if result is not None else compared
    return Outcome(check.passes(result, answer), value, _clip(_normalized(seen, folder)))


def _versus(one: Outcome, two: Outcome) -> str:
    if one.passed != two.passed:
        return f"it passed on the first, reading {one.seen}, and fails on the second, reading {two.seen}"
    return f"it compared {_clip(one.value)} on the first and {_clip(two.value)} on the second"


def _normalized(value: Any, folder: Path | None) -> Any:
    """``value`` with the episode's folder (as given and resolved: servers print either) written ``{workdir}``."""
    if folder is None:
        return value
    names = sorted({str(folder), str(folder.resolve())}, key=len, reverse=True)
    if isinstance(value, str):
        for name in names:
            value = value.replace(name, "{workdir}")
        return value
    if isinstance(value, list | tuple):
        return [_normalized(v, folder) for v in value]
    if isinstance(value, dict):
        return {_normalized(k, folder): _normalized(v, folder) for k, v in value.items()}
    return value


async def _reference(bootcamp: McpTaskBootcamp, instance: Any) -> tuple[list[Outcome], str | None]:
    """Play the reference on a fresh server: each check's :class:`Outcome`, or the refused call."""
    async with bootcamp.episode(instance) as state:
        tools = {t.name: t for t in bootcamp.tools(instance)}
        for _ in range(len(instance.data["reference"]) + 1):
            action = bootcamp.oracle(instance, state)
            args = tools[action.name].args_model.model_validate(dict(action.arguments))
            index = len(state.calls)
            try:
                obs = await bootcamp.call_served(instance, state, action.name, args)
            except CampflowError as exc:
                if action.name == FINISH:
                    raise
                return [], f"reference call {index} ({action.name}) is refused: {exc}"
            if obs.final:
                state.finished = True
                break
        await bootcamp.conclude(instance, state)
        results = iter(state.final)
        out = []
        for raw in instance.data["checks"]:
            check = Check.model_validate(raw)
            out.append(outcome(check, None if check.answer else next(results, None), state.answer, state.workdir))
        return out, None


def _describe(check: Any) -> str:
    source = "the answer" if check.answer else f"{check.call.tool}{_clip(check.call.arguments, 80)}"
    path = "".join(f"[{p!r}]" for p in check.path)
    return f"{source}{path} {check.predicate} {_clip(check.expected, 80)}"


def _clip(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
