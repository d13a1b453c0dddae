"""Rollouts across a Ray cluster of several nodes on this machine, and what happens when nodes are lost.

The cluster is a head and three worker nodes, each its own ``ray start`` with its own temp dir and
resources (campflow.testing.ray_cluster), started once for the file; ``campflow eval`` connects to it
with ``rollout.ray_address`` in a process of its own, as a team runs it. Killing a node is SIGKILL of its
raylet, its workers and its agents, at a seeded moment while it runs a shard.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

from campflow.testing.ray_cluster import LocalRayCluster
from tests.conftest import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a loaded 2-core machine starts 4 nodes slowly

BOOTCAMPS = "calculator,maze"
N = 4  # eval instances per bootcamp: 8 episodes, 4 shards of 2


@pytest.fixture(scope="module")
def cluster():
    """A head and three worker nodes, one CPU (one rollout task at a time) each; killed at the end. Each
    seeded kill takes a worker of its own, so no node is started again between them."""
    root = Path(tempfile.mkdtemp(prefix="cf-ray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    ray_cluster = LocalRayCluster(root)
    try:
        started = time.monotonic()
        ray_cluster.start(workers=3, cpus=1)
        if time.monotonic() - started > 120:  # idle, it takes 30-45 s: say in CI's output what took the time
            warnings.warn("the Ray cluster started slowly: " + "; ".join(ray_cluster.timeline), stacklevel=1)
        yield ray_cluster
    finally:
        ray_cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def endpoint():
    """A scripted OpenAI-compatible endpoint that answers like the oracle after 0.3 s, in its own process."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "campflow.testing.scripted_server",
            "--bootcamps",
            BOOTCAMPS,
            "--n",
            str(N),
            "--latency",
            "0.3",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield server.stdout.readline().strip()
    finally:
        server.kill()
        server.wait()


def _eval(cluster: LocalRayCluster | None, ws: Path, run_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"CAMPFLOW__ROLLOUT__SHARD_SIZE": "2", "CAMPFLOW__ROLLOUT__CONCURRENCY": "1"}
    if cluster is not None:
        env |= {
            **cluster.env,
            "CAMPFLOW__ROLLOUT__TASK_RUNNER": "ray",
            "CAMPFLOW__ROLLOUT__RAY_ADDRESS": cluster.address,
        }
    return run_cli(
        "eval", "-b", BOOTCAMPS, "-n", str(N), "-w", str(ws), "--run-id", run_id, *args, env=env, timeout=600
    )


def _rows(ws: Path) -> list[tuple]:
    from campflow.storage.query import run_sql

    return run_sql(
        ws / "campflow.duckdb",
        "SELECT episode_id, instance_id, sample_index, reward, termination, turns FROM episodes ORDER BY episode_id",
    ).rows


def _nodes_that_ran_shards(cluster: LocalRayCluster) -> set[str]:
    """The nodes whose Ray workers ran a rollout-shard task (Ray marks each task in its worker's log)."""
    ran = set()
    for node in cluster.nodes:
        for log in (cluster.root / node).glob("session_*/logs/worker-*"):
            if ":task_name:rollout-shard" in log.read_text(errors="replace"):
                ran.add(node)
    return ran


def _kill_when_running_a_shard(cluster: LocalRayCluster, node: str, delay: float, killed: list[int]) -> None:
    """Wait until ``node`` runs a rollout shard, then ``delay`` s later SIGKILL every process of it."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        titles = []
        for proc in cluster.node_processes(node):
            try:
                titles.append(" ".join(proc.cmdline()))
            except Exception:  # noqa: BLE001  (a process that ended while listed)
                continue
        if any(t.startswith("ray::rollout-shard") for t in titles):
            time.sleep(delay)
            killed.append(cluster.kill_node(node))
            return
        time.sleep(0.1)


def test_three_nodes_record_the_episodes_of_the_thread_runner(cluster, tmp_path) -> None:
    ray_run = _eval(cluster, tmp_path / "ray", "same-run", "-p", "noisy")
    assert ray_run.returncode == 0, ray_run.stderr[-3000:]
    threads_run = _eval(None, tmp_path / "threads", "same-run", "-p", "noisy")
    assert threads_run.returncode == 0, threads_run.stderr[-3000:]
    rows = _rows(tmp_path / "ray")
    assert len(rows) == 2 * N
    assert {r[4] for r in rows} != {"solved"}  # the noisy policy fails some: rewards and terminations vary
    assert rows == _rows(tmp_path / "threads")
    assert len(_nodes_that_ran_shards(cluster)) >= 2, "the shards did not spread over the nodes"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_worker_node_killed_mid_run_loses_and_doubles_no_episode(cluster, endpoint, tmp_path, seed) -> None:
    node = f"worker{seed + 1}"
    killed: list[int] = []
    killer = threading.Thread(
        target=_kill_when_running_a_shard, args=(cluster, node, random.Random(seed).uniform(0.0, 0.5), killed)
    )
    killer.start()
    run = _eval(cluster, tmp_path / "ws", f"kill-{seed}", "-p", "openai", "--model", "scripted", "--base-url", endpoint)
    killer.join()
    assert killed and killed[0] > 0, f"node {node} never ran a shard"
    assert run.returncode == 0, run.stderr[-3000:]
    assert "will be retried" in run.stdout + run.stderr  # Ray ran the lost node's shard again elsewhere
    rows = _rows(tmp_path / "ws")
    assert len(rows) == 2 * N and len({r[0] for r in rows}) == 2 * N
    assert len({(r[1], r[2]) for r in rows}) == 2 * N
    assert all(r[4] == "solved" for r in rows), rows


def test_a_lost_head_stops_the_run_in_one_line_and_run_id_completes_it(cluster, endpoint, tmp_path) -> None:
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_running_a_shard, args=(cluster, "head", 1.0, killed))
    killer.start()
    args = ("-p", "openai", "--model", "scripted", "--base-url", endpoint)
    lost = _eval(cluster, tmp_path / "ws", "head-lost", *args)
    killer.join()
    assert killed and lost.returncode != 0
    last = lost.stderr.strip().splitlines()[-1]
    assert "Ray cluster's head" in last and "--run-id head-lost" in last, lost.stderr[-3000:]
    assert "Traceback" not in lost.stderr
    from campflow.storage.query import run_sql

    status = run_sql(tmp_path / "ws" / "campflow.duckdb", "SELECT status FROM runs WHERE run_id = 'head-lost'").rows
    assert status == [("failed",)]
    cluster.stop()  # what was left of it
    back = LocalRayCluster(cluster.root)  # a cluster is back, on another port: a head alone
    back.add_node("head")
    done = _eval(back, tmp_path / "ws", "head-lost", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(tmp_path / "ws")
    assert len(rows) == 2 * N and len({r[0] for r in rows}) == 2 * N
    assert all(r[4] == "solved" for r in rows)
