"""A Ray cluster of several nodes on one machine: a head and worker nodes, each its own ``ray start``.

Each node is a separate set of Ray processes (its own raylet, object store, temp dir and resources), as
on separate machines, so a node can be lost on its own: :meth:`LocalRayCluster.kill_node` SIGKILLs one
node's raylet and every process under it. Nothing here touches another Ray on the machine: the ports
are free ones, every node's temp dir lies under the cluster's own folder, and stopping kills only the
processes whose command line names that folder (never ``ray stop``, which stops every Ray of the user).

The cluster uses Ray's token authentication with a token of its own (``<root>/auth_token``); a driver
(``campflow eval`` with ``rollout.ray_address``) needs :attr:`LocalRayCluster.env` in its environment.

Run it as a process: ``python scripts/ray_cluster.py start --root /tmp/campflow-ray --workers 2``
prints the address and the environment to export; ``... stop --root /tmp/campflow-ray`` stops it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

_RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalRayCluster:
    """A head and worker nodes started with ``ray start`` under ``root``; see the module docstring."""

    root: Path
    port: int = 0  # the head's GCS port; 0 picks a free one
    object_store_mb: int = 100  # per node: the episodes are small, /dev/shm is shared
    nodes: dict[str, int] = field(default_factory=dict)  # node name -> its CPUs
    # how starting the nodes went, a line each ("12.3 s: ray start worker1: ok in 5.4 s"), to say why a start was slow
    timeline: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if not self.port:
            self.port = free_port()
        self._t0 = time.monotonic()

    def _note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic() - self._t0:.1f} s: {what}")

    @property
    def address(self) -> str:
        """What ``rollout.ray_address`` (and ``ray start --address``) takes."""
        return f"127.0.0.1:{self.port}"

    @property
    def token_path(self) -> Path:
        """This cluster's authentication token."""
        return self.root / "auth_token"

    @property
    def env(self) -> dict[str, str]:
        """The environment every node and every driver of this cluster runs with."""
        return {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_path),
            "RAY_USAGE_STATS_ENABLED": "0",
            # a loaded machine starts a node's agents and workers slowly: wait for them longer
            "RAY_agent_register_timeout_ms": "120000",
            "RAY_raylet_start_wait_time_s": "300",
            "RAY_worker_register_timeout_seconds": "120",
            # a node killed is known dead after ~5 s, not ~30 s, so its tasks are not offered to it again
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "5",
        }

    def start(self, workers: int = 2, cpus: int = 1, head_cpus: int | None = None) -> LocalRayCluster:
        """Start the head (``head_cpus``, default ``cpus``) and ``workers`` worker nodes of ``cpus`` each,
        one after the other (nodes starting at once on a loaded 2-core machine time out); return when
        every node has joined."""
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.token_path.exists():
            self.token_path.write_text(secrets.token_hex(32))
            self.token_path.chmod(0o600)
        (self.root / "cluster.json").write_text(json.dumps({"address": self.address, "env": self.env}))
        try:
            self.add_node("head", cpus if head_cpus is None else head_cpus, wait=False)
            for i in range(1, workers + 1):
                self.add_node(f"worker{i}", cpus, wait=False)
            started = time.monotonic()
            self.wait_for_nodes(len(self.nodes))
            self._note(f"{len(self.nodes)} nodes counted after {time.monotonic() - started:.1f} s")
        except BaseException:
            self.stop()
            raise
        return self

    def add_node(self, name: str, cpus: int = 1, attempts: int = 3, wait: bool = True) -> None:
        """Start node ``name`` (``head`` is the head) with ``cpus`` CPUs and (``wait``) wait until the head
        counts it. ``ray start`` gives up on a node whose raylet has not registered within 30 s (fixed in
        Ray), yet leaves it starting: on a loaded machine that node is waited for while its raylet lives;
        one whose raylet is gone, or that never joins, is cleaned away and started again."""
        for attempt in range(1, attempts + 1):
            started = time.monotonic()
            out = self._ray_start(name, cpus)
            self._note(f"ray start {name}: {out or 'ok'} in {time.monotonic() - started:.1f} s")
            self.nodes[name] = cpus
            if out is None and not wait:
                return
            if out is None or self._raylet_alive(name):  # a raylet that lives may still join
                started = time.monotonic()
                try:
                    self.wait_for_nodes(len(self.nodes), timeout=300 if out else 120)
                    self._note(f"{name} joined after {time.monotonic() - started:.1f} s")
                    return
                except RuntimeError as exc:
                    out = out or str(exc)
                    self._note(f"{name}: {exc}")
            else:
                self._note(f"{name}: no raylet left; started again")
            self.kill_node(name)
            if attempt == attempts:
                raise RuntimeError(f"ray start of node {name} failed {attempts} times; last: {out}")

    def _ray_start(self, name: str, cpus: int) -> str | None:
        """Run ``ray start`` for node ``name``; None when it started, else its last line of output."""
        temp = self.root / name
        temp.mkdir(parents=True, exist_ok=True)
        args = [
            _RAY,
            "start",
            f"--num-cpus={cpus}",
            f"--resources={json.dumps({f'node_{name}': 1})}",
            f"--temp-dir={temp}",
            f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
            # every port fixed: with 0 a raylet waits for its agents to write theirs, and gives up after a
            # while on a loaded machine
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            "--disable-usage-stats",
        ]
        if name == "head":
            args += [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--dashboard-port={free_port()}",
                f"--ray-client-server-port={free_port()}",
            ]
        else:
            args += [f"--address={self.address}"]
        if name != "head":
            args += ["--include-log-monitor=false"]  # one process less per node; workers' logs stay in its folder
        # its output to a file, not a pipe: a process it leaves running that kept the pipe open would hold a
        # reader of the pipe until that process ends
        log = temp / "ray-start.log"
        try:
            with log.open("w") as out:
                proc = subprocess.run(
                    args,
                    env={**os.environ, **self.env},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.root,
                    timeout=300,
                )
        except subprocess.TimeoutExpired:
            return "ray start did not return within 300 s"
        if proc.returncode == 0:
            return None
        lines = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace")).strip().splitlines()  # no colours
        return lines[-1] if lines else f"exit status {proc.returncode}"

    def _raylet_alive(self, name: str) -> bool:
        """Whether node ``name`` has a raylet running."""
        for proc in self.node_processes(name):
            try:
                if proc.name() == "raylet":
                    return True
            except psutil.Error:
                continue
        return False

    def node_processes(self, name: str) -> list[psutil.Process]:
        """Every live process of node ``name``: those naming its temp dir and all their descendants."""
        marker = f"{self.root / name}/"
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            if any(marker in arg for arg in proc.info["cmdline"] or []):
                found[proc.pid] = proc
                try:
                    found.update({c.pid: c for c in proc.children(recursive=True)})
                except psutil.NoSuchProcess:
                    pass
        return list(found.values())

    def kill_node(self, name: str) -> int:
        """SIGKILL node ``name``'s raylet, its workers and every other process of it; how many died."""
        procs = self.node_processes(name)
        for proc in procs:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        psutil.wait_procs(procs, timeout=10)
        self.nodes.pop(name, None)
        return len(procs)

    def alive_nodes(self) -> int:
        """How many nodes the head counts alive now (0 when the head does not answer)."""
        try:
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"import json, ray; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
                    "print(json.dumps(sum(n['Alive'] for n in ray.nodes())))",
                ],
                env={**os.environ, **self.env},
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            return 0
        return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0

    def wait_for_nodes(self, n: int, timeout: float = 120) -> None:
        """Wait until the head counts ``n`` nodes alive."""
        deadline = time.monotonic() + timeout
        while (alive := self.alive_nodes()) != n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster at {self.address} has {alive} nodes alive, expected {n}")
            time.sleep(1)

    def stop(self) -> None:
        """Kill every node of this cluster, workers first, and nothing else."""
        for name in sorted(self.nodes, key=lambda n: n == "head"):
            self.kill_node(name)
        for temp in self.root.iterdir() if self.root.exists() else []:
            if temp.is_dir():
                self.kill_node(temp.name)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``start`` or ``stop`` a local cluster under ``--root``."""
    import argparse

    parser = argparse.ArgumentParser(description="A local Ray cluster of several nodes for campflow's rollouts.")
    parser.add_argument("action", choices=["start", "stop", "kill-node"])
    parser.add_argument("--root", type=Path, default=Path("/tmp/campflow-ray"), help="the cluster's own folder")
    parser.add_argument("--port", type=int, default=0, help="the head's port (default: a free one)")
    parser.add_argument("--workers", type=int, default=2, help="worker nodes besides the head")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs (rollout tasks at a time) per node")
    parser.add_argument("--node", default="worker1", help="kill-node: the node to kill")
    args = parser.parse_args(argv)
    if args.action == "start":
        cluster = LocalRayCluster(args.root, args.port).start(args.workers, args.cpus)
        exports = " ".join(f"{k}={v}" for k, v in cluster.env.items())
        print(f"Ray cluster of {len(cluster.nodes)} nodes at {cluster.address} (folder {cluster.root})")
        print(f"export {exports}")
        print(f"CAMPFLOW__ROLLOUT__TASK_RUNNER=ray CAMPFLOW__ROLLOUT__RAY_ADDRESS={cluster.address} campflow eval ...")
        return
    saved = json.loads((args.root / "cluster.json").read_text())
    cluster = LocalRayCluster(args.root, int(saved["address"].rsplit(":", 1)[1]))
    if args.action == "kill-node":
        print(f"{cluster.kill_node(args.node)} processes of node {args.node} killed")
    else:
        cluster.stop()
        print(f"the Ray cluster under {cluster.root} is stopped")


if __name__ == "__main__":
    main()
