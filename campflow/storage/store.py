"""The store: one DuckDB file per workspace, written in Arrow batches by one process.

DuckDB lets one process hold a file for writing and locks every other process out, readers too.
So the writer opens the file for each batch and closes it again, never holding it across a rollout
or a training step, and both sides retry with backoff when they meet the other's lock: a reader
briefly, a writer for ``workspace.lock_wait_s``, saying which process (a reader, another writer) it
waits for. A run whose write finally fails is marked failed with that reason (:meth:`Store.fail_run`).
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from campflow import progress, stopping
from campflow.bootcamps.base import Instance
from campflow.config import WorkspaceConfig
from campflow.errors import QueryError, StoreBusyError, StoreError
from campflow.rollout.episode import RETRYABLE, Episode
from campflow.serialization import to_json
from campflow.storage.names import check_run_id
from campflow.storage.schema import migrate

DEFAULT_PATH = Path("campflow-data") / "campflow.duckdb"


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


def _holder(path: Path, exc: Exception, *, read_only: bool) -> str:
    """Who holds the lock, in words: a reader or a writer, and the process DuckDB names."""
    found = re.search(r"held in (.+?) \(PID (\d+)\)", str(exc))
    process = f"PID {found.group(2)}, {found.group(1)}" if found else "another process"
    if read_only:  # readers share the file, so only a writer keeps a reader out
        return f"a write is in progress ({process})"
    try:  # a writer is kept out by readers too; if we may join as a reader, readers are all it is
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.Error:
        return f"another process is writing it ({process})"
    return (
        f"a reader holds the file ({process}: `campflow sql` or a DuckDB client; `campflow sql` lets go "
        "as soon as its query is read)"
    )


# DuckDB opens a database instance on a file's first connection and drops it on its last close; two threads
# that open the same file at once can each see an instance whose Python scan functions are not yet there
# ("Table Function with name python_arrow_scan does not exist" on the first register), so this process opens
# one connection at a time (the agent runner writes calls and episodes from several threads)
_OPENING = threading.Lock()


def connect(
    path: Path, *, read_only: bool, wait_s: float, config: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """Open ``path``, retrying with backoff while another process holds its lock.

    A writer that has waited a second says once, through the progress reporter, who it is waiting
    for; when ``wait_s`` is spent it raises, naming the holder.

    Raises:
        StoreBusyError: the lock was still held after ``wait_s`` seconds.
        StoreError: the file cannot be opened for another reason.
    """
    start = time.monotonic()
    delay = 0.05
    noted = False
    while True:
        try:
            with _OPENING:
                return duckdb.connect(str(path), read_only=read_only, config=config or {})
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise StoreError(f"cannot open the store at {path}: {one_line(exc)}") from None
            waited = time.monotonic() - start
            if waited >= wait_s:
                verb = "reading" if read_only else "writing"
                raise StoreBusyError(
                    f"the store at {path} is locked: {_holder(path, exc, read_only=read_only)}; "
                    f"gave up {verb} after {wait_s:g}s"
                ) from None
            if not read_only and not noted and waited >= 1.0:
                noted = True
                progress.current().note(f"waiting to write the store: {_holder(path, exc, read_only=False)}")
            time.sleep(min(delay, max(wait_s - waited, 0.0)))
            delay = min(delay * 2, 0.5)


def now() -> dt.datetime:
    """The current UTC time without tzinfo, the form the store's TIMESTAMP columns hold."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Store:
    """The campflow store at ``path`` (created and migrated on first use)."""

    def __init__(self, path: str | Path = DEFAULT_PATH, *, lock_wait_s: float = 60.0) -> None:
        self.path = Path(path)
        self.lock_wait_s = lock_wait_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.connection() as con:
            migrate(con)

    @classmethod
    def of_workspace(cls, workspace: WorkspaceConfig) -> Store:
        """The store a workspace config names, waiting as long for the lock as it says."""
        return cls(workspace.db_path, lock_wait_s=workspace.lock_wait_s)

    def record_path(self, path: str | Path) -> str:
        """How the store records a file or folder (a checkpoint's, a dataset's): absolute, so a command
        run from any folder, or a query's result handed to ``from_pretrained``, finds it."""
        return str(Path(path).absolute())

    def stored_path(self, recorded: str) -> Path:
        """The file or folder a path the store recorded names, from this process. Stores written before
        2026-12-03 hold paths relative to the folder their command ran in, most often the workspace's
        parent (``campflow-data/models/...``): such a path is looked for there too."""
        path = Path(recorded)
        if path.is_absolute() or path.exists():
            return path
        beside = self.path.parent.absolute().parent / path
        return beside if beside.exists() else path

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection, held only for the ``with`` block."""
        con = connect(self.path, read_only=False, wait_s=self.lock_wait_s)
        try:
            yield con
        finally:
            con.close()

    # -- generic -----------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, **tables: pa.Table) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection inside one transaction, with ``tables`` registered under their keyword names:
        everything in the block is written, or (on any exception) nothing is."""
        with self.connection() as con:
            for name, rows in tables.items():
                con.register(name, rows)
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            finally:
                for name in tables:
                    con.unregister(name)

    def insert(self, table: str, rows: pa.Table, *, on_conflict: str = "replace") -> int:
        """Insert an Arrow table by column name; ``on_conflict`` is ``replace``, ``ignore`` or ``error``."""
        if rows.num_rows == 0:
            return 0
        verb = {"replace": "INSERT OR REPLACE", "ignore": "INSERT OR IGNORE", "error": "INSERT"}[on_conflict]
        with self.connection() as con:
            con.register("_campflow_batch", rows)
            try:
                con.execute(f"{verb} INTO {table} BY NAME SELECT * FROM _campflow_batch")
            finally:
                con.unregister("_campflow_batch")
        return rows.num_rows

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts (for small internal reads)."""
        with self.connection() as con:
            try:
                cur = con.execute(sql, params or [])
            except duckdb.Error as exc:
                raise QueryError(one_line(exc)) from None
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """The first column of the first row of ``sql`` (None if no rows)."""
        with self.connection() as con:
            row = con.execute(sql, params or []).fetchone()
        return row[0] if row else None

    # -- runs ------------------------------------------------------------------------------------

    def start_run(self, run_id: str, kind: str, config: Mapping[str, Any], model_id: str | None) -> bool:
        """Record a run as running; True if it is new, False if an earlier run with this id resumes.

        A run resumes only with the model it was recorded for: its finished episodes are kept and not
        played again, so resuming with another model would mix two models' episodes in one run.

        Raises:
            ConfigError: ``run_id`` is not a valid id (:mod:`campflow.storage.names`).
            StoreError: the id belongs to a run of another kind or of another model.
        """
        check_run_id(run_id)
        with self.connection() as con:
            existing = con.execute("SELECT kind, model_id FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if existing is not None:
                if existing[0] != kind:
                    raise StoreError(f"run id {run_id!r} already belongs to a {existing[0]} run, not {kind}")
                if existing[1] is not None and model_id is not None and existing[1] != model_id:
                    raise StoreError(
                        f"run id {run_id!r} was recorded for model {existing[1]}, not {model_id}: resuming it "
                        "would mix the two models' episodes; give the run another id"
                    )
                con.execute("UPDATE runs SET status = 'running', finished_at = NULL WHERE run_id = ?", [run_id])
                return False
            con.execute(
                "INSERT INTO runs (run_id, kind, model_id, config, status, started_at) "
                "VALUES (?, ?, ?, ?, 'running', ?)",
                [run_id, kind, model_id, to_json(config), now()],
            )
            return True

    def finish_run(self, run_id: str, status: str, summary: Mapping[str, Any] | None = None) -> None:
        """Mark a run completed or failed, with a JSON summary."""
        with self.connection() as con:
            con.execute(
                "UPDATE runs SET status = ?, finished_at = ?, summary = ? WHERE run_id = ?",
                [status, now(), to_json(summary or {}), run_id],
            )

    def fail_run(self, run_id: str, exc: BaseException) -> bool:
        """Mark a run failed with ``exc`` as the reason; False if even that write could not get the file
        (the run then stays ``running`` until it is rerun). Never raises a store error of its own, so
        the caller's exception is the one that propagates."""
        signal_name = stopping.received()
        reason = f"stopped by {signal_name}" if signal_name else f"{type(exc).__name__}: {exc}"
        progress.current().note(f"run {run_id} failed: {reason}")
        try:
            self.finish_run(run_id, "failed", {"error": reason})
        except StoreError:
            return False
        return True

    # -- instances -------------------------------------------------------------------------------

    def write_instances(
        self,
        instances: Iterable[Instance],
        *,
        split: str,
        origin: str = "generated",
        variant_id: str | None = None,
    ) -> int:
        """Record instances (idempotent: an id already present is left as it is)."""
        return self.insert(
            "instances",
            instances_to_arrow(list(instances), split=split, origin=origin, variant_ids=variant_id),
            on_conflict="ignore",
        )

    def eval_ids(self, bootcamp: str | None = None) -> set[str]:
        """Ids of every instance recorded in the eval split (optionally of one bootcamp)."""
        sql = "SELECT instance_id FROM instances WHERE split = 'eval'"
        params: list[Any] = []
        if bootcamp:
            sql += " AND bootcamp = ?"
            params.append(bootcamp)
        with self.connection() as con:
            return {r[0] for r in con.execute(sql, params).fetchall()}

    def probe_ids(self, bootcamp: str | None = None) -> set[str]:
        """Ids of every variant probe instance (split ``probe``): held out like the eval split."""
        sql = "SELECT instance_id FROM instances WHERE split = 'probe'" + (" AND bootcamp = ?" if bootcamp else "")
        with self.connection() as con:
            return {r[0] for r in con.execute(sql, [bootcamp] if bootcamp else []).fetchall()}

    # -- episodes --------------------------------------------------------------------------------

    def write_episodes(self, episodes: Sequence[Episode]) -> int:
        """Insert or replace episodes by (run id, instance id, sample index), as one Arrow batch.

        One transaction deletes the stored episodes with the batch's keys and inserts the batch, so a key
        is never stored twice (the table has no primary-key index; see schema migration 3) and a failed
        write leaves the table as it was. Within a batch, the last episode of a key wins.
        """
        if len({e.id for e in episodes}) < len(episodes):  # an id hashes the key: a key twice (rare)
            episodes = list({(e.run_id, e.instance_id, e.sample): e for e in episodes}.values())
        rows = episodes_to_arrow(episodes)
        if rows.num_rows == 0:
            return 0
        with self.transaction(_campflow_episodes=rows) as con:
            con.execute(
                "DELETE FROM episodes USING _campflow_episodes b WHERE episodes.run_id = b.run_id "
                "AND episodes.instance_id = b.instance_id AND episodes.sample_index = b.sample_index"
            )
            con.execute("INSERT INTO episodes BY NAME SELECT * FROM _campflow_episodes")
        return rows.num_rows

    def completed_keys(self, run_id: str) -> set[tuple[str, int]]:
        """(instance id, sample) of a run's episodes that need no re-run (not infra-failed)."""
        retry = tuple(t.value for t in RETRYABLE)
        marks = ", ".join("?" for _ in retry)
        with self.connection() as con:
            rows = con.execute(
                f"SELECT instance_id, sample_index FROM episodes WHERE run_id = ? AND termination NOT IN ({marks})",
                [run_id, *retry],
            ).fetchall()
        return {(r[0], r[1]) for r in rows}


def instances_to_arrow(
    instances: Sequence[Instance], *, split: str, origin: str, variant_ids: str | Sequence[str | None] | None = None
) -> pa.Table:
    """Instances as an Arrow table in the ``instances`` column layout; ``variant_ids`` is one id for
    all rows or one per row."""
    if split not in ("train", "eval", "probe"):
        raise ValueError(f"split = {split!r}: expected 'train', 'eval' or 'probe'")
    n = len(instances)
    vids = [variant_ids] * n if variant_ids is None or isinstance(variant_ids, str) else list(variant_ids)
    ts = now()
    return pa.table(
        {
            "instance_id": [i.id for i in instances],
            "bootcamp": [i.bootcamp for i in instances],
            "version": [i.version for i in instances],
            "level": pa.array([i.level for i in instances], pa.int32()),
            "params": [to_json(i.params.model_dump(mode="json")) for i in instances],
            "seed": pa.array([i.seed for i in instances], pa.int64()),
            "split": [split] * n,
            "origin": [origin] * n,
            "variant_id": pa.array(vids, pa.string()),
            "created_at": pa.array([ts] * n, pa.timestamp("us")),
        }
    )


EPISODE_SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("run_id", pa.string()),
        ("instance_id", pa.string()),
        ("bootcamp", pa.string()),
        ("level", pa.int32()),
        ("model_id", pa.string()),
        ("sample_index", pa.int32()),
        ("reward", pa.float64()),
        ("success", pa.bool_()),
        ("termination", pa.string()),
        ("turns", pa.int32()),
        ("tool_calls", pa.int32()),
        ("invalid_calls", pa.int32()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("latency_s", pa.float64()),
        ("wall_s", pa.float64()),
        ("transcript", pa.string()),
        ("details", pa.string()),
        ("error", pa.string()),
        ("created_at", pa.timestamp("us")),
    ]
)


def episodes_to_arrow(episodes: Sequence[Episode]) -> pa.Table:
    """Episodes as an Arrow table in the ``episodes`` column layout, built column by column."""
    ts = now()
    n = len(episodes)
    columns = {
        "episode_id": [e.id for e in episodes],
        "run_id": [e.run_id for e in episodes],
        "instance_id": [e.instance_id for e in episodes],
        "bootcamp": [e.bootcamp for e in episodes],
        "level": [e.level for e in episodes],
        "model_id": [e.model_id for e in episodes],
        "sample_index": [e.sample for e in episodes],
        "reward": [e.reward for e in episodes],
        "success": [e.success for e in episodes],
        "termination": [str(e.termination) for e in episodes],
        "turns": [e.turns for e in episodes],
        "tool_calls": [e.tool_calls for e in episodes],
        "invalid_calls": [e.invalid_calls for e in episodes],
        "prompt_tokens": [e.prompt_tokens for e in episodes],
        "completion_tokens": [e.completion_tokens for e in episodes],
        "latency_s": [e.latency_s for e in episodes],
        "wall_s": [e.wall_s for e in episodes],
        # from UTF-8 bytes: pyarrow builds a string column from Python str ~8x slower than from bytes
        "transcript": pa.array([e.transcript_json() for e in episodes], pa.binary()).cast(pa.string()),
        "details": [to_json(e.details) for e in episodes],
        "error": [e.error for e in episodes],
        "created_at": [ts] * n,
    }
    return pa.Table.from_pydict(columns, schema=EPISODE_SCHEMA)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (DuckDB's span several with a caret diagram)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not set(ln.strip()) <= {"^", " "}]
    return " ".join(lines)
