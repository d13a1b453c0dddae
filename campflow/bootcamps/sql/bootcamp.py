"""sql: answer questions about a generated database with read-only SQL (see world.py for the data)."""

from __future__ import annotations

import math
import random
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Exemptions,
    Instance,
    NoArgs,
    Observation,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.bootcamps.demonstration import called, exchanges
from campflow.bootcamps.messages import clip
from campflow.bootcamps.sql.world import SCHEMAS, SqlParams, entity_names, generate_question
from campflow.errors import ToolError

MAX_SQL_CHARS = 4_000
MAX_ROWS = 50
MAX_CELL_CHARS = 120
MAX_ANSWER_CHARS = 2_000
# A query is bounded by counting, never by a clock, so whether it is stopped does not depend on the
# machine: SQLite VM instructions, and the size of the values one instruction may work on (a text
# function is linear or, like instr and replace, quadratic in its arguments' length). 1M steps is
# ~4x the heaviest reasonable query at the largest params (a correlated subquery per customer, 245k);
# the gold queries take at most ~6k. Measured worst case within these limits (nested replace/instr on
# values of the longest length, over a cross join): ~0.2 s on a 2-core machine, against an unbounded
# run before (162 s for one such query under 1M-character values).
STEP_BATCH = 1_000  # SQLite VM instructions between progress-handler calls
MAX_STEPS = 1_000_000  # per query
#: SQL's own words, which a query may hold without the world having shown them
SQL_WORDS = frozenset(
    "select distinct from where and or not in is null like between join inner left on as group by having "
    "order asc desc limit count sum avg min max round lower upper".split()
)
MAX_VALUE_CHARS = 500  # longest text or blob a query may build (cells show at most 120 characters)
MAX_PATTERN_CHARS = 50  # longest LIKE or GLOB pattern
# Answers asked "rounded to 2 decimals" are compared with the exact value: half a cent either way
# accepts both ways of rounding a tie (Python's and SQLite's differ), and nothing further off.
NUMBER_TOLERANCE = 0.0051

_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
_FUNCTIONS = frozenset(
    "abs avg count group_concat coalesce ifnull iif instr length like glob lower upper ltrim rtrim trim max min "
    "nullif round substr substring sum total typeof replace date time datetime julianday strftime unicode "
    "char".split()
)
_ACTION_NAMES = {
    getattr(sqlite3, n): n.removeprefix("SQLITE_").replace("_", " ")
    for n in (
        "SQLITE_CREATE_INDEX",
        "SQLITE_CREATE_TABLE",
        "SQLITE_CREATE_TEMP_INDEX",
        "SQLITE_CREATE_TEMP_TABLE",
        "SQLITE_CREATE_TEMP_TRIGGER",
        "SQLITE_CREATE_TEMP_VIEW",
        "SQLITE_CREATE_TRIGGER",
        "SQLITE_CREATE_VIEW",
        "SQLITE_DELETE",
        "SQLITE_DROP_INDEX",
        "SQLITE_DROP_TABLE",
        "SQLITE_DROP_TEMP_INDEX",
        "SQLITE_DROP_TEMP_TABLE",
        "SQLITE_DROP_TEMP_TRIGGER",
        "SQLITE_DROP_TEMP_VIEW",
        "SQLITE_DROP_TRIGGER",
        "SQLITE_DROP_VIEW",
        "SQLITE_INSERT",
        "SQLITE_PRAGMA",
        "SQLITE_TRANSACTION",
        "SQLITE_UPDATE",
        "SQLITE_ATTACH",
        "SQLITE_DETACH",
        "SQLITE_ALTER_TABLE",
        "SQLITE_REINDEX",
        "SQLITE_ANALYZE",
        "SQLITE_CREATE_VTABLE",
        "SQLITE_DROP_VTABLE",
        "SQLITE_SAVEPOINT",
    )
}
_READ_ONLY = (
    "expected one read-only SELECT statement (no INSERT/UPDATE/DELETE, CREATE/DROP/ALTER, ATTACH, "
    "PRAGMA, transactions or functions outside the usual aggregates and string/date functions)"
)
# the first word after any leading whitespace and comments
# (atomic groups: ``(?:\s+|...)*`` backtracks exponentially on a long run of whitespace that is not
# followed by a word, e.g. "/**/" + 30 spaces + "(SELECT 1)")
_LEADING_WORD = re.compile(r"^(?>\s+|--[^\n]*+\n?|/\*.*?\*/)*+([A-Za-z]+)", re.S)


class Sandbox:
    """One episode's in-memory SQLite database, open to read-only queries under step and row limits.

    An authorizer allows only SELECT, reads and a list of harmless functions (no writes, DDL, ATTACH,
    PRAGMA, transactions, ``randomblob``/``zeroblob``); a progress handler stops a query after
    ``MAX_STEPS`` VM instructions; results are cut at ``MAX_ROWS`` rows.
    """

    def __init__(self, tables: dict[str, list[list[Any]]]) -> None:
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        for name, rows in tables.items():
            cols = SCHEMAS[name]
            self.conn.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})")
            self.conn.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)
        self.conn.commit()
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_CHARS)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_PATTERN_CHARS)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self.conn.execute("PRAGMA query_only = ON")
        self.refused: list[str] = []
        self.steps = 0  # VM instructions the last query ran, in batches of STEP_BATCH
        self.conn.set_authorizer(self._authorize)
        self.conn.set_progress_handler(self._progress, STEP_BATCH)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None) -> int:
        if action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _FUNCTIONS:
            return sqlite3.SQLITE_OK
        self.refused.append(
            f"the function {arg2}()"
            if action == sqlite3.SQLITE_FUNCTION
            else _ACTION_NAMES.get(action, f"action {action}")
        )
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        self.steps += STEP_BATCH
        return int(self.steps > MAX_STEPS)

    def run(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        """Columns, up to MAX_ROWS rows, and whether more rows were cut; ToolError for any refusal."""
        keyword = _LEADING_WORD.match(sql)
        verb = keyword.group(1).upper() if keyword else sql[:20]
        if verb not in ("SELECT", "WITH", "VALUES"):
            raise ToolError(f"query refused: {verb} statements are not allowed; {_READ_ONLY}")
        bad = _lone_surrogate(sql)
        if bad is not None:
            raise ToolError(f"query holds {bad}, which is not valid Unicode; expected UTF-8 text")
        self.refused, self.steps = [], 0
        try:
            cur = self.conn.execute(sql)
            rows = cur.fetchmany(MAX_ROWS + 1)
            columns = [d[0] for d in cur.description or ()]
            cur.close()
        except sqlite3.Error as exc:
            if self.refused:
                # A pragma table function is refused through an odd first action; name what was meant.
                what = next(
                    (r for r in self.refused if r.startswith("the function")),
                    "PRAGMA" if "PRAGMA" in self.refused or "pragma_" in sql.lower() else self.refused[0],
                )
                raise ToolError(f"query refused: {what} is not allowed; {_READ_ONLY}") from None
            if "one statement at a time" in str(exc):
                raise ToolError("query refused: it holds more than one statement; send one SELECT per query") from None
            if "interrupted" in str(exc):
                raise ToolError(
                    f"query stopped after {MAX_STEPS:,} steps, the limit; add conditions, aggregate or LIMIT the rows"
                ) from None
            if "too big" in str(exc):
                raise ToolError(
                    f"query stopped: a value grew past {MAX_VALUE_CHARS} characters, the limit; "
                    f"select shorter values (cells show at most {MAX_CELL_CHARS})"
                ) from None
            if "pattern too complex" in str(exc):
                raise ToolError(
                    f"query refused: a LIKE or GLOB pattern is longer than {MAX_PATTERN_CHARS} characters, the limit"
                ) from None
            raise ToolError(f"SQL error: {exc}") from None
        finally:
            if self.conn.in_transaction:  # defensive: nothing can write, but never leave one open
                self.conn.rollback()
        return columns, rows[:MAX_ROWS], len(rows) > MAX_ROWS

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every table's rows, for checking that nothing changed (bypasses the limits)."""
        self.conn.set_authorizer(None)
        self.conn.set_progress_handler(None, 0)
        try:
            names = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {n: self.conn.execute(f"SELECT * FROM {n}").fetchall() for n in sorted(names)}
        finally:
            self.conn.set_authorizer(self._authorize)
            self.conn.set_progress_handler(self._progress, STEP_BATCH)


class QueryArgs(ToolArgs):
    """Arguments of query."""

    sql: str = Field(description="one read-only SELECT statement (SQLite dialect), at most 4,000 characters")


class TableArgs(ToolArgs):
    """Arguments of describe_table."""

    table: str = Field(description="a table name from list_tables")


class AnswerArgs(ToolArgs):
    """Arguments of submit."""

    answer: str = Field(description="a number, a single name, or names separated by commas")


@dataclass
class SqlState(State):
    """The episode's database and the queries that ran."""

    db: Sandbox | None = field(default=None, compare=False, repr=False)
    queries: list[str] = field(default_factory=list)


class Sql(Bootcamp[SqlParams, SqlState]):
    """Answer a question about a shop's database by querying it with SQL.

    The database is SQLite and read-only. `list_tables` names the tables, `describe_table` shows a table's
    columns, and `query` runs one SELECT statement and shows at most 50 rows. When you know the
    answer, `submit` it: a number (plain digits, rounded as the question asks), a single name, or for
    "list the names" questions every name, separated by commas, in any order.

    Levels go from filters and counts over one table to aggregates over joins of up to four tables
    (customers, orders, order_items, products), with extra tables the question never needs. Reward is
    1 for the right number (within half a cent) or name (case-insensitive); for lists, the F1 of the names
    submitted against the right ones, so a partly right list earns partial credit. Reasons:
    `wrong_number`, `not_a_number`, `wrong_name`, `partial_list`, `wrong_list`.
    """

    name = "sql"
    version = "1"
    # SQL's own words, the aliases a query makes up (FROM orders o) and its LIMIT
    grounding = Exemptions(
        syntax={"query": SQL_WORDS},
        defines={
            "query": (
                re.compile(r"\b(?:FROM|JOIN)\s+\w+\s+(?:AS\s+)?(\w+)", re.I),
                re.compile(r"\bLIMIT\s+(\d+)", re.I),
            )
        },
    )
    params_model = SqlParams
    state_model = SqlState
    levels = {
        1: SqlParams(level=1, customers=10, products=8, orders=15, joins=0, aggregate=False),
        2: SqlParams(level=2, customers=16, products=12, orders=20, joins=0, aggregate=True),
        3: SqlParams(level=3, customers=20, products=15, orders=30, joins=1, aggregate=True, distractor_tables=1),
        4: SqlParams(level=4, customers=24, products=16, orders=36, joins=2, aggregate=False, distractor_tables=1),
        5: SqlParams(level=5, customers=30, products=20, orders=40, joins=3, aggregate=True, distractor_tables=2),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: SqlParams, rng: random.Random) -> dict[str, Any]:
        tables, question = generate_question(params, rng)
        return {"tables": tables, "question": question}

    def prompt(self, instance: Instance[SqlParams]) -> list[dict[str, Any]]:
        return self.chat(instance.data["question"]["text"])

    def new_state(self, instance: Instance[SqlParams]) -> SqlState:
        return SqlState(db=Sandbox(instance.data["tables"]))

    def max_turns(self, instance: Instance[SqlParams]) -> int:
        return 12

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def list_tables(self, instance: Instance, state: SqlState, args: NoArgs) -> Observation:
        """List the tables with their row counts."""
        tables = instance.data["tables"]
        return Observation("\n".join(f"{n} ({len(tables[n])} rows)" for n in sorted(tables)))

    @tool
    def describe_table(self, instance: Instance, state: SqlState, args: TableArgs) -> Observation:
        """Show a table's columns and types."""
        tables = instance.data["tables"]
        name = args.table.strip().lower()
        if name not in tables:
            shown = clip(args.table, 40)
            raise ToolError(f"unknown table {shown!r}; expected one of: {', '.join(sorted(tables))}")
        cols = ", ".join(f"{c} {t}" for c, t in SCHEMAS[name])
        return Observation(f"{name} ({len(tables[name])} rows): {cols}")

    @tool
    def query(self, instance: Instance, state: SqlState, args: QueryArgs) -> Observation:
        """Run one read-only SELECT statement and show up to 50 rows."""
        sql = args.sql.strip()
        if not sql:
            raise ToolError("empty query; expected one SELECT statement")
        if len(sql) > MAX_SQL_CHARS:
            raise ToolError(f"query is {len(sql)} characters long; expected at most {MAX_SQL_CHARS}")
        assert state.db is not None
        columns, rows, cut = state.db.run(sql)
        state.queries.append(sql)
        lines = [" | ".join(columns)] + [" | ".join(_cell(v) for v in row) for row in rows]
        tail = (
            f"(first {MAX_ROWS} rows shown; there are more: aggregate or add LIMIT)"
            if cut
            else f"({len(rows)} row{'s' if len(rows) != 1 else ''})"
        )
        return Observation("\n".join(lines + [tail]))

    @tool(final=True)
    def submit(self, instance: Instance, state: SqlState, args: AnswerArgs) -> Observation:
        """Submit the answer to the question. This ends the episode."""
        answer = args.answer.strip()
        if len(answer) > MAX_ANSWER_CHARS:
            raise ToolError(f"answer is {len(answer)} characters long; expected at most {MAX_ANSWER_CHARS}")
        state.answer = answer
        return Observation(f"Submitted {answer!r}.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: SqlState, transcript: Any) -> Score:
        q = instance.data["question"]
        expected, got = q["answer"], state.answer
        if got is None:
            return Score(0.0, False, {"reason": "no_answer", "expected": expected})
        details: dict[str, Any] = {"expected": expected, "submitted": got, "queries": len(state.queries)}
        if q["kind"] == "number":
            value = _number(got)
            if value is None:
                return Score(0.0, False, {**details, "reason": "not_a_number"})
            ok = abs(value - expected) <= NUMBER_TOLERANCE
            return Score(float(ok), ok, details if ok else {**details, "reason": "wrong_number"})
        if q["kind"] == "name":
            ok = _norm(got) == _norm(expected)
            return Score(float(ok), ok, details if ok else {**details, "reason": "wrong_name"})
        submitted = {_norm(x) for x in re.split(r"[,\n;]", got) if _norm(x)}
        right = {_norm(x) for x in expected}
        hits = len(submitted & right)
        if submitted == right:
            return Score(1.0, True, details)
        f1 = 2 * hits / (len(submitted) + len(right)) if hits else 0.0
        return Score(round(f1, 6), False, {**details, "reason": "partial_list" if hits else "wrong_list"})

    # -- oracle ----------------------------------------------------------------------------------

    def oracle(self, instance: Instance, state: SqlState) -> Action:
        q = instance.data["question"]
        if q["sql"] not in state.queries:
            return Action("query", {"sql": q["sql"]})
        return Action("submit", {"answer": _format_answer(q["answer"])})

    def demonstrate(self, instance: Instance, state: SqlState, transcript: Sequence[Mapping[str, Any]]) -> Action:
        """No table or column name is in the prompt: list the tables, describe every table listed,
        then run the oracle's query (it names only what those showed) and submit its rows as shown."""
        if not called(transcript, "list_tables"):
            return Action("list_tables", {})
        listing = next(r for n, _, r in exchanges(transcript) if n == "list_tables")
        for line in listing.splitlines():
            table = line.split(" (")[0].strip()
            if table and not called(transcript, "describe_table", table=table):
                return Action("describe_table", {"table": table})
        action = self.oracle(instance, state)
        if action.name == "submit":  # the answer as the query showed it (one column: its rows joined)
            shown = [r for n, a, r in exchanges(transcript) if n == "query" and not r.startswith("Error")][-1]
            action = Action("submit", {"answer": ", ".join(shown.splitlines()[1:-1])})
        return action

    def perturb(self, instance: Instance, state: SqlState, action: Action, rng: random.Random) -> Action:
        if action.name != "query":
            return action
        return Action("query", {"sql": instance.data["question"]["wrong_sql"]})

    def wrong_answer(self, instance: Instance, state: SqlState, rng: random.Random) -> Action:
        q = instance.data["question"]
        expected = q["answer"]
        if q["kind"] == "number":
            delta = rng.choice([1, 2, 3, 10]) * rng.choice([-1, 1])
            return Action("submit", {"answer": _format_answer(expected + delta)})
        others = [
            n
            for n in entity_names(instance.data["tables"], q)
            if n not in (expected if isinstance(expected, list) else [expected])
        ]
        if q["kind"] == "name":
            return Action("submit", {"answer": rng.choice(others)})
        return Action("submit", {"answer": ", ".join(rng.sample(others, min(2, len(others))))})


def _lone_surrogate(text: str) -> str | None:
    """``"a lone surrogate ('\\ud800') at position 7"`` if ``text`` cannot be UTF-8, else None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate ({text[exc.start]!r}) at position {exc.start}"
    return None


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = repr(round(value, 6))
    else:
        text = "NULL" if value is None else str(value)
    return clip(text, MAX_CELL_CHARS)


def _norm(text: str) -> str:
    return " ".join(text.strip().strip("'\".").lower().split())


def _number(text: str) -> float | None:
    cleaned = text.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _format_answer(answer: Any) -> str:
    if isinstance(answer, list):
        return ", ".join(answer)
    if isinstance(answer, float):
        return f"{answer:.2f}"
    return str(answer)
