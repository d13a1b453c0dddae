"""What ``campflow author`` keeps: every module in the workspace, every attempt and verdict in the store.

Modules are content-addressed files, ``<workspace>/authored/<name>/<sha256[:16]>.py``, one per distinct
source an LLM returned (accepted or not), so a verdict's ``source_sha256`` always names a file. An
attempt (one ``campflow author`` run) is a row of ``author_attempts``, rewritten as it goes (running,
then accepted, rejected or failed, with the reasons); each round's verdicts are rows of
``author_verdicts``, one per check (and level), written as one Arrow batch. The view ``author_rounds``
sums them up per round. An accepted module is recorded like an import (:mod:`campflow.storage.imports`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.authoring.contract_run import Verdict
from campflow.sources.authored import source_sha256
from campflow.storage.store import Store, now

MODULES_DIR = "authored"


def module_path(workspace: Path, name: str, sha256: str) -> Path:
    """Where the module with this source hash is kept in the workspace."""
    return workspace / MODULES_DIR / name / f"{sha256[:16]}.py"


def save_module(workspace: Path, name: str, source: str) -> Path:
    """Keep ``source`` in the workspace (once per distinct source) and return its absolute path."""
    path = module_path(workspace, name, source_sha256(source)).absolute()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(source, encoding="utf-8")
        os.replace(partial, path)  # a reader never sees half a module
    return path


def new_attempt_id() -> str:
    """``author-20261201-113412-1a2b3c``: when, plus a random tail."""
    return f"author-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


@dataclass
class Attempt:
    """One ``campflow author`` run, as its ``author_attempts`` row."""

    attempt_id: str
    name: str
    task_path: str
    task_sha256: str
    examples_path: str | None
    examples: int
    model: str | None
    status: str = "running"
    rounds: int = 0
    source_sha256: str | None = None
    module_path: str | None = None
    reasons: str | None = None
    started_at: dt.datetime = field(default_factory=now)
    finished_at: dt.datetime | None = None

    def save(self, store: Store) -> None:
        """Write (or rewrite) this attempt's row."""
        import pyarrow as pa

        row = {k: [v] for k, v in vars(self).items()}
        types = {"started_at": pa.timestamp("us"), "finished_at": pa.timestamp("us"), "examples": pa.int32()}
        types |= {"rounds": pa.int32()}
        schema = pa.schema([(k, types.get(k, pa.string())) for k in row])
        store.insert("author_attempts", pa.table(row, schema=schema), on_conflict="replace")

    def finish(self, store: Store, status: str, reasons: str | None = None) -> None:
        """Mark the attempt accepted, rejected or failed (with why) and write it."""
        self.status, self.reasons, self.finished_at = status, reasons, now()
        self.save(store)


def record_verdicts(
    store: Store,
    attempt: Attempt,
    number: int,
    verdicts: Sequence[Verdict],
    sha256: str | None,
    isolation: Sequence[str] = (),
) -> None:
    """Write one round's verdicts as one batch."""
    import pyarrow as pa

    n = len(verdicts)
    decided = now()
    rows = pa.table(
        {
            "attempt_id": [attempt.attempt_id] * n,
            "name": [attempt.name] * n,
            "round": pa.array([number] * n, pa.int32()),
            "check_name": [v.check for v in verdicts],
            "level": pa.array([v.level for v in verdicts], pa.int32()),
            "passed": pa.array([v.passed for v in verdicts], pa.bool_()),
            "reason": [v.reason or None for v in verdicts],
            "evidence": [json.dumps(v.evidence, sort_keys=True, default=str) if v.evidence else None for v in verdicts],
            "source_sha256": [sha256] * n,
            "isolation": ["+".join(isolation) or None] * n,
            "decided_at": pa.array([decided] * n, pa.timestamp("us")),
        }
    )
    store.insert("author_verdicts", rows, on_conflict="error")


def verdict_rows(store: Store, attempt_id: str) -> list[dict[str, Any]]:
    """An attempt's verdicts, by round, check and level (for reports and tests)."""
    return store.query(
        "SELECT round, check_name, level, passed, reason, evidence, source_sha256 FROM author_verdicts "
        "WHERE attempt_id = ? ORDER BY round, check_name, level",
        [attempt_id],
    )
