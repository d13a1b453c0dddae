"""Bad input to the store and the CLI: one line naming what was refused, a non-zero exit, nothing written or lost.

Read-only SQL that is read-only for the host too; readers and the writer sharing the store; one-line
errors for bad configs, options, ids and function-calling rows; a dead endpoint; a stopped run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import duckdb
import pytest

from campflow import progress
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.config import load_config
from campflow.errors import StoreBusyError
from campflow.storage.names import check_cycle_id, check_run_id
from campflow.storage.query import run_sql
from campflow.storage.schema import VIEWS
from campflow.storage.store import Store
from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint
from tests.conftest import run_cli
from tests.test_store import _episodes

STORE = "campflow.duckdb"


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A workspace: a store with one recorded noisy run, a hard link to the store, another DuckDB file
    and an empty folder that the commands get as their TMPDIR."""
    ws = tmp_path_factory.mktemp("hardening")
    store = Store(ws / STORE)
    store.start_run("r1", "evaluate", {}, "noisy")
    store.write_episodes(_episodes("r1", n=6))
    store.finish_run("r1", "completed", {})
    os.link(ws / STORE, ws / "link.duckdb")
    with duckdb.connect(str(ws / "other.duckdb")) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
    (ws / "tmp").mkdir()
    return ws


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder``, files with a hash of their bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in sorted(folder.rglob("*"))
    }


def _cli(cwd: Path, *args: str, env: dict[str, str] | None = None):
    tmp = cwd / "tmp"
    tmp.mkdir(exist_ok=True)
    return run_cli(*args, cwd=cwd, env={"TMPDIR": str(tmp), **(env or {})})


def _assert_one_line_error(result, exit_code: int, fragment: str) -> None:
    assert result.returncode == exit_code, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr[-3000:]
    assert fragment in result.stderr, result.stderr


# -- campflow sql: one query, read-only for the store and the host ----------------------------------------

REFUSED_SQL = [
    ("COPY (SELECT 1) TO 'x.csv'", "(statement type COPY): campflow sql is read-only"),
    ("COPY (SELECT * FROM episodes) TO 'x.parquet' (FORMAT parquet)", "(statement type COPY)"),
    ("EXPORT DATABASE 'dump'", "(statement type EXPORT)"),
    ("ATTACH 'other.duckdb' AS o (READ_WRITE)", "(statement type ATTACH)"),
    ("ATTACH 'other.duckdb' AS o (READ_WRITE); INSERT INTO o.t VALUES (1)", "refused 2 statements (ATTACH, INSERT)"),
    ("ATTACH 'link.duckdb' AS s; CREATE TABLE s.x AS SELECT 1 AS a", "refused 2 statements (ATTACH, CREATE)"),
    ("ATTACH 'link.duckdb' AS s", "(statement type ATTACH)"),
    ("INSTALL httpfs", "refused `INSTALL httpfs` (statement type LOAD)"),
    ("LOAD httpfs", "(statement type LOAD)"),
    ("SELECT 1; COPY (SELECT 1) TO 'y.csv'; SELECT 2", "refused 3 statements (SELECT, COPY, SELECT)"),
    ("SET enable_external_access = true", "(statement type SET)"),
    ("RESET lock_configuration", "(statement type SET)"),
    ("PRAGMA enable_profiling", "(statement type PRAGMA)"),
    ("CALL pragma_version()", "(statement type CALL)"),
    ("CHECKPOINT", "(statement type CALL)"),
    ("VACUUM", "(statement type VACUUM)"),
    ("DROP TABLE episodes", "(statement type DROP): campflow sql is read-only"),
    ("UPDATE episodes SET reward = 1", "(statement type UPDATE)"),
    ("CREATE TABLE t AS SELECT 1", "(statement type CREATE)"),
    ("SELECT * FROM read_csv('/etc/hostname')", "refused: campflow sql has no file or network access"),
    ("SELECT * FROM read_text('link.duckdb')", "no file or network access"),
    ("SELECT * FROM glob('*')", "no file or network access"),
    ("SELECT * FROM 'other.duckdb'", "no file or network access"),
    ("EXPLAIN ANALYZE COPY (SELECT 1) TO 'z.csv'", "no file or network access"),
    ("EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1", "read-only"),
    ("", "refused: no SQL statement given"),
    ("/* only a comment */", "refused: no SQL statement given"),
    ("SELEC 1", "Parser Error"),
]


@pytest.mark.parametrize(("sql", "message"), REFUSED_SQL, ids=[s or "empty" for s, _ in REFUSED_SQL])
def test_sql_refuses_anything_but_one_query_and_writes_nothing_anywhere(filled, sql, message) -> None:
    before = _snapshot(filled)
    result = _cli(filled, "sql", sql, "--db", STORE)
    _assert_one_line_error(result, 2, message)
    assert _snapshot(filled) == before


ALLOWED_SQL = [
    ("SELECT count(*) AS n FROM episodes", "n\n12\n"),
    ("WITH e AS (SELECT * FROM episodes) SELECT count(DISTINCT bootcamp) AS b FROM e", "b\n2\n"),
    ("VALUES (1, 'a')", "col0,col1\n1,a\n"),
    ("FROM runs SELECT run_id, status", "run_id,status\nr1,completed\n"),
    ("SELECT bootcamp, episodes FROM pass_rates ORDER BY bootcamp", "bootcamp,episodes\ncalculator,6\nmaze,6\n"),
    ("PIVOT (SELECT bootcamp FROM episodes) ON bootcamp IN ('maze') USING count(*)", "maze\n6\n"),
    ("SELECT 1 AS one;", "one\n1\n"),
]


@pytest.mark.parametrize(("sql", "output"), ALLOWED_SQL)
def test_sql_answers_queries_and_views_on_the_locked_connection(filled, sql, output) -> None:
    before = _snapshot(filled)
    result = _cli(filled, "sql", sql, "--db", STORE, "-f", "csv")
    assert result.returncode == 0 and result.stdout == output, result.stderr
    assert _snapshot(filled) == before


@pytest.mark.parametrize(
    "sql",
    [
        "SHOW TABLES",
        "DESCRIBE episodes",
        "SUMMARIZE runs",
        "EXPLAIN SELECT 1",
        *[f"SELECT * FROM {view}" for view in VIEWS],
    ],
)
def test_every_view_and_inspection_statement_reads_through_the_locked_connection(filled, sql) -> None:
    result = run_sql(filled / STORE, sql)
    assert result.columns


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sql", "SELECT 1", "--limit", "-1"], "--limit -1: expected 0 (all rows) or a positive number of rows"),
        (["runs", "--limit", "0"], "--limit 0: expected a positive number of runs"),
    ],
)
def test_a_negative_limit_is_one_line_not_a_driver_error(filled, args, message) -> None:
    before = _snapshot(filled)
    _assert_one_line_error(_cli(filled, *args, "--db", STORE), 2, message)
    assert _snapshot(filled) == before


# -- configs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ("folder", {}, "config file folder is a directory; expected a YAML file"),
        ("latin1.yaml", {}, "latin1.yaml: not UTF-8 text (byte 20: b'\\xe9')"),
        (None, {"CAMPFLOW__ROLLOUT__CONCURRENCY": "[1,"}, "$CAMPFLOW__ROLLOUT__CONCURRENCY = '[1,': not valid YAML"),
        (None, {"CAMPFLOW__EVAL__BOOTCAMPS": "{a: [b"}, "$CAMPFLOW__EVAL__BOOTCAMPS = '{a: [b': not valid YAML"),
    ],
)
def test_a_config_that_cannot_be_read_is_one_line(filled, config, env, message) -> None:
    (filled / "folder").mkdir(exist_ok=True)
    (filled / "latin1.yaml").write_bytes(b"policy:\n  model: caf\xe9\n")
    before = _snapshot(filled)
    args = ["--config", config] if config else []
    _assert_one_line_error(_cli(filled, "sql", "SELECT 1", "--db", STORE, *args, env=env), 2, message)
    assert _snapshot(filled) == before


# -- bootcamp lists and ids ------------------------------------------------------------------------------------

ID_RULE = "expected 1 to 128 characters, letters, digits and . _ : - (starting with a letter or digit)"
BAD_OPTIONS = [
    (["eval", "--bootcamps", ""], "--bootcamps '' names no bootcamp"),
    (["eval", "--bootcamps", " , "], "--bootcamps ' , ' names no bootcamp"),
    (["collect", "--bootcamps", ""], "--bootcamps '' names no bootcamp"),
    (["eval", "--run-id", ""], f"run id '': {ID_RULE}"),
    (["eval", "--run-id", "it's"], f'run id "it\'s": {ID_RULE}'),
    (["eval", "--run-id", 'say "hi"'], "run id 'say \"hi\"'"),
    (["eval", "--run-id", "two\nlines"], "run id 'two\\nlines'"),
    (["eval", "--run-id", "\x1b[31mred"], "run id '\\x1b[31mred'"),
    (["eval", "--run-id", "tab\there"], "run id 'tab\\there'"),
    (["eval", "--run-id", "r" * 129], f"run id '{'r' * 57}'...: {ID_RULE}"),
    (["eval", "--run-id", "../../elsewhere"], "run id '../../elsewhere'"),
    (["collect", "--run-id", "a;b"], f"run id 'a;b': {ID_RULE}"),
    (["improve", "--cycle-id", ""], "cycle id '': expected 1 to 100 characters"),
    (["improve", "--cycle-id", ".."], "cycle id '..'"),
    (["improve", "--cycle-id", "c" * 101], "expected 1 to 100 characters"),
]


@pytest.mark.parametrize(("args", "message"), BAD_OPTIONS, ids=[" ".join(map(ascii, a)) for a, _ in BAD_OPTIONS])
def test_bad_bootcamp_lists_and_ids_are_refused_before_anything_runs(tmp_path, args, message) -> None:
    result = _cli(tmp_path, *args, "-n", "1") if args[0] == "eval" else _cli(tmp_path, *args)
    _assert_one_line_error(result, 2, message)
    assert _snapshot(tmp_path) == {"tmp": "folder"}  # no store, no workspace, no temporary file


def test_every_id_campflow_generates_is_a_valid_id() -> None:
    from campflow.flows.evaluate import new_run_id
    from campflow.storage.cycles import new_cycle_id
    from campflow.synthesis.pipeline import new_synthesis_run_id

    for run_id in (new_run_id("eval"), new_run_id("collect"), new_run_id("evaluate_variants"), new_synthesis_run_id()):
        assert check_run_id(run_id) == run_id
    longest = check_cycle_id("c" * 100)
    for suffix in ("before", "after", "collect", "variants"):  # the run ids a cycle derives
        check_run_id(f"{new_cycle_id()}-{suffix}")
        check_run_id(f"{longest}-{suffix}")


# -- function-calling rows -------------------------------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "doc": {"type": "object"}},
            "required": ["city"],
        },
    },
}
GOOD = {
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [WEATHER],
    "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
}


def _row(**changes) -> bytes:
    row = json.loads(json.dumps(GOOD))
    for dotted, value in changes.items():
        node, *path, last = [row, *dotted.split("__")]
        for part in path:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return json.dumps(row).encode()


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


BAD_ROWS = [
    (
        "properties-a-list",
        _row(tools__0__function__parameters__properties=["city"]),
        "line 2: tool 'get_weather' has 'properties' that are a list",
    ),
    (
        "required-a-string",
        _row(tools__0__function__parameters__required="city"),
        "line 2: tool 'get_weather' has 'required' that is not a list of parameter names",
    ),
    ("not-utf8", b'{"messages": [{"role": "user", "content": "caf\xe9"}]}', "line 2: not UTF-8 text (byte b'\\xe9')"),
    (
        "5000-digit-integer",
        _row(order_sensitive=0)[:-1] + b', "n": ' + b"7" * 5000 + b"}",
        "line 2: not valid JSON (Exceeds the limit (4300 digits) for integer string conversion",
    ),
    (
        "5000-digit-integer-in-json-text",
        _row(expected_calls__0__arguments='{"city": ' + "7" * 5000 + "}"),
        "line 2: field 'arguments' is text but not JSON (Exceeds the limit (4300 digits)",
    ),
    ("100k-deep", b"[" * 100_000 + b"]" * 100_000, "line 2: not valid JSON (nested too deeply)"),
    (
        "100k-deep-in-json-text",
        _row(expected_calls__0__arguments="[" * 100_000 + "]" * 100_000),
        "line 2: field 'arguments' is text but not JSON (nested too deeply)",
    ),
    (
        "300-deep-arguments",
        _row(expected_calls__0__arguments={"city": "Paris", "doc": _nested(300)}),
        "line 2: nested more than 64 levels deep",
    ),
]


@pytest.mark.parametrize(("name", "line", "message"), BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_function_calling_rows_that_cannot_be_read_are_one_line_naming_the_line(filled, name, line, message) -> None:
    source = filled / "tmp" / f"{name}.jsonl"
    source.write_bytes(json.dumps(GOOD).encode() + b"\n" + line + b"\n")
    before = _snapshot(filled)
    result = _cli(filled, "import", "function-calling", str(source), "--db", STORE)
    _assert_one_line_error(result, 2, message)
    assert _snapshot(filled) == before
    assert run_sql(filled / STORE, "SELECT count(*) FROM imported_bootcamps").rows == [(0,)]


# -- endpoints -------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dead_endpoint_is_cannot_reach_and_a_run_of_only_infra_errors_exits_non_zero(tmp_path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    result = _cli(
        tmp_path,
        "eval",
        "--policy",
        "openai",
        "--base-url",
        url,
        "--model",
        "m",
        "-n",
        "2",
        "--bootcamps",
        "calculator",
        "--run-id",
        "dead",
    )
    _assert_one_line_error(result, 1, "every episode of run dead (2) ended as infra_error, so nothing was measured")
    assert f"cannot reach endpoint {url} (model m): connection refused" in result.stderr
    errors = run_sql(tmp_path / "campflow-data" / STORE, "SELECT termination, error FROM episodes").rows
    assert len(errors) == 2 and {t for t, _ in errors} == {"infra_error"}
    assert all(e.startswith(f"cannot reach endpoint {url}") and "attempt" not in e for _, e in errors)


# -- readers and the writer --------------------------------------------------------------------------------------

READER = textwrap.dedent("""
    import select, sys
    from pathlib import Path
    from campflow.storage.store import connect
    con = connect(Path(sys.argv[1]), read_only=True, wait_s=60)
    print(con.execute("SELECT count(*) FROM episodes").fetchone()[0], flush=True)
    select.select([sys.stdin], [], [], 120)  # hold the file until told to let go (or two minutes)
    con.close()
""")


class ReaderAtRequest:
    """Answers like the oracle; at request ``at`` starts a reader process that opens the store and holds
    it until :meth:`let_go` (the request waits until the reader has the file)."""

    def __init__(self, script: OracleScript, db: Path, at: int) -> None:
        self.script, self.db, self.at = script, db, at
        self.requests, self.lock = 0, threading.Lock()
        self.reader: subprocess.Popen | None = None
        self.saw: int | None = None  # episodes stored when the reader opened the file

    def __call__(self, request: dict) -> dict:
        with self.lock:
            self.requests += 1
            if self.requests == self.at:
                self.reader = subprocess.Popen(
                    [sys.executable, "-c", READER, str(self.db)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                self.saw = int(self.reader.stdout.readline())
        return self.script(request)

    def let_go(self) -> None:
        if self.reader is not None and self.reader.poll() is None:
            self.reader.stdin.write("\n")
            self.reader.stdin.flush()
            self.reader.wait(30)


class LetGoOnNote(progress.Reporter):
    """Records notes; lets the reader go when a note contains ``marker``."""

    def __init__(self, script: ReaderAtRequest, marker: str) -> None:
        self.script, self.marker, self.notes = script, marker, []

    def note(self, message: str) -> None:
        self.notes.append(message)
        if self.marker in message:
            self.script.let_go()


def _eval_config(workspace: Path, url: str, **extra):
    return load_config(
        None,
        {
            "workspace.path": str(workspace),
            "policy.kind": "openai",
            "policy.model": "scripted",
            "policy.base_url": url,
            "eval.bootcamps": ["calculator", "maze"],
            "eval.n": 10,
            "rollout.concurrency": 4,
            "rollout.workers": 1,
            "rollout.shard_size": 2,
            **extra,
        },
        env={},
    )


def _oracle(n: int = 10) -> OracleScript:
    return OracleScript([i for b in ("calculator", "maze") for i in eval_instances(registry.make(b), n)])


@pytest.mark.usefixtures("prefect_harness")
def test_a_reader_holding_the_store_mid_evaluation_makes_the_writer_wait_and_nothing_is_lost(workspace) -> None:
    from campflow.flows.evaluate import evaluate

    db = workspace / STORE
    script = ReaderAtRequest(_oracle(), db, at=8)
    reporter = LetGoOnNote(script, "a reader holds the file")
    with ScriptedEndpoint(script) as server, progress.use(reporter):
        summary = evaluate(_eval_config(workspace, server.url), run_id="shared")
    script.let_go()
    assert script.saw is not None and script.saw < 20  # the reader held the file in mid-evaluation
    waits = [n for n in reporter.notes if n.startswith("waiting to write the store")]
    assert waits and f"a reader holds the file (PID {script.reader.pid}," in waits[0]
    assert summary.ran == 20 and summary.terminations == {"solved": 20}
    store = Store(db)
    assert store.scalar("SELECT count(DISTINCT (instance_id, sample_index)) FROM episodes") == 20
    assert store.scalar("SELECT count(*) FROM episodes") == 20
    assert store.scalar("SELECT status FROM runs WHERE run_id = 'shared'") == "completed"


@pytest.mark.usefixtures("prefect_harness")
def test_a_write_that_gives_up_marks_the_run_failed_and_a_rerun_completes_only_what_is_missing(workspace) -> None:
    from campflow.flows.evaluate import evaluate

    db = workspace / STORE
    script = ReaderAtRequest(_oracle(), db, at=8)
    reporter = LetGoOnNote(script, "run held failed")  # the reader lets go once the writer has given up
    with ScriptedEndpoint(script) as server, progress.use(reporter):
        cfg = _eval_config(workspace, server.url, **{"workspace.lock_wait_s": 3})
        with pytest.raises(StoreBusyError) as info:
            evaluate(cfg, run_id="held")
    script.let_go()
    message = str(info.value)
    assert f"a reader holds the file (PID {script.reader.pid}," in message and "gave up writing after 3s" in message
    assert "run held is marked failed" in message and "completes only what is missing" in message
    store = Store(db)
    status, summary = store.query("SELECT status, summary FROM runs WHERE run_id = 'held'")[0].values()
    assert status == "failed" and "a reader holds the file" in json.loads(summary)["error"]
    kept = store.scalar("SELECT count(*) FROM episodes WHERE run_id = 'held'")
    assert kept < 20

    with ScriptedEndpoint(_oracle()) as server:
        cfg.policy.base_url = server.url
        rerun = evaluate(cfg, run_id="held")
    assert (rerun.ran, rerun.skipped) == (20 - kept, kept)
    assert store.scalar("SELECT count(*) FROM episodes WHERE run_id = 'held'") == 20
    assert store.scalar("SELECT count(DISTINCT (instance_id, sample_index)) FROM episodes") == 20
    assert store.scalar("SELECT status FROM runs WHERE run_id = 'held'") == "completed"


# -- stopping --------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_mid_evaluation_says_where_it_stopped_and_the_rerun_completes_it(tmp_path) -> None:
    db = tmp_path / "campflow-data" / STORE
    args = [
        "eval",
        "--policy",
        "openai",
        "--model",
        "scripted",
        "--bootcamps",
        "calculator,maze",
        "-n",
        "10",
        "--concurrency",
        "2",
        "--run-id",
        "stopped",
    ]
    # the session's Prefect API (tests/conftest.py): tests/test_stopping.py's evaluation chain stops commands
    # that start their own; here the line and the rerun are the point, and an own server cost ~15 s
    env = {**os.environ, "COLUMNS": "200", "CAMPFLOW__ROLLOUT__SHARD_SIZE": "2", "CAMPFLOW__ROLLOUT__WORKERS": "1"}
    exe = str(Path(sys.executable).parent / "campflow")
    # slow enough that the interrupt lands mid-evaluation even on a loaded machine (20 episodes take ~1 min)
    with ScriptedEndpoint(_oracle(), latency=0.6) as server:
        # its own process group, as a terminal's foreground job: Ctrl-C reaches every process it started
        proc = subprocess.Popen(
            [exe, *args, "--base-url", server.url],
            cwd=tmp_path,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            while proc.poll() is None and not (
                db.exists() and run_sql(db, "SELECT count(*) FROM episodes", wait_s=30).rows[0][0]
            ):
                threading.Event().wait(0.2)
            os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        stored = run_sql(db, "SELECT count(*) FROM episodes").rows[0][0]
        assert 0 < stored < 20
        assert proc.returncode == 130 and "Traceback" not in out + err, err[-3000:]
        assert err.splitlines() == [
            f"error: stopped by SIGINT: run stopped stopped with {stored} episode(s) stored; rerun the same "
            "`campflow eval` with --run-id stopped to complete only what is missing"
        ], err[-3000:]
        assert run_sql(db, "SELECT status, summary FROM runs").rows == [("failed", '{"error":"stopped by SIGINT"}')]

        server.latency = 0.05  # the rerun only completes what is missing: no signal to time, no need to wait
        rerun = run_cli(
            *args,
            "--base-url",
            server.url,
            cwd=tmp_path,
            env={"CAMPFLOW__ROLLOUT__SHARD_SIZE": "2", "CAMPFLOW__ROLLOUT__WORKERS": "1"},
        )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"ran {20 - stored} episode(s), kept {stored} from before" in " ".join(rerun.stdout.split())
    assert run_sql(db, "SELECT count(*), count(DISTINCT (instance_id, sample_index)) FROM episodes").rows == [(20, 20)]
    assert run_sql(db, "SELECT status FROM runs").rows == [("completed",)]
