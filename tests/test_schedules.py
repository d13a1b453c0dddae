"""Schedules against a real Prefect server on 127.0.0.1, and rollouts fanned out through Ray."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.loop_config import write_tiny_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prefect_server(tmp_path):
    """`prefect server start` on 127.0.0.1 with a fast scheduler loop; yields its API URL."""
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
    }
    prefect = Path(sys.executable).parent / "prefect"
    server = subprocess.Popen(
        [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/api"
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("prefect server did not start within 120 s")
    yield url
    os.killpg(server.pid, 9)
    server.wait()


def test_campflow_serve_runs_watch_on_its_interval(prefect_server, tmp_path) -> None:
    config = write_tiny_config(tmp_path / "ws", watch__threshold=1000, watch__interval_seconds=3)
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_server,
        "PREFECT_RUNNER_POLL_FREQUENCY": "2",
        "PREFECT_HOME": str(tmp_path / "client-home"),
    }
    exe = Path(sys.executable).parent / "campflow"
    serve = subprocess.Popen(
        [str(exe), "serve", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    import httpx

    try:
        deadline = time.monotonic() + 180
        completed = []
        while time.monotonic() < deadline and not completed:
            time.sleep(2)
            runs = httpx.post(
                f"{prefect_server}/flow_runs/filter",
                json={"flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}},
                timeout=10,
            ).json()
            deployments = {
                d["id"]: d["name"]
                for d in httpx.post(f"{prefect_server}/deployments/filter", json={}, timeout=10).json()
            }
            completed = [r for r in runs if deployments.get(r.get("deployment_id")) == "campflow-watch"]
            assert serve.poll() is None, serve.stdout.read()[-3000:]
        assert completed, "no scheduled watch run completed within 180 s"
        assert completed[0]["auto_scheduled"] is True
        assert set(deployments.values()) == {"campflow-improve", "campflow-watch"}
    finally:
        os.killpg(serve.pid, 9)
        serve.wait()
    db = tmp_path / "ws" / "campflow.duckdb"
    from campflow.storage.query import run_sql

    rows = run_sql(db, "SELECT new_failures, threshold, started_cycle_id FROM watch_decisions").rows
    assert rows and rows[0] == (0, 1000, None)


def test_serve_without_a_server_says_how_to_start_one(tmp_path) -> None:
    from tests.conftest import run_cli

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "campflow"), "serve"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 2 and "prefect server start" in out.stderr
    del run_cli


@pytest.mark.usefixtures("prefect_harness")
def test_ray_and_threads_record_the_same_episodes(tmp_path) -> None:
    from campflow.config import load_config
    from campflow.flows.evaluate import evaluate
    from campflow.storage.query import run_sql

    rows = {}
    for runner in ("threads", "ray"):
        ws = tmp_path / runner
        cfg = load_config(
            None,
            {
                "workspace.path": str(ws),
                "policy.kind": "noisy",
                "eval.n": 12,
                "eval.bootcamps": ["calculator", "maze"],
                "rollout.task_runner": runner,
                "rollout.workers": 2,
                "rollout.shard_size": 6,
            },
            env={},
        )
        evaluate(cfg, run_id="same-run")
        rows[runner] = run_sql(
            cfg.workspace.db_path,
            "SELECT episode_id, instance_id, sample_index, reward, "
            "termination, turns FROM episodes ORDER BY episode_id",
        ).rows
    assert len(rows["threads"]) == 24
    assert rows["ray"] == rows["threads"]
