"""Improvement cycles in the store: which steps are done, what each produced, and the decision.

A cycle's ``state`` is a JSON object of the ids each completed step produced (run ids, dataset id,
model ids). It is written after every step, so a killed cycle resumes from the last completed one.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from campflow.errors import CampflowError, StoreError
from campflow.serialization import to_json
from campflow.storage.names import check_cycle_id
from campflow.storage.store import Store, now


@dataclass
class Cycle:
    """One improvement cycle as recorded."""

    cycle_id: str
    status: str
    step: str | None = None
    base_model_id: str | None = None
    state: dict[str, Any] = field(default_factory=dict)


def new_cycle_id() -> str:
    """A fresh, sortable cycle id such as ``cycle-20261130-034012-1a2b``."""
    return f"cycle-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}"


def start(store: Store, cycle_id: str | None = None) -> Cycle:
    """Record a new running cycle."""
    cycle = Cycle(check_cycle_id(cycle_id) if cycle_id is not None else new_cycle_id(), "running")
    with store.connection() as con:
        if con.execute("SELECT 1 FROM cycles WHERE cycle_id = ?", [cycle.cycle_id]).fetchone():
            raise CampflowError(f"cycle {cycle.cycle_id!r} already exists; resume it with --resume")
        con.execute(
            "INSERT INTO cycles (cycle_id, status, state, started_at) VALUES (?, 'running', '{}', ?)",
            [cycle.cycle_id, now()],
        )
    return cycle


def load(store: Store, cycle_id: str) -> Cycle:
    """A recorded cycle, to resume or inspect."""
    rows = store.query("SELECT cycle_id, status, step, base_model_id, state FROM cycles WHERE cycle_id = ?", [cycle_id])
    if not rows:
        raise CampflowError(f"no cycle {cycle_id!r}; `campflow cycles` lists them")
    r = rows[0]
    return Cycle(r["cycle_id"], r["status"], r["step"], r["base_model_id"], json.loads(r["state"] or "{}"))


def latest_id(store: Store) -> str | None:
    """The id of the most recent cycle, finished or not, if any."""
    return store.scalar("SELECT cycle_id FROM cycles ORDER BY started_at DESC LIMIT 1")


def latest_unfinished(store: Store) -> Cycle | None:
    """The most recent cycle that did not complete (to resume), if any."""
    cycle_id = store.scalar("SELECT cycle_id FROM cycles WHERE status <> 'completed' ORDER BY started_at DESC LIMIT 1")
    return load(store, cycle_id) if cycle_id else None


def save_step(store: Store, cycle: Cycle, step: str, **produced: Any) -> None:
    """Record that ``step`` completed and what it produced (merged into the cycle's state)."""
    cycle.state.update(produced)
    cycle.step = step
    with store.connection() as con:
        con.execute(
            "UPDATE cycles SET step = ?, state = ?, base_model_id = ?, status = 'running' WHERE cycle_id = ?",
            [step, to_json(cycle.state), cycle.base_model_id, cycle.cycle_id],
        )


def decide(
    store: Store,
    cycle: Cycle,
    *,
    candidate: str,
    metric: str,
    before: float,
    after: float,
    promoted: bool,
    reason: str | None = None,
) -> None:
    """Record the candidate, both figures of the metric, whether the candidate is promoted and why."""
    with store.connection() as con:
        con.execute(
            "UPDATE cycles SET candidate_model_id = ?, metric = ?, before_value = ?, after_value = ?, "
            "promoted = ?, decision = ? WHERE cycle_id = ?",
            [candidate, metric, before, after, promoted, reason, cycle.cycle_id],
        )


def finish(store: Store, cycle: Cycle) -> None:
    """Mark the cycle completed."""
    cycle.status = "completed"
    with store.connection() as con:
        con.execute(
            "UPDATE cycles SET status = 'completed', finished_at = ?, state = ? WHERE cycle_id = ?",
            [now(), to_json(cycle.state), cycle.cycle_id],
        )


def fail(store: Store, cycle: Cycle, error: str) -> bool:
    """Mark a cycle failed (it can still be resumed); False if even that write could not get the store.
    Never raises a store error of its own, so the caller's exception is the one that propagates."""
    cycle.status = "failed"
    try:
        with store.connection() as con:
            con.execute(
                "UPDATE cycles SET status = 'failed', state = ? WHERE cycle_id = ?",
                [to_json({**cycle.state, "error": error}), cycle.cycle_id],
            )
    except StoreError:
        return False
    return True


def promoted_model(store: Store) -> str | None:
    """The candidate of the latest cycle that promoted one: the current model."""
    return store.scalar(
        "SELECT candidate_model_id FROM cycles WHERE promoted AND status = 'completed' "
        "ORDER BY finished_at DESC LIMIT 1"
    )
