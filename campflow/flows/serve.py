"""Schedules: ``improve`` on a cron and ``watch`` on an interval, served by this process.

Schedules need a Prefect server (``prefect server start``; point ``PREFECT_API_URL`` at it). The same
deployments are declared in ``prefect.yaml`` for ``prefect deploy``.
"""

from __future__ import annotations

from pathlib import Path

from campflow.config import CampflowConfig


def serve(cfg: CampflowConfig, config_path: Path | None = None) -> None:
    """Register and serve both deployments until interrupted."""
    from prefect import serve as prefect_serve

    from campflow.flows.improve import improve_flow
    from campflow.flows.watch import watch_flow

    parameters = {"cfg": cfg.model_dump(mode="json")}
    improve = improve_flow.to_deployment(
        name="campflow-improve",
        cron=cfg.improve.cron,
        parameters=parameters,
        concurrency_limit=1,  # one cycle at a time (the workspace lock refuses a second one anyway)
        description=f"one improvement cycle ({config_path or 'defaults'})",
    )
    watch = watch_flow.to_deployment(
        name="campflow-watch",
        interval=cfg.watch.interval_seconds,
        parameters=parameters,
        concurrency_limit=1,
        description=f"retrain past {cfg.watch.threshold} new failures",
    )
    prefect_serve(improve, watch)
