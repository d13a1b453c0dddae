"""The DuckDB store: schema, idempotent batch writes, views, read-only queries and the writer's lock."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from campflow.agents.oracle import NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.errors import QueryError, StoreBusyError, StoreError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.query import run_sql
from campflow.storage.schema import MIGRATIONS, SCHEMA_VERSION, VIEWS
from campflow.storage.store import Store


def _episodes(run_id: str = "r1", n: int = 30, seed: int = 1):
    specs = [
        EpisodeSpec(registry.make(b), i) for b in ("calculator", "maze") for i in eval_instances(registry.make(b), n)
    ]
    policy = NoisyOraclePolicy(p_wrong_move=0.2, p_malformed=0.2, p_wrong_answer=0.3, seed=seed)
    return asyncio.run(run_episodes(specs, policy, run_id=run_id))


def test_a_new_store_has_every_table_and_view_at_the_current_schema_version(store) -> None:
    tables = {r["table_name"] for r in store.query("SELECT table_name FROM information_schema.tables")}
    assert {
        "runs",
        "instances",
        "episodes",
        "failures",
        "clusters",
        "variants",
        "datasets",
        "checkpoints",
        "schema_version",
    } <= tables
    assert set(VIEWS) <= tables
    assert store.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION == MIGRATIONS[-1][0]


def test_reopening_a_store_applies_no_migration_twice(workspace) -> None:
    Store(workspace / "c.duckdb")
    s = Store(workspace / "c.duckdb")
    assert s.scalar("SELECT count(*) FROM schema_version") == len(MIGRATIONS)


def test_a_store_from_a_newer_campflow_is_refused(workspace) -> None:
    s = Store(workspace / "c.duckdb")
    with s.connection() as con:
        con.execute("INSERT INTO schema_version (version, description) VALUES (999, 'future')")
    with pytest.raises(StoreError, match="newer than this campflow"):
        Store(workspace / "c.duckdb")


def test_writing_the_same_episodes_twice_keeps_one_row_each(store) -> None:
    episodes = _episodes()
    store.write_episodes(episodes)
    store.write_episodes(episodes[:17])
    assert store.scalar("SELECT count(*) FROM episodes") == len(episodes)
    assert store.scalar("SELECT count(DISTINCT episode_id) FROM episodes") == len(episodes)


def test_a_rewrite_replaces_the_row_of_the_same_run_instance_and_sample(store) -> None:
    e = _episodes(n=1)[0]
    store.write_episodes([e])
    e.reward, e.termination = 0.0, "infra_error"
    store.write_episodes([e])
    row = store.query("SELECT reward, termination FROM episodes")
    assert row == [{"reward": 0.0, "termination": "infra_error"}]


def test_a_key_twice_in_one_batch_is_stored_once_the_last_one(store) -> None:
    first, second = _episodes(n=1)[0], _episodes(n=1, seed=2)[0]
    second.reward = 0.25
    assert (first.run_id, first.instance_id, first.sample) == (second.run_id, second.instance_id, second.sample)
    assert store.write_episodes([first, second]) == 1
    assert store.query("SELECT episode_id, reward FROM episodes") == [{"episode_id": first.id, "reward": 0.25}]


def test_a_rewrite_that_fails_leaves_the_stored_episode_as_it_was(store) -> None:
    e = _episodes(n=1)[0]
    store.write_episodes([e])
    before = store.query("SELECT * FROM episodes")
    e.reward, e.model_id = 0.5, None  # NOT NULL: the insert fails after the delete of the old row
    with pytest.raises(duckdb.ConstraintException):
        store.write_episodes([e])
    assert store.query("SELECT * FROM episodes") == before and len(before) == 1


def test_a_store_of_schema_2_migrates_its_episodes_and_upserts_them_after(workspace) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    path = workspace / "v2.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description VARCHAR, "
        "applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    for version, description, statements in MIGRATIONS[:2]:
        for stmt in statements:
            con.execute(stmt)
        con.execute("INSERT INTO schema_version (version, description) VALUES (?, ?)", [version, description])
    con.close()
    old = Store.__new__(Store)  # write through today's code path into the old table, before migrating
    old.path, old.lock_wait_s = path, 1.0
    episodes = _episodes(n=5)
    old.write_episodes(episodes)
    store = Store(path)
    assert store.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION
    assert (
        store.scalar(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'episodes' "
            "AND constraint_type = 'PRIMARY KEY'"
        )
        == 0
    )
    assert store.scalar("SELECT count(DISTINCT episode_id) FROM episodes") == len(episodes)
    store.write_episodes(episodes)
    assert store.scalar("SELECT count(*) FROM episodes") == len(episodes)
    assert store.scalar("SELECT count(*) FROM pass_rates") == 2


def test_views_answer_pass_rates_and_model_failures_only(store) -> None:
    episodes = _episodes()
    episodes[0].termination, episodes[0].success = "infra_error", False
    store.write_episodes(episodes)
    rates = {r["bootcamp"]: r for r in store.query("SELECT * FROM pass_rates")}
    assert set(rates) == {"calculator", "maze"}
    for b, r in rates.items():
        mine = [e for e in episodes if e.bootcamp == b]
        counted = [e for e in mine if e.termination not in ("infra_error", "timeout")]
        assert r["episodes"] == len(mine)
        assert r["pass_rate"] == pytest.approx(sum(e.success for e in counted) / len(counted), abs=1e-4)
    summary = store.query("SELECT termination, sum(episodes) AS n FROM failure_summary GROUP BY termination")
    assert "infra_error" not in {r["termination"] for r in summary}
    expected = sum(1 for e in episodes if str(e.termination) not in ("solved", "infra_error", "timeout"))
    assert sum(r["n"] for r in summary) == expected > 0


def test_sql_on_the_read_only_connection_cannot_change_anything(store) -> None:
    store.write_episodes(_episodes(n=5))
    with pytest.raises(QueryError, match="read-only"):
        run_sql(store.path, "DROP TABLE episodes")
    with pytest.raises(QueryError, match="read-only"):
        run_sql(store.path, "UPDATE episodes SET reward = 1")
    assert run_sql(store.path, "SELECT count(*) FROM episodes").rows == [(10,)]


def test_a_sql_typo_gives_duckdbs_message_on_one_line(store) -> None:
    with pytest.raises(QueryError) as info:
        run_sql(store.path, "SELEC * FROM episodes")
    assert "\n" not in str(info.value) and "syntax error" in str(info.value)
    with pytest.raises(QueryError, match="episodez"):
        run_sql(store.path, "SELECT * FROM episodez")


def test_readers_wait_for_a_writer_and_then_say_plainly_that_a_write_is_in_progress(store) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(store.path)!r})
        print("locked", flush=True)
        time.sleep(float(sys.argv[1]))
        """),
            "1.5",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        assert run_sql(store.path, "SELECT 1", wait_s=20).rows == [(1,)]  # waited for the holder to let go
        assert time.monotonic() - t0 > 0.3
    finally:
        holder.wait(10)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import duckdb, time
        con = duckdb.connect({str(store.path)!r})
        print("locked", flush=True)
        time.sleep(30)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreBusyError, match="a write is in progress"):
            run_sql(store.path, "SELECT 1", wait_s=0.5)
    finally:
        holder.kill()
        holder.wait()


def test_the_store_holds_no_lock_between_batches(store) -> None:
    store.write_episodes(_episodes(n=2))
    con = duckdb.connect(str(store.path), read_only=True)  # would fail if the writer still held the file
    con.close()


def test_a_run_resumes_only_with_the_model_it_was_recorded_for(store) -> None:
    assert store.start_run("measure", "calibrate", {}, "rl-aaa") is True
    assert store.start_run("measure", "calibrate", {}, "rl-aaa") is False  # the same model resumes
    with pytest.raises(StoreError, match="recorded for model rl-aaa, not rl-bbb: resuming it would mix"):
        store.start_run("measure", "calibrate", {}, "rl-bbb")
    with pytest.raises(StoreError, match="already belongs to a calibrate run, not evaluate"):
        store.start_run("measure", "evaluate", {}, "rl-aaa")


def test_instances_record_their_split_and_are_written_once(store) -> None:
    calc = registry.make("calculator")
    instances = eval_instances(calc, 12)
    store.write_instances(instances, split="eval")
    store.write_instances(instances, split="eval")
    assert store.eval_ids("calculator") == {i.id for i in instances}
    with pytest.raises(ValueError, match="split = 'test'"):
        store.write_instances(instances, split="test")
