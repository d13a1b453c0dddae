"""Imports on record: the store's ``imported_bootcamps`` table, and loading it back into the registry.

:func:`import_bootcamp` is the Python API of ``campflow import``: it checks the name, builds the
bootcamp (which validates the source), vets it (:mod:`campflow.sources.vetting`: every level
generates in time, the same instance in two processes is the same task, the scorer rewards no nonsense;
levels that fail are dropped), runs the hack battery on every level (:mod:`campflow.integrity.battery`:
a verifier that rewards a scripted non-solution is refused, naming the exploit, where an MCP task file
loses only its weak tasks; the probes are recorded in ``verifier_probes``) and, where ``integrity.hacker``
names a model, the adversarial pass (:mod:`campflow.integrity.hacker`), records the spec with the levels
and version it saw, and registers it. :func:`register_recorded` loads them back; only the workspace calls
it, the first time a name is not registered (:class:`campflow.storage.workspace.Workspace`).

It lives in storage, above the bootcamps it records: bootcamps know nothing of the store.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp
from campflow.config import HackerConfig
from campflow.errors import ImportSourceError
from campflow.integrity.battery import run_battery
from campflow.integrity.hacker import run_hacker
from campflow.sources import ImportSpec, build_bootcamp, register_import
from campflow.sources.vetting import LEVEL_SECONDS, vet_import
from campflow.storage.probes import record_probes
from campflow.storage.store import Store


def import_bootcamp(
    spec: ImportSpec,
    store: Store,
    *,
    replace: bool = False,
    cross_process: bool = True,
    level_seconds: float = LEVEL_SECONDS,
    say: Callable[[str], None] | None = None,
    hacker: HackerConfig | None = None,
) -> tuple[ImportSpec, Bootcamp]:
    """Validate, vet, record and register one import; returns the recorded spec (version set) and the bootcamp.

    ``cross_process`` and ``level_seconds`` are the vetting's (run in two child processes, each level
    under that time limit); ``say`` receives its notes, one line each. ``hacker`` (``integrity.hacker``,
    where a model is set) adds the adversarial pass after the battery (:mod:`campflow.integrity.hacker`);
    its episodes are recorded in ``verifier_probes`` with their transcripts, also when they refuse the source.

    Raises:
        ImportSourceError: the name is taken (pass ``replace=True`` to re-import an imported name), the
            source cannot become a bootcamp, or the vetting, the battery or the model's pass refuses it.
        IntegrityError: the model's pass could not play (its endpoint failed).
    """
    check_name_free(spec.name, store, replace=replace)
    bootcamp = build_bootcamp(spec)
    vetted = vet_import(spec, bootcamp, cross_process=cross_process, level_seconds=level_seconds, say=say)
    if vetted != spec:  # levels dropped or the bound raised: the bootcamp on record is the vetted one
        spec, bootcamp = vetted, build_bootcamp(vetted)
    spec = spec.model_copy(update={"version": bootcamp.version})
    # no verifier enters the loop untested (campflow.integrity.battery); a source's own partial credit
    # above the bound is its design (reasoning-gym's similarity scores): noted; full marks are refused
    battery = run_battery(bootcamp, instances=_battery_instances(spec, bootcamp), partial_refuses=False)
    if spec.adapter == "mcp" and not battery.passed:  # a weak check belongs to one task: that task goes
        from campflow.mcp.vetting import drop_weak_tasks

        spec, bootcamp, battery = drop_weak_tasks(spec, bootcamp, battery, say)  # type: ignore[arg-type]
    if not battery.passed:
        raise ImportSourceError(f"{spec.adapter} source {spec.source!r}: {battery.refusal()}; not imported")
    if battery.over_bound and say is not None:
        top = max(battery.over_bound, key=lambda p: p.reward)
        say(f"the hack battery: non-solutions get partial credit up to {top.reward:g} ({top.says()})")
    if hacker is not None and hacker.enabled:
        played = run_hacker(bootcamp, hacker, partial_refuses=False)
        battery.probes += played.probes
        if not played.passed:  # the model's winning episodes are the evidence: kept, though nothing is imported
            record_probes(store, played.probes, subject=spec.name, source="import")
            raise ImportSourceError(f"{spec.adapter} source {spec.source!r}: {played.refusal()}; not imported")
    record(store, spec)
    record_probes(store, battery.probes, subject=spec.name, source="import")
    register_import(spec, replace=True)
    return spec, bootcamp


def _battery_instances(spec: ImportSpec, bootcamp: Bootcamp) -> list[Any] | None:
    """An MCP task file's every task (a weak check belongs to one task); None: every level's seeds."""
    if spec.adapter != "mcp":
        return None
    from campflow.mcp.tasks import task_instances

    return task_instances(bootcamp)  # type: ignore[arg-type]


def import_mcp_tasks(
    name: str,
    server: Any,
    rows: Sequence[Any],
    store: Store,
    *,
    replace: bool = False,
    say: Callable[[str], None] | None = None,
) -> tuple[ImportSpec, Bootcamp]:
    """Vet an MCP server's task rows on fresh servers and record the kept ones as bootcamp ``name``.

    ``server`` is a :class:`campflow.mcp.server.ServerSpec`, ``rows`` the
    :class:`campflow.mcp.tasks.TaskRow` list of a task file; :mod:`campflow.mcp.vetting` says what is
    checked. ``say`` receives one line per dropped task.

    Raises:
        ImportSourceError: the name is taken, or no task passes its vetting.
    """
    from campflow.mcp.vetting import vet_tasks

    check_name_free(name, store, replace=replace)
    options = {
        "server": server.model_dump(mode="json", exclude_defaults=True),
        "tasks": [r.model_dump(mode="json") for r in rows],
    }
    spec = ImportSpec(name=name, adapter="mcp", source=server.describe(), options=options)
    vetted = vet_tasks(spec, say)
    options.update(
        tasks=[r.model_dump(mode="json") for r in vetted.kept],
        tools=vetted.tools,
        wrong_answer_bound=vetted.wrong_answer_bound,
    )
    spec = spec.model_copy(update={"options": options})
    return import_bootcamp(spec, store, replace=replace, cross_process=False, say=say)


def check_name_free(name: str, store: Store, *, replace: bool = False) -> None:
    """Refuse ``name`` for a new import (or authored bootcamp) where it is taken.

    Raises:
        ImportSourceError: a built-in or user bootcamp has the name, or an import of that name is on record
            and ``replace`` is False.
    """
    existing = next((e for e in registry.entries() if e.name == name), None)
    if existing is not None and existing.origin != "imported":
        raise ImportSourceError(
            f"the name {name!r} belongs to a {existing.origin} bootcamp; choose another with --as/--name"
        )
    recorded_names = {s.name for s in recorded(store)}
    if name in recorded_names and not replace:
        raise ImportSourceError(f"{name!r} is already imported; pass --replace to import it again")


def record(store: Store, spec: ImportSpec) -> None:
    """Write (or overwrite) the spec's row in ``imported_bootcamps``, as one Arrow batch."""
    import pyarrow as pa

    rows = pa.table(
        {
            "name": [spec.name],
            "adapter": [spec.adapter],
            "source": [spec.source],
            "version": [spec.version],
            "options": [json.dumps(spec.options, sort_keys=True)],
            "created_at": pa.array([dt.datetime.now(dt.UTC).replace(tzinfo=None)], pa.timestamp("us")),
        }
    )
    store.insert("imported_bootcamps", rows, on_conflict="replace")


def recorded(store: Store) -> list[ImportSpec]:
    """Every import on record, oldest first."""
    rows = store.query("SELECT name, adapter, source, version, options FROM imported_bootcamps ORDER BY created_at")
    return [
        ImportSpec(
            name=r["name"],
            adapter=r["adapter"],
            source=r["source"],
            version=r["version"],
            options=_options(r["options"]),
        )
        for r in rows
    ]


def recorded_rows(store: Store) -> list[dict[str, Any]]:
    """The ``imported_bootcamps`` rows as dicts (for listings), oldest first."""
    return store.query(
        "SELECT name, adapter, source, version, options, created_at FROM imported_bootcamps ORDER BY created_at"
    )


def register_recorded(store: Store) -> list[ImportSpec]:
    """Register every recorded import (replacing stale imported entries); returns the specs registered.

    A recorded name that a built-in bootcamp has taken since is skipped: built-ins always win.
    """
    registered = []
    for spec in recorded(store):
        entry = next((e for e in registry.entries() if e.name == spec.name), None)
        if entry is not None and entry.origin != "imported":
            continue
        if entry is None or entry.kwargs.get("spec") != spec.model_dump(mode="json", exclude={"version"}):
            register_import(spec, replace=True)
        registered.append(spec)
    return registered


def forget(store: Store, name: str) -> bool:
    """Remove an import from the record and the registry; False if it was not recorded."""
    if name not in {s.name for s in recorded(store)}:
        return False
    with store.connection() as con:
        con.execute("DELETE FROM imported_bootcamps WHERE name = ?", [name])
    registry.unregister(name)
    return True


def _options(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    return json.loads(raw) if isinstance(raw, str) else dict(raw)
