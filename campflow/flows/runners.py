"""The Prefect task runner a config asks for: threads here, Ray or Dask beyond one machine."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

from campflow.config import RolloutConfig
from campflow.errors import ClusterLostError, ConfigError

# how long a Ray head may stay unreachable before the run stops; Ray itself ends the driver process
# after 60 s without its head (gcs_rpc_server_reconnect_timeout_s), with no word on the run
HEAD_GRACE_S = 10.0


def task_runner(cfg: RolloutConfig) -> Any:
    """A task runner for rollout fan-out."""
    if cfg.task_runner == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=cfg.workers)
    if cfg.task_runner == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError:
            raise ConfigError("rollout.task_runner = 'ray' needs prefect-ray: pip install 'campflow[scale]'") from None
        init = {"num_cpus": cfg.workers} if cfg.ray_address is None else {}
        return RayTaskRunner(address=cfg.ray_address, init_kwargs=init)
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ConfigError("rollout.task_runner = 'dask' needs prefect-dask: pip install prefect-dask") from None
    return DaskTaskRunner(cluster_kwargs={"n_workers": cfg.workers, "processes": True})


@contextlib.contextmanager
def spread(cfg: RolloutConfig) -> Iterator[None]:
    """Rollout tasks submitted inside go one per node in turn on a Ray cluster (Ray's default fills the
    node the flow runs on first); nothing changes for the other runners."""
    if cfg.task_runner != "ray":
        yield
        return
    from prefect_ray.context import remote_options

    with remote_options(scheduling_strategy="SPREAD"):
        yield


def in_process(cfg: RolloutConfig) -> bool:
    """Whether rollout tasks run in this process (so they can report progress directly)."""
    return cfg.task_runner == "threads"


class ClusterWatch:
    """Notices a Ray cluster's head going away while a flow waits on its rollout tasks.

    Ray retries the tasks of a lost worker node on its own; a lost head it does not survive: the driver
    waits, then Ray ends the process. :meth:`check`, called while no task has finished for a while,
    raises :class:`ClusterLostError` once the head's port has refused connections for ``grace`` seconds,
    so the flow marks its run failed and says how to complete it.
    """

    def __init__(self, cfg: RolloutConfig, run_id: str, grace: float = HEAD_GRACE_S) -> None:
        self.run_id = run_id
        self.grace = grace
        self.head: tuple[str, int] | None = None
        self._down_since: float | None = None
        remote = cfg.task_runner == "ray" and cfg.ray_address is not None and not cfg.ray_address.startswith("ray://")
        if remote:
            import ray

            host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
            self.head = (host, int(port))

    def check(self) -> None:
        """Raise :class:`ClusterLostError` when the head has been unreachable for ``grace`` seconds."""
        if self.head is None:
            return
        try:
            socket.create_connection(self.head, timeout=2).close()
            self._down_since = None
            return
        except OSError:
            now = time.monotonic()
            self._down_since = self._down_since or now
            if now - self._down_since < self.grace:
                return
        host, port = self.head
        raise ClusterLostError(
            f"the Ray cluster's head at {host}:{port} is gone (no answer for {self.grace:.0f} s); the episodes "
            f"written so far are kept: start a cluster again and rerun with --run-id {self.run_id} to complete the run"
        )
