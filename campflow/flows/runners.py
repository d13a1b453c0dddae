"""The Prefect task runner a config asks for: threads here, Ray or Dask beyond one machine."""

from __future__ import annotations

from typing import Any

from campflow.config import RolloutConfig
from campflow.errors import ConfigError


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


def in_process(cfg: RolloutConfig) -> bool:
    """Whether rollout tasks run in this process (so they can report progress directly)."""
    return cfg.task_runner == "threads"
