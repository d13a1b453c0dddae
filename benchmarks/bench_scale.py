"""Scale-out: episodes per second on 1, 2 and 3 Ray nodes, and on the thread runner, when rollouts wait.

A scripted OpenAI-compatible endpoint (its own process) answers every call after a fixed latency, like
the oracle, so an episode's time is its turns x the latency and the work is bound by waiting, not by
this machine's cores. Each Ray node (its own ``ray start``: head, then worker nodes; see
campflow.testing.ray_cluster) runs ``--cpus`` rollout tasks at a time with ``--concurrency`` episodes in
flight each, so a node adds a fixed number of episodes in flight; the flow is campflow's evaluate flow
(``rollout.ray_address``), the episodes written to a store as in any run. The ideal is the calls x the
latency over the episodes in flight. The thread runner runs the same flow with as many tasks at a time
as the nodes have. Every arm is warmed up first (a Ray job starts its worker processes on each node on
its first tasks, and the first flow starts Prefect), then timed on fresh episodes.

Run: python benchmarks/bench_scale.py [--episodes 128] [--latency 1.0] [--concurrency 8] [--cpus 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TURNS = 4  # calculator level 3: three calculate calls and a submit


def evaluate_once(ws: Path, url: str, args: argparse.Namespace, runner: str, tasks: int, run_id: str, n: int) -> float:
    """Seconds of one evaluate flow on ``n`` calculator level-3 eval instances; checks they were all solved."""
    from campflow.config import load_config
    from campflow.flows.evaluate import evaluate

    overrides = {
        "workspace.path": str(ws),
        "policy.kind": "openai",
        "policy.model": "scripted",
        "policy.base_url": url,
        "eval.bootcamps": ["calculator"],
        "eval.levels": [3],
        "eval.n": n,
        "rollout.task_runner": runner,
        "rollout.workers": tasks,
        "rollout.concurrency": args.concurrency,
        "rollout.shard_size": args.concurrency,  # a task's episodes all in flight at once
    }
    if runner == "ray":
        overrides["rollout.ray_address"] = os.environ["CAMPFLOW_BENCH_RAY_ADDRESS"]
    cfg = load_config(None, overrides, env={})
    t0 = time.perf_counter()
    summary = evaluate(cfg, run_id=run_id)
    wall = time.perf_counter() - t0
    solved = summary.terminations.get("solved", 0)
    if summary.ran != n or solved != n:
        raise SystemExit(f"{run_id}: ran {summary.ran}, solved {solved} of {n}: {summary.terminations}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=128)
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=8, help="episodes in flight per rollout task")
    ap.add_argument("--cpus", type=int, default=1, help="rollout tasks at a time per node")
    ap.add_argument("--nodes", type=int, default=3)
    args = ap.parse_args()
    per_node = args.cpus * args.concurrency
    root = Path(tempfile.mkdtemp(prefix="cf-bench-", dir="/tmp"))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "campflow.testing.scripted_server",
            "--bootcamps",
            "calculator",
            "--n",
            str(4 * (args.episodes + per_node * args.nodes)),  # every 4th eval instance is at level 3
            "--latency",
            str(args.latency),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    from prefect.testing.utilities import prefect_test_harness

    from campflow.testing.ray_cluster import LocalRayCluster

    cluster = LocalRayCluster(root / "ray")
    try:
        url = server.stdout.readline().strip()
        os.environ.update(cluster.env)  # this process is the Ray driver
        os.environ.update(
            {
                "PREFECT_LOGGING_LEVEL": "WARNING",
                "PREFECT_LOGGING_TO_API_ENABLED": "false",
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            }
        )
        os.environ["CAMPFLOW_BENCH_RAY_ADDRESS"] = cluster.address
        print(
            f"endpoint {url}, {args.episodes} episodes x {TURNS} calls, latency {args.latency * 1000:.0f} ms; per node "
            f"{args.cpus} task(s) x {args.concurrency} episodes in flight = {per_node}",
            flush=True,
        )
        rows: list[tuple[str, int, float, float]] = []
        with prefect_test_harness(server_startup_timeout=180):
            # the warm-up touches every node: as many tasks as the cluster runs at once, spread one per node
            import ray

            for nodes in range(1, args.nodes + 1):
                t0 = time.perf_counter()
                cluster.root.mkdir(parents=True, exist_ok=True)
                if nodes == 1:
                    cluster.start(workers=0, cpus=args.cpus)
                    ray.init(address=cluster.address, logging_level="WARNING")  # one job for every arm
                else:
                    cluster.add_node(f"worker{nodes - 1}", args.cpus)
                started = time.perf_counter() - t0
                ws = root / f"ray-{nodes}"
                evaluate_once(ws, url, args, "ray", nodes * args.cpus, "warm", nodes * per_node)
                wall = evaluate_once(ws, url, args, "ray", nodes * args.cpus, "timed", args.episodes)
                rows.append((f"Ray, {nodes} node(s)", nodes, wall, started))
                print(f"  {rows[-1][0]:22s} wall {wall:6.2f}s  (node started in {started:.0f}s)", flush=True)
            ray.shutdown()
            for nodes in range(1, args.nodes + 1):
                ws = root / f"threads-{nodes}"
                evaluate_once(ws, url, args, "threads", nodes * args.cpus, "warm", nodes * per_node)
                wall = evaluate_once(ws, url, args, "threads", nodes * args.cpus, "timed", args.episodes)
                rows.append((f"threads, {nodes * args.cpus} task(s)", nodes, wall, 0.0))
                print(f"  {rows[-1][0]:22s} wall {wall:6.2f}s", flush=True)
        print()
        print(f"{'arm':24s} {'ep/s':>7s} {'ideal ep/s':>10s} {'of ideal':>8s} {'vs 1 node':>9s}")
        base: dict[str, float] = {}
        for label, nodes, wall, _ in rows:
            ideal_wall = args.episodes * TURNS * args.latency / (nodes * per_node)
            eps = args.episodes / wall
            kind = label.split(",")[0]
            base.setdefault(kind, eps)
            print(
                f"{label:24s} {eps:7.2f} {args.episodes / ideal_wall:10.2f} {ideal_wall / wall:8.2f} {eps / base[kind]:8.2f}x"
            )
        ray_rates = [args.episodes / w for label, _, w, _ in rows if label.startswith("Ray")]
        if len(ray_rates) >= 2:
            print(
                f"RATIO scale: 2 nodes / 1 node episodes per second = {ray_rates[1] / ray_rates[0]:.2f} (goal >= 1.7)"
            )
    finally:
        cluster.stop()
        server.kill()
        server.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
