"""The hack battery on a served bootcamp (an MCP server as its tools): every episode on a fresh server.

The exploits and the verdicts are :mod:`campflow.integrity.battery`'s; only the playing differs. A
served episode awaits its server, so each is the rollout engine's own episode on an event loop (not
driven by hand), and each starts a server of its own, :data:`CONCURRENCY` at a time:

- the oracle plays first, on a fresh server: its actions are the plan the ``oracle_*`` exploits
  replay, recorded with the episode's folder as ``{workdir}`` and aimed at each replay's own folder;
- :meth:`~campflow.bootcamps.base.Bootcamp.perturb` is asked from the state the oracle's plan ended in
  (replaying every prefix would cost a server start each); an MCP task file's perturbation reads no
  state (:meth:`campflow.mcp.tasks.McpTaskBootcamp.perturb`);
- the boundary arguments' long text stays a name inside the episode's folder: the server runs on the host.

Cost: one server start per episode; an instance plays the oracle plus every exploit (about 20 for a task
file's task: doing nothing, submitting nothing, eleven malformed answers, up to four echoed numbers,
boundary calls, the reference with each of up to three calls repeated or perturbed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from campflow.bootcamps.base import Action, Instance, State
from campflow.bootcamps.served import ServedTools
from campflow.integrity.battery import SETTINGS, Probe, Script, exploits, verdict
from campflow.rollout.engine import EpisodeSpec, run_episode

CONCURRENCY = 4  # servers starting at once: a start is mostly CPU (a Python server imports its SDK)


async def probe_served(bootcamp: ServedTools, instances: Sequence[Instance], bound: float) -> list[Probe]:
    """Every exploit on each of ``instances``, each episode on a fresh server; the probes in instance order."""
    gate = asyncio.Semaphore(CONCURRENCY)
    found = await asyncio.gather(*(_probe_instance(bootcamp, i, bound, gate) for i in instances))
    return [p for probes in found for p in probes]


async def _probe_instance(
    bootcamp: ServedTools, instance: Instance, bound: float, gate: asyncio.Semaphore
) -> list[Probe]:
    async with gate:
        plan, oracle_state = await oracle_plan_served(bootcamp, instance)
    end = oracle_state
    tried = exploits(bootcamp, instance, plan, lambda i: end)  # type: ignore[arg-type,return-value]

    async def play(exploit: Any) -> Probe:
        policy = Script(exploit)
        async with gate:
            episode = await run_episode(EpisodeSpec(bootcamp, instance), policy, SETTINGS, run_id="battery")
        return verdict(bootcamp, instance, exploit, policy, episode, oracle_state, bound)

    return list(await asyncio.gather(*(play(e) for e in tried)))


async def oracle_plan_served(bootcamp: ServedTools, instance: Instance) -> tuple[list[Action], State | None]:
    """The oracle's actions on a fresh server (the episode's folder written ``{workdir}``) and the state it
    ends in; ``([], None)`` if it cannot finish."""
    plan: list[Action] = []
    try:
        async with bootcamp.episode(instance) as state:
            tools = {t.name: t for t in bootcamp.tools(instance)}
            for _ in range(bootcamp.max_turns(instance)):
                action = bootcamp.oracle(instance, state)
                plan.append(Action(action.name, _templated(dict(action.arguments), getattr(state, "workdir", None))))
                args = tools[action.name].args_model.model_validate(dict(action.arguments))
                if (await bootcamp.call_served(instance, state, action.name, args)).final:
                    state.finished = True
                    return plan, state
    except Exception:  # noqa: BLE001 -- vetting reports an oracle that fails; the battery plays what it can
        pass
    return [], None


def _templated(value: Any, folder: Any) -> Any:
    """``value`` with the episode's folder written back as ``{workdir}``."""
    if folder is None:
        return value
    if isinstance(value, str):
        return value.replace(str(folder), "{workdir}")
    if isinstance(value, list):
        return [_templated(v, folder) for v in value]
    if isinstance(value, Mapping):
        return {k: _templated(v, folder) for k, v in value.items()}
    return value
