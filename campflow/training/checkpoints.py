"""Checkpoints: models on disk under the workspace, with their lineage recorded in the store."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow.errors import CampflowError
from campflow.serialization import to_json
from campflow.storage.store import Store, now


class UnknownCheckpointError(CampflowError):
    """A model id or path that names no checkpoint."""

    exit_code = 2


@dataclass(frozen=True)
class Checkpoint:
    """A registered model."""

    model_id: str
    kind: str
    path: Path
    parent_model_id: str | None
    dataset_id: str | None
    metrics: dict[str, Any]


def models_dir(workspace: Path) -> Path:
    """Where checkpoints live."""
    return workspace / "models"


def checkpoint_id(kind: str, *parts: Any) -> str:
    """A content id for a checkpoint built by ``kind`` from ``parts`` (parent, dataset, settings)."""
    digest = hashlib.sha256(json.dumps([kind, *parts], sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{kind}-{digest}"


def get(store: Store, model: str) -> Checkpoint:
    """The checkpoint with model id ``model``, or registered at path ``model``.

    Raises:
        UnknownCheckpointError: none is recorded so, or its folder no longer exists.
    """
    rows = store.query(
        "SELECT * FROM checkpoints WHERE model_id = ? OR path = ? OR path = ?",
        [model, store.record_path(model), str(Path(model))],  # the last: as recorded before 2026-12-03
    )
    if not rows:
        known = [r["model_id"] for r in store.query("SELECT model_id FROM checkpoints ORDER BY created_at")]
        raise UnknownCheckpointError(
            f"no checkpoint {model!r}; known: {', '.join(known) or 'none yet'} "
            "(build the base model with `campflow train base`)"
        )
    r = rows[0]
    path = store.stored_path(r["path"])
    if not path.exists():
        raise UnknownCheckpointError(
            f"checkpoint {r['model_id']} is recorded at {path}, which does not exist: `campflow gc` removed it, "
            "or it was moved"
        )
    return Checkpoint(
        r["model_id"],
        r["kind"],
        path,
        r["parent_model_id"],
        r["dataset_id"],
        json.loads(r["metrics"] or "{}"),
    )


def find(store: Store, model_id: str) -> Checkpoint | None:
    """The checkpoint ``model_id`` if it is registered and its folder still exists."""
    try:
        return get(store, model_id)
    except UnknownCheckpointError:
        return None


def register(
    store: Store,
    model_id: str,
    kind: str,
    path: Path,
    *,
    parent: str | None = None,
    dataset_id: str | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Record a checkpoint (idempotent on the model id) and stamp its folder with its id."""
    meta_file = path / "campflow.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    meta.update({"model_id": model_id, "kind": kind, "parent_model_id": parent, "dataset_id": dataset_id})
    meta_file.write_text(json.dumps(meta, indent=1))
    with store.connection() as con:
        con.execute(
            "INSERT OR REPLACE INTO checkpoints (model_id, parent_model_id, kind, path, dataset_id, metrics, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [model_id, parent, kind, store.record_path(path), dataset_id, to_json(dict(metrics or {})), now()],
        )
    return Checkpoint(model_id, kind, path, parent, dataset_id, dict(metrics or {}))


OWNER_LOCK = ".campflow-writing.lock"  # inside a .partial folder: flock'ed by the process writing it


@contextmanager
def staging(final: Path, *, write: bool = True, resume: bool = False) -> Iterator[Path]:
    """A scratch folder that becomes ``final`` only when the block completes (a killed run leaves no
    half-written checkpoint under the final name).

    The writing process holds an exclusive ``flock`` on a file inside the scratch folder while the block
    runs; the kernel drops it when the process ends, so a ``.partial`` folder whose lock can be taken
    belongs to a dead run (``campflow gc`` removes those), and two processes never write one at once.
    With ``resume`` a dead run's scratch folder is kept (a trainer resumes from the checkpoint it saved
    there); else it is emptied first.

    With ``write=False`` (a non-main process of a distributed run) the same path is yielded and nothing
    is created, removed or renamed: the main process owns the folder.

    Raises:
        CampflowError: another process is writing ``final`` now.
    """
    tmp = final.with_name(final.name + ".partial")
    if not write:
        yield tmp
        return
    if tmp.exists() and not resume:
        stale = _take(tmp)  # refuses if its writer is alive
        shutil.rmtree(tmp)
        os.close(stale)
    tmp.mkdir(parents=True, exist_ok=True)
    owner = _take(tmp)
    try:
        yield tmp
        (tmp / OWNER_LOCK).unlink(missing_ok=True)  # not part of the checkpoint; the open file keeps the lock
        if final.exists():
            shutil.rmtree(final)
        tmp.replace(final)
    finally:
        os.close(owner)


def _take(tmp: Path) -> int:
    """Take the writer's lock of the scratch folder ``tmp``; returns its open file (closing it releases)."""
    fd = os.open(tmp / OWNER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise CampflowError(f"another process is writing {tmp.name} now; wait for it or stop it first") from None
    return fd


def is_abandoned(partial: Path) -> bool:
    """Whether ``partial`` (a ``.partial`` folder) belongs to a run that has ended: no process holds its lock."""
    lock = partial / OWNER_LOCK
    if not lock.exists():
        return True  # written before writers locked, or by a process that never took it
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def resolve(store: Store, model: str, *, record: bool = True) -> Checkpoint:
    """The checkpoint ``model`` names (an id or a registered path), or a model folder the user brings,
    adopted as a ``base`` checkpoint (any Hugging Face model saved with ``save_pretrained``).

    ``record=False`` (a non-main process of a distributed run) names the adopted folder without
    writing it into the store.
    """
    try:
        return get(store, model)
    except UnknownCheckpointError:
        if (Path(model) / "config.json").exists():
            return adopt(store, model, record=record)
        raise


def adopt(store: Store, path: str | Path, *, record: bool = True) -> Checkpoint:
    """Register a model folder the user brings (a ``save_pretrained`` folder) as a ``base`` checkpoint."""
    folder = Path(path)
    if not (folder / "config.json").exists():
        raise UnknownCheckpointError(
            f"{folder} is not a model folder (no config.json); expected the output of "
            "save_pretrained, or improve.model: embedded"
        )
    model_id = checkpoint_id("base", str(folder.resolve()))
    existing = find(store, model_id)
    if existing is not None:
        return existing
    if not record:
        return Checkpoint(model_id, "base", folder.resolve(), None, None, {})
    return register(store, model_id, "base", folder.resolve())


def local_model_path(store: Store | None, model: str | None) -> str:
    """The folder a local policy loads for ``model``: a model folder as given, else a checkpoint id's
    path in ``store`` (None: there is no store to look in).

    Raises:
        CampflowError: no model was given, or it is neither a folder nor a recorded checkpoint.
    """
    from campflow.errors import ConfigError

    if not model:
        raise ConfigError(
            "policy.model is required for a local policy: a model folder or a checkpoint id "
            '(see `campflow sql "SELECT model_id, kind FROM checkpoints"`)'
        )
    if Path(model).exists():
        return model
    if store is None:
        raise ConfigError(
            f"policy.model {model!r} is not a model folder, and there is no store to look it up in as a checkpoint id"
        )
    return str(get(store, model).path)
