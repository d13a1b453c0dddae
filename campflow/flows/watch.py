"""The ``watch`` flow: count new model failures since the last training, and start a cycle past the
threshold. Every decision is recorded in ``watch_decisions``."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow

from campflow.config import CampflowConfig, as_config
from campflow.flows.improve import CycleSummary, improve_flow
from campflow.storage import cycles
from campflow.storage.lock import WorkspaceBusyError, WorkspaceLock
from campflow.storage.store import Store, now
from campflow.storage.workspace import Workspace


@dataclass
class WatchDecision:
    """What watch counted and whether it started a cycle."""

    new_failures: int
    threshold: int
    started: CycleSummary | None
    busy: str | None = None  # why no cycle could start: the workspace lock's holder


def new_failures(store: Store) -> int:
    """Model failures recorded by evaluations since the last training (the ``new_failures`` view)."""
    return int(store.scalar("SELECT coalesce(sum(failures), 0) FROM new_failures") or 0)


@flow(name="watch", log_prints=False, validate_parameters=False)
def watch_flow(cfg: CampflowConfig) -> WatchDecision:
    """Start one improvement cycle if enough new failures have accumulated (and none is running).
    ``cfg`` may also be a dict or a YAML path (a deployment's parameters)."""
    cfg = as_config(cfg)
    store = Workspace.from_config(cfg).store
    count, threshold = new_failures(store), cfg.watch.threshold
    lock = WorkspaceLock(cfg.workspace.db_path)
    try:
        lock.acquire()  # held from the decision to the end of the cycle it starts
    except WorkspaceBusyError as busy:
        with store.connection() as con:
            con.execute("INSERT INTO watch_decisions VALUES (?, ?, ?, ?)", [now(), count, threshold, None])
        return WatchDecision(count, threshold, None, str(busy))
    try:
        running = cycles.latest_unfinished(store)
        cycle_id = None
        if count >= threshold and running is None:
            cycle_id = cycles.new_cycle_id()
            lock.name(cycle_id)
        with store.connection() as con:
            con.execute("INSERT INTO watch_decisions VALUES (?, ?, ?, ?)", [now(), count, threshold, cycle_id])
        started = improve_flow(cfg, cycle_id) if cycle_id else None
    finally:
        lock.release()
    return WatchDecision(count, threshold, started)
