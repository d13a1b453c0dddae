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
a second fresh server gives other       the task is dropped: the server keeps state between episodes, or
check results for the reference         the task depends on the clock or chance
the server fails (start, crash, hang)   the task is dropped with the server's error
no task left                            the import is refused, with the first reasons
======================================  ===================================================================

Doing nothing may pass some checks (a check that a table is still empty): the largest share it passes
over the kept tasks is the bootcamp's wrong-answer bound, recorded with the import. Tasks are vetted a
few at a time (:data:`CONCURRENCY` servers at once); each costs three server starts, after one start
that shows the server starts at all (else the import is refused with the server's own error).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from campflow.errors import CampflowError, ImportSourceError, ToolServerError
from campflow.mcp.bootcamp import FINISH
from campflow.mcp.tasks import McpTaskBootcamp, McpTaskParams, TaskRow, build
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
    failed = [i for i, ok in enumerate(first) if not ok[0]]
    if failed:
        check = row.checks[failed[0]]
        return f"the reference solution fails check {failed[0]} ({_describe(check)}): {first[failed[0]][1]}", 0.0
    nothing = await bootcamp.do_nothing(instance)
    if nothing.success:
        return "doing nothing passes every check, so the checks cannot tell a done task from an untouched one", 0.0
    second, reason = await _reference(bootcamp, instance)
    if reason is not None or second != first:
        return (
            "two fresh servers give different results for the reference solution (state kept between servers, or the clock or chance)",
            0.0,
        )
    return None, nothing.reward


async def _reference(bootcamp: McpTaskBootcamp, instance: Any) -> tuple[list[tuple[bool, Any]], str | None]:
    """Play the reference on a fresh server: each check's (passed, what it read), or the refused call."""
    from campflow.mcp.tasks import Check

    tools = None
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
            result = None if check.answer else next(results, None)
            seen = state.answer if check.answer else (result.json() if result is not None else None)
            out.append((check.passes(result, state.answer), _clip(seen)))
        return out, None


def _describe(check: Any) -> str:
    source = "the answer" if check.answer else f"{check.call.tool}{_clip(check.call.arguments, 80)}"
    path = "".join(f"[{p!r}]" for p in check.path)
    return f"{source}{path} {check.predicate} {_clip(check.expected, 80)}"


def _clip(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
