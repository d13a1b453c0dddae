"""Read-only SQL on the store: what ``campflow sql`` and ``campflow runs`` use.

Read-only for the store and for the host, by DuckDB's own controls rather than by reading the SQL:

- the statement is parsed by DuckDB (``extract_statements``) and must be exactly one query: a
  statement of type SELECT (which covers ``SELECT``, ``WITH``, ``VALUES``, ``FROM``, ``SHOW``,
  ``DESCRIBE``, ``SUMMARIZE``, ``PIVOT ... IN (...)``) or EXPLAIN; COPY, EXPORT, ATTACH, INSTALL,
  LOAD, SET, PRAGMA, CALL and every write are refused before anything runs;
- the connection is read-only and opened with ``enable_external_access = false`` (no file outside
  the store, no network, no extension loading), extension autoinstall and autoload off, and the
  configuration locked, all set at connect time, so the store's views still read their tables and
  no statement can turn a setting back.

A writer holds the file's lock only while it writes a batch, so meeting the lock means waiting a
moment and trying again. The connection is closed as soon as the rows are fetched, before anything
is printed, so a reader never keeps a writer waiting longer than its query takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow.errors import QueryError, StoreError

# DuckDB settings of every read-only connection (see the module docstring).
READ_ONLY_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}
# What a query may be, by DuckDB's statement type; the words a user types for each, for messages.
QUERY_TYPES = ("SELECT", "EXPLAIN")
QUERY_WORDS = "SELECT, WITH, VALUES, FROM, SHOW, DESCRIBE, SUMMARIZE or EXPLAIN"


@dataclass
class QueryResult:
    """Column names and rows of a query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def to_pandas(self) -> Any:
        """The rows as a pandas ``DataFrame`` with these columns (needs the ``view`` extra)."""
        try:
            import pandas as pd
        except ModuleNotFoundError as exc:
            from campflow.extras import missing_extra

            raise (missing_extra(exc) or exc) from None
        return pd.DataFrame.from_records(self.rows, columns=self.columns)


def check_query(sql: str) -> None:
    """Refuse ``sql`` unless DuckDB parses it as exactly one query (see the module docstring).

    Raises:
        QueryError: one line naming what was refused (or DuckDB's parser message).
    """
    import duckdb

    from campflow.storage.store import one_line

    # the parser needs a connection; an in-memory one with the same settings touches nothing
    with duckdb.connect(":memory:", config=READ_ONLY_CONFIG) as parser:
        try:
            statements = parser.extract_statements(sql)
        except duckdb.Error as exc:
            raise QueryError(one_line(exc)) from None
    if not statements:
        raise QueryError(f"refused: no SQL statement given; campflow sql runs one query ({QUERY_WORDS})")
    if len(statements) > 1:
        kinds = ", ".join(s.type.name for s in statements)
        raise QueryError(
            f"refused {len(statements)} statements ({kinds}): campflow sql runs exactly one query ({QUERY_WORDS})"
        )
    kind = statements[0].type.name
    if kind not in QUERY_TYPES:
        raise QueryError(
            f"refused `{_excerpt(sql)}` (statement type {kind}): campflow sql is read-only and "
            f"runs one query ({QUERY_WORDS})"
        )


def run_sql(path: str | Path, sql: str, *, wait_s: float = 10.0, limit: int | None = None) -> QueryResult:
    """Run one read-only query ``sql`` on the store at ``path``; at most ``limit`` rows (None: all).

    Raises:
        StoreError: the store does not exist yet.
        StoreBusyError: a writer held the lock for longer than ``wait_s``.
        QueryError: the statement was refused, or DuckDB rejected it (its message, on one line).
    """
    import duckdb

    from campflow.storage.store import connect, one_line

    if limit is not None and limit < 0:
        raise QueryError(f"limit = {limit}: expected a number of rows >= 1 (or 0 / none for all rows)")
    check_query(sql)
    path = Path(path)
    if not path.exists():
        raise StoreError(f"no store at {path}; run `campflow eval` first or pass --db")
    con = connect(path, read_only=True, wait_s=wait_s, config=READ_ONLY_CONFIG)
    try:
        cur = con.execute(sql)
        if cur.description is None:
            return QueryResult([], [])
        columns = [d[0] for d in cur.description]
        rows = cur.fetchmany(limit) if limit else cur.fetchall()
        return QueryResult(columns, rows)
    except duckdb.PermissionException as exc:
        raise QueryError(
            f"refused: campflow sql has no file or network access outside the store ({one_line(exc)})"
        ) from None
    except duckdb.Error as exc:
        message = one_line(exc)
        if "read-only" in message.lower() or "read only" in message.lower():
            message = f"the store is opened read-only; {message}"
        raise QueryError(message) from None
    finally:
        con.close()


def _excerpt(sql: str, width: int = 60) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[: width - 3] + "..."
