"""Read-only SQL on the store: what ``campflow sql`` and ``campflow runs`` use.

The connection is opened read-only, so a stray ``DROP`` or ``UPDATE`` fails inside DuckDB and the data
is untouched. A writer holds the file's lock only while it writes a batch, so meeting the lock means
waiting a moment and trying again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow.errors import QueryError, StoreError


@dataclass
class QueryResult:
    """Column names and rows of a query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


def run_sql(path: str | Path, sql: str, *, wait_s: float = 10.0, limit: int | None = None) -> QueryResult:
    """Run ``sql`` on a read-only connection to the store at ``path``.

    Raises:
        StoreError: the store does not exist yet.
        StoreBusyError: a writer held the lock for longer than ``wait_s``.
        QueryError: DuckDB rejected the SQL (its message, on one line).
    """
    import duckdb

    from campflow.storage.store import connect, one_line

    path = Path(path)
    if not path.exists():
        raise StoreError(f"no store at {path}; run `campflow eval` first or pass --db")
    con = connect(path, read_only=True, wait_s=wait_s)
    try:
        cur = con.execute(sql)
        if cur.description is None:
            return QueryResult([], [])
        columns = [d[0] for d in cur.description]
        rows = cur.fetchmany(limit) if limit else cur.fetchall()
        return QueryResult(columns, rows)
    except duckdb.Error as exc:
        message = one_line(exc)
        if "read-only" in message.lower() or "read only" in message.lower():
            message = f"the store is opened read-only; {message}"
        raise QueryError(message) from None
    finally:
        con.close()
