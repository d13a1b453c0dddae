"""``campflow gc``: remove the checkpoint folders nothing needs any more, and the scratch of dead runs.

A checkpoint folder under ``<workspace>/models`` is kept when it is

- promoted (a cycle's candidate that passed the gate), or an ancestor of one (the lineage of a
  promoted model: its SFT parent, that parent's base, ... through ``parent_model_id``);
- a cycle's start (the model a cycle evaluated first), or an ancestor of one;
- named in the state of a cycle that has not completed (``campflow improve --resume`` needs it);
- a base model (rebuilt only at the cost of pretraining; a few MB for the embedded ones);
- among the newest ``keep_newest`` checkpoints.

Everything else is removed; its row in ``checkpoints`` stays, so lineage queries and metrics keep
answering, and a step that needs it again retrains it (checkpoint ids are content hashes). A
``.partial`` folder is removed when the run writing it has ended (no process holds its writer's
lock, :func:`campflow.training.checkpoints.staging`) and no cycle is unfinished (a resumed cycle
continues a killed SFT or GRPO run from the checkpoint saved inside it). Only folders under
``<workspace>/models`` are ever touched: a model folder the user brought is registered where it lies
and never removed. The whole collection runs under the workspace lock, so never during a cycle.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from campflow.storage.lock import WorkspaceLock
from campflow.storage.store import Store
from campflow.training import checkpoints

PARTIAL = ".partial"


@dataclass(frozen=True)
class Removal:
    """A folder gc removes (or would remove) and why."""

    path: Path
    bytes: int
    model_id: str | None  # None for a .partial folder
    kind: str  # base / sft / rl, or "partial"
    reason: str


@dataclass
class Collection:
    """What gc removes and what it keeps (counted by the first reason that keeps each checkpoint)."""

    removals: list[Removal] = field(default_factory=list)
    kept: Counter[str] = field(default_factory=Counter)
    applied: bool = False

    @property
    def bytes(self) -> int:
        """Bytes the removals free."""
        return sum(r.bytes for r in self.removals)


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 if it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def plan(store: Store, workspace: Path, keep_newest: int = 3) -> Collection:
    """What :func:`collect_garbage` would remove from ``workspace``, without removing anything."""
    models = checkpoints.models_dir(workspace).resolve()
    rows = store.query("SELECT model_id, parent_model_id, kind, path FROM checkpoints ORDER BY created_at DESC")
    parent = {r["model_id"]: r["parent_model_id"] for r in rows}
    cycles = store.query("SELECT status, promoted, candidate_model_id, base_model_id, state FROM cycles")
    unfinished = [c for c in cycles if c["status"] != "completed"]
    roots: dict[str, str] = {}  # model id -> why it is kept
    for c in cycles:
        if c["promoted"] and c["candidate_model_id"]:
            roots.setdefault(c["candidate_model_id"], "promoted")
        for model in (c["base_model_id"], json.loads(c["state"] or "{}").get("model")):
            if model:
                roots.setdefault(model, "a cycle's start")
    for c in unfinished:
        state = json.loads(c["state"] or "{}")
        for key in ("model", "sft_model", "rl_model"):
            if state.get(key):
                roots.setdefault(state[key], "an unfinished cycle needs it")
    keep: dict[str, str] = {}
    for root, why in roots.items():
        model, label = root, why
        while model and model not in keep:  # up the lineage (content ids: it has no loops)
            keep[model] = label
            model, label = parent.get(model), f"ancestor ({why})"
    for r in rows:
        if r["kind"] == "base":
            keep.setdefault(r["model_id"], "base")
    for r in rows[:keep_newest]:
        keep.setdefault(r["model_id"], f"newest {keep_newest}")

    out = Collection()
    for r in rows:
        path = store.stored_path(r["path"])
        if r["model_id"] in keep:
            out.kept[keep[r["model_id"]]] += 1
        elif not _inside(path, models):
            out.kept["outside the workspace's models folder"] += 1
        elif path.exists():
            out.removals.append(Removal(path, folder_bytes(path), r["model_id"], r["kind"], "not needed"))
    if models.is_dir():
        for path in sorted(models.glob(f"*{PARTIAL}")):
            if not checkpoints.is_abandoned(path):
                out.kept["a .partial being written"] += 1
            elif unfinished:
                out.kept["a .partial an unfinished cycle may resume"] += 1
            else:
                out.removals.append(Removal(path, folder_bytes(path), None, "partial", "its run has ended"))
    return out


def collect_garbage(
    store: Store, workspace: Path, db_path: Path, *, keep_newest: int = 3, apply: bool = False
) -> Collection:
    """Plan a collection (:func:`plan`) and, with ``apply``, remove its folders under the workspace lock.

    Raises:
        WorkspaceBusyError: ``apply`` while a cycle holds the workspace.
    """
    if not apply:
        return plan(store, workspace, keep_newest)
    with WorkspaceLock(db_path, None):
        collection = plan(store, workspace, keep_newest)  # planned again under the lock: nothing moves now
        for removal in collection.removals:
            shutil.rmtree(removal.path)
        collection.applied = True
    return collection


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
    except ValueError:
        return False
    return True
