"""What ``campflow import verifiers`` checks before a verifiers environment is recorded.

A verifiers environment has no oracle and no generator, so the import checks what it can:

=========================================  ================================================================
check                                      on failure
=========================================  ================================================================
the environment loads, and its protocol    refused, naming the error (the environment's own, one line) or
is one campflow plays (single-turn, tool,  the protocol (an ``Environment`` that is no ``MultiTurnEnv``)
stateful tool, MCP, a ``MultiTurnEnv``
with its own ``env_response``)
the rows, tools and reward functions are   refused, naming what differs
the same in two processes (hash seeds 1
and 2, started side by side)
rows carry an ``answer``                   refused: without one nothing can vet the rubric
the reference answer, as a reply the       the first format that earns full reward is the oracle's (recorded);
parser reads (plain, ``<answer>``,         where none does, a single-turn environment is refused (its rubric
``\\boxed{}``), earns full reward           cannot reward its own answer) and a tool or custom multi-turn
(in a custom protocol the reply is a turn  environment has no oracle (its reward needs the tools' work or more
the environment answers first)             of the dialogue), with a note
each row's reference reply earns full      the row is dropped, with a note (all rows: refused)
reward, the same in both processes         refused where the two processes disagree
=========================================  ================================================================

Then :func:`campflow.storage.imports.import_bootcamp` runs the hack battery on the bootcamp through the
engine: empty, echoed, hedged and very long replies must not earn more than the wrong-answer bound (a
rubric that rewards any reply is refused there, naming the exploit).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from campflow.errors import ImportSourceError, ToolServerError
from campflow.sources.verifiers_env import FULL, rows_of
from campflow.sources.verifiers_process import EnvironmentProcess, shared_process

PLAYED = ("single_turn", "tool", "stateful_tool", "multi_turn")
#: rows scored in the second process to compare with the first
COMPARED_ROWS = 4


def vet_environment(
    source: str,
    kwargs: dict[str, Any],
    *,
    python: str | None = None,
    level_key: str | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Check the environment ``source`` and return the import's options (description, oracle format, rows dropped).

    Raises:
        ImportSourceError: the environment fails a check above; the message names the check and the value.
    """
    say = say or (lambda _note: None)
    with ThreadPoolExecutor(2) as pool:  # the two processes start side by side
        first = pool.submit(_started, source, kwargs, python, None)
        second = pool.submit(_started, source, kwargs, python, "2")
        a, b = first.result(), second.result()
    try:
        return _vet(a, b, source, kwargs, python, level_key, say)
    finally:
        b.close()


def _started(source: str, kwargs: dict[str, Any], python: str | None, hash_seed: str | None) -> EnvironmentProcess:
    try:
        if hash_seed is None:  # the first is the one this process's episodes (the battery's) will use
            return shared_process(source, kwargs, python)
        return EnvironmentProcess(source, kwargs, python, hash_seed=hash_seed)
    except ToolServerError as exc:
        raise ImportSourceError(f"verifiers environment {source}: {exc}") from None


def _vet(
    a: EnvironmentProcess,
    b: EnvironmentProcess,
    source: str,
    kwargs: dict[str, Any],
    python: str | None,
    level_key: str | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    described, again = a.request("describe"), b.request("describe")
    if described.get("protocol") not in PLAYED:
        raise ImportSourceError(
            f"verifiers environment {source} is a {described.get('class')} ({described.get('protocol')}); campflow "
            f"plays {', '.join(PLAYED)} environments (a MultiTurnEnv and its subclasses)"
        )
    for part in ("rows", "eval_rows", "tools", "reward_functions"):
        if json.dumps(described.get(part), sort_keys=True) != json.dumps(again.get(part), sort_keys=True):
            raise ImportSourceError(
                f"verifiers environment {source}: its {part.replace('_', ' ')} differ between two processes "
                "(hash seeds 1 and 2); an instance must be the same task in every process"
            )
    train, evaluation = rows_of(described)
    rows = [*train, *evaluation]
    if not train:
        raise ImportSourceError(f"verifiers environment {source}: no train rows (dataset is empty or all held out)")
    if not any(r.answer for r in rows):
        raise ImportSourceError(
            f"verifiers environment {source}: no row has an `answer`; campflow vets a rubric by its reference answers"
        )
    first = next(r for r in train if r.answer)
    chosen = None
    best = 0.0
    for template in described.get("answer_formats") or ["{answer}"]:
        reply = template.replace("{answer}", first.answer or "")
        reward = a.request("score", split=first.split, index=first.index, answer=reply)["reward"]
        best = max(best, reward)
        if reward >= _full(described) * FULL:
            chosen = template
            break
    options: dict[str, Any] = {"kwargs": kwargs, "description": described, "oracle": chosen is not None}
    if python:
        options["python"] = python
    if level_key:
        options["level_key"] = level_key
    if chosen is None:
        if described["protocol"] == "single_turn":
            raise ImportSourceError(
                f"verifiers environment {source}: its rubric gives the reference answer {first.answer!r} of "
                f"{first.split} row {first.index} at most {best:g} of {_full(described):g} as a reply (tried "
                f"{', '.join(described.get('answer_formats') or [])}); a rubric that does not reward its own answer "
                "cannot be vetted"
            )
        needs = "the rest of the dialogue" if described["protocol"] == "multi_turn" else "the tools' work"
        say(
            f"the reference answer alone earns {best:g} of {_full(described):g}: the reward needs more than the "
            f"answer ({needs}), "
            "so this environment has no oracle (teachers: an endpoint, or the model's own passes)"
        )
        return options
    options["answer_format"] = chosen
    rewards = _scores(a, rows, chosen)
    dropped = [
        f"{r.split}:{r.index}" for r, reward in zip(rows, rewards, strict=True) if reward < _full(described) * FULL
    ]
    compared = [r for r in rows if r.answer][:COMPARED_ROWS]
    elsewhere = _scores(b, compared, chosen)
    for r, here, there in zip(compared, [rewards[rows.index(r)] for r in compared], elsewhere, strict=True):
        if abs(here - there) > 1e-9:
            raise ImportSourceError(
                f"verifiers environment {source}: {r.split} row {r.index}'s reference reply earns {here:g} in one "
                f"process and {there:g} in another; the rubric must be deterministic"
            )
    if len(dropped) == len(rows):
        raise ImportSourceError(f"verifiers environment {source}: no row's reference answer earns full reward")
    if dropped:
        say(
            f"{len(dropped)} of {len(rows)} rows dropped: their reference answer does not earn full reward ({', '.join(dropped[:5])})"
        )
        options["dropped"] = dropped
    return options


def _full(described: dict[str, Any]) -> float:
    return sum(f["weight"] for f in described.get("reward_functions") or [] if f["weight"] > 0) or 1.0


def _scores(process: EnvironmentProcess, rows: list[Any], template: str) -> list[float]:
    """The rubric's reward of each row's reference reply (rows without an answer: 0), all in flight at once."""

    async def all_of() -> list[float]:
        async def one(r: Any) -> float:
            if not r.answer:
                return 0.0
            scored = await process.arequest(
                "score", split=r.split, index=r.index, answer=template.replace("{answer}", r.answer)
            )
            return float(scored["reward"])

        return list(await asyncio.gather(*(one(r) for r in rows)))

    return asyncio.run(all_of())
