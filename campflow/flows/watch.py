"""The ``watch`` flow: count new model failures since the last training, and start a cycle past the
threshold. Every decision is recorded in ``watch_decisions``.

Beside evaluation failures it counts judged production failures (:mod:`campflow.proxy.judging` files
the judgements posted or made since the last look first): in all (``watch.production_threshold``) and
per failure cluster (``watch.production_cluster_threshold``); a decision names the clusters that crossed."""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import flow, get_run_logger

from campflow.config import CampflowConfig, WatchConfig, as_config
from campflow.flows.improve import CycleSummary, improve_flow
from campflow.storage import cycles
from campflow.storage.lock import WorkspaceBusyError, WorkspaceLock
from campflow.storage.store import Store, now
from campflow.storage.workspace import Workspace


@dataclass
class WatchDecision:
    """What watch counted and whether it started a cycle."""

    new_failures: int
    threshold: int
    started: CycleSummary | None
    busy: str | None = None  # why no cycle could start: the workspace lock's holder
    production: ProductionCount | None = None
    crossed: list[str] = field(default_factory=list)  # production clusters at or past their threshold
    due: bool = False  # a threshold was reached


@dataclass
class ProductionCount:
    """Judged production failures since the last training: in all, and per failure cluster."""

    total: int = 0
    by_cluster: dict[str, int] = field(default_factory=dict)  # cluster id -> failures
    labels: dict[str, str] = field(default_factory=dict)  # cluster id -> its label


def new_failures(store: Store) -> int:
    """Model failures recorded by evaluations since the last training (the ``new_failures`` view)."""
    return int(store.scalar("SELECT coalesce(sum(failures), 0) FROM new_failures") or 0)


def production_failures(store: Store) -> ProductionCount:
    """Judged production failures since the last training (the ``new_production_failures`` view)."""
    count = ProductionCount()
    for r in store.query("SELECT cluster_id, label, failures FROM new_production_failures"):
        count.total += int(r["failures"])
        if r["cluster_id"] is not None:
            count.by_cluster[r["cluster_id"]] = count.by_cluster.get(r["cluster_id"], 0) + int(r["failures"])
            count.labels[r["cluster_id"]] = r["label"] or ""
    return count


def decide(evaluation: int, production: ProductionCount, cfg: WatchConfig) -> tuple[bool, list[str]]:
    """Whether a cycle is due, and the production clusters at or past ``production_cluster_threshold``."""
    per_cluster = cfg.production_cluster_threshold
    crossed = sorted(c for c, n in production.by_cluster.items() if per_cluster is not None and n >= per_cluster)
    due = (
        evaluation >= cfg.threshold
        or (cfg.production_threshold is not None and production.total >= cfg.production_threshold)
        or bool(crossed)
    )
    return due, crossed


def _file_production(store: Store, cfg: CampflowConfig) -> None:
    """File the production judgements made since the last look, so they are counted."""
    from campflow.proxy.filing import file_judged

    if store.scalar("SELECT count(*) FROM production_judgements"):
        file_judged(store, cfg.production, cfg.synthesis)


def _record(
    store: Store, count: int, threshold: int, production: ProductionCount, crossed: list[str], cycle_id: str | None
) -> None:
    with store.connection() as con:
        con.execute(
            "INSERT INTO watch_decisions (decided_at, new_failures, threshold, started_cycle_id, "
            "production_failures, crossed_clusters) VALUES (?, ?, ?, ?, ?, ?)",
            [now(), count, threshold, cycle_id, production.total, crossed],
        )


@flow(name="watch", log_prints=False, validate_parameters=False)
def watch_flow(cfg: CampflowConfig | str) -> WatchDecision:
    """Start one improvement cycle if enough new failures have accumulated (and none is running).
    ``cfg`` may also be a dict or a YAML path (a deployment's parameters)."""
    cfg = as_config(cfg)
    store = Workspace.from_config(cfg).store
    _file_production(store, cfg)
    count, threshold = new_failures(store), cfg.watch.threshold
    production = production_failures(store)
    due, crossed = decide(count, production, cfg.watch)
    lock = WorkspaceLock(cfg.workspace.db_path)
    try:
        lock.acquire()  # held from the decision to the end of the cycle it starts
    except WorkspaceBusyError as busy:
        _record(store, count, threshold, production, crossed, None)
        # a deployment's run says why on its page (the CLI prints the decision it returns)
        get_run_logger().info(f"no cycle could start: {busy}")
        return WatchDecision(count, threshold, None, str(busy), production, crossed, due)
    try:
        running = cycles.latest_unfinished(store)
        cycle_id = None
        if due and running is None:
            cycle_id = cycles.new_cycle_id()
            lock.name(cycle_id)
        _record(store, count, threshold, production, crossed, cycle_id)
        started = improve_flow(cfg, cycle_id) if cycle_id else None
    finally:
        lock.release()
    return WatchDecision(count, threshold, started, None, production, crossed, due)
