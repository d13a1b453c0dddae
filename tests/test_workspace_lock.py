"""The workspace lock: one cycle at a time per workspace, a refusal naming the holder, a dead holder's
lock taken over. The holder is a second process that takes the lock and waits, not a whole cycle."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from campflow.storage.lock import WorkspaceBusyError, WorkspaceLock, current_holder, lock_file, record_file
from tests.conftest import REPO, run_cli
from tests.loop_config import write_tiny_config

HOLD = """
import sys, time
from campflow.storage.lock import WorkspaceLock
lock = WorkspaceLock(sys.argv[1], sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def _holder(db: Path, cycle_id: str) -> subprocess.Popen:
    """A process that takes ``db``'s lock for cycle ``cycle_id`` and keeps it until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), cycle_id],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def held(tmp_path):
    """A tiny workspace's config and a second process holding its lock as cycle ``cycle-held-1``."""
    config = write_tiny_config(tmp_path / "ws", watch__threshold=1)
    db = tmp_path / "ws" / "campflow.duckdb"
    proc = _holder(db, "cycle-held-1")
    yield config, db, proc
    proc.kill()
    proc.wait()


def test_a_second_improve_on_a_held_workspace_is_refused_in_one_line_naming_the_holder(held) -> None:
    config, db, proc = held
    for extra in ([], ["--resume"]):
        result = run_cli("improve", "--config", str(config), *extra, timeout=120)
        assert result.returncode == 3, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        line = lines[0]
        assert line.startswith("error: cycle cycle-held-1 has held this workspace since ")
        assert f"(pid {proc.pid} on host {socket.gethostname()})" in line
        assert "`campflow improve --resume` continues it" in line
    assert not db.exists(), "a refused improve wrote nothing"
    assert proc.poll() is None and current_holder(db).pid == proc.pid


def test_watch_starts_no_cycle_while_another_process_holds_the_workspace(held) -> None:
    config, db, proc = held
    result = run_cli("watch", "--config", str(config), timeout=180)
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "no cycle started" in out and "cycle cycle-held-1 has held this workspace" in out, out
    from campflow.storage.query import run_sql

    assert run_sql(db, "SELECT count(*) FROM cycles").rows == [(0,)]
    assert run_sql(db, "SELECT started_cycle_id FROM watch_decisions").rows == [(None,)]


def test_a_dead_holders_lock_is_taken_over_and_said(tmp_path) -> None:
    db = tmp_path / "ws" / "campflow.duckdb"
    proc = _holder(db, "cycle-killed-1")
    with pytest.raises(WorkspaceBusyError):
        WorkspaceLock(db).acquire()
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: the record stays, the kernel drops the lock
    proc.wait()
    assert json.loads(record_file(db).read_text())["pid"] == proc.pid
    assert current_holder(db) is None
    with WorkspaceLock(db, "cycle-next") as lock:
        assert lock.taken_over is not None and lock.taken_over.pid == proc.pid
        assert lock.taken_over.cycle_id == "cycle-killed-1"
        assert "cycle cycle-killed-1 (pid" in lock.taken_over.describe()
        assert current_holder(db).cycle_id == "cycle-next" and current_holder(db).pid == os.getpid()
    assert not record_file(db).exists() and lock_file(db).exists()
    assert current_holder(db) is None


def test_the_lock_is_reentrant_in_one_process_and_names_the_cycle_once_known(tmp_path) -> None:
    db = tmp_path / "campflow.duckdb"
    with WorkspaceLock(db) as outer:
        assert current_holder(db).cycle_id is None
        with WorkspaceLock(db, "cycle-a"):  # the CLI holds it; the flow takes it again
            assert current_holder(db).cycle_id == "cycle-a"
        outer.name("cycle-b")
        assert json.loads(record_file(db).read_text())["cycle_id"] == "cycle-b"
        assert current_holder(db).pid == os.getpid()  # still held after the inner release
    assert current_holder(db) is None


def test_a_flow_run_is_named_after_its_cycle_once_the_cycle_is_known(prefect_harness, tmp_path) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.runtime import flow_run

    from campflow.flows.improve import hold_for_cycle, improve_run_name

    db = tmp_path / "campflow.duckdb"

    @flow(flow_run_name=improve_run_name)
    def resumed(cycle_id: str | None = None, resume: bool = False) -> str:
        first = flow_run.name
        with WorkspaceLock(db) as lock:  # as improve does: the cycle a resume continues is read, then named
            hold_for_cycle(lock, "cycle-resumed-1")
            assert current_holder(db).cycle_id == "cycle-resumed-1"
        return first

    assert resumed(resume=True) == "improve-resume"
    with get_client(sync_client=True) as client:
        # by name: a plain listing holds only the first 200 of the session's runs
        named = FlowRunFilter(name=FlowRunFilterName(any_=["cycle-resumed-1"]))
        assert [r.name for r in client.read_flow_runs(flow_run_filter=named)] == ["cycle-resumed-1"]
