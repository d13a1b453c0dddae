"""The ``evaluate`` flow: a policy on bootcamps x the eval split x k samples, into the store.

Re-running with the same run id completes only what is missing: episodes already recorded with a
model outcome are kept, infra-failed and timed-out ones run again.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any, NoReturn

from prefect import flow

from campflow import progress, stopping
from campflow.agents.factory import policy_model_id
from campflow.agents.vision import observation_mode, with_observation
from campflow.bootcamps.splits import eval_instances
from campflow.config import CampflowConfig
from campflow.errors import StoreBusyError
from campflow.flows.rollouts import record_rollouts
from campflow.flows.runners import task_runner
from campflow.storage.names import check_run_id
from campflow.storage.store import Store
from campflow.storage.workspace import Workspace
from campflow.tasks.artifacts import run_artifact_task
from campflow.tasks.rollout import ShardItem, shard_items


@dataclass
class EvalSummary:
    """What an evaluation did: its run id, counts and pass rate per bootcamp."""

    run_id: str
    model_id: str
    ran: int  # episodes run by this invocation
    skipped: int  # episodes already complete from an earlier invocation
    pass_rates: dict[str, float] = field(default_factory=dict)
    terminations: dict[str, int] = field(default_factory=dict)
    # of this invocation's episodes: episodes_per_s, tokens_per_s, latency_per_turn_s (the policy's)
    throughput: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form, stored as the run's summary."""
        return {
            "run_id": self.run_id,
            "model_id": self.model_id,
            "ran": self.ran,
            "skipped": self.skipped,
            "pass_rates": self.pass_rates,
            "terminations": self.terminations,
            "throughput": self.throughput,
        }


def new_run_id(kind: str) -> str:
    """A fresh, sortable run id such as ``eval-20261130-034012-1a2b3c``."""
    return f"{kind}-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def plan_eval(cfg: CampflowConfig, ws: Workspace, run_id: str) -> tuple[list[ShardItem], int]:
    """Record the eval instances and list the episodes this run still needs (and how many are done)."""
    store = ws.store
    done = store.completed_keys(run_id)
    items: list[ShardItem] = []
    observation = observation_mode(cfg.rollout.observation, cfg.policy.kind, cfg.policy.model)
    for bootcamp in ws.bootcamps(cfg.eval.bootcamps):
        instances = eval_instances(bootcamp, cfg.eval.n, cfg.eval.levels, observation)
        store.write_instances(instances, split="eval")
        items += shard_items(instances, cfg.eval.samples, done)
    return items, len(done)


@flow(name="evaluate", log_prints=False, validate_parameters=False)
@stopping.unwinding
def evaluate_flow(
    cfg: CampflowConfig, run_id: str | None = None, kind: str = "evaluate", agent: str | None = None
) -> EvalSummary:
    """Evaluate ``cfg.policy`` on ``cfg.eval`` and write every episode to the store; with ``agent`` (a
    command or ``module:function``; default ``cfg.rollout.agent``), that program plays each episode with
    ``cfg.policy`` behind the proxy."""
    run_id = check_run_id(run_id) if run_id is not None else new_run_id("eval")
    ws = Workspace.from_config(cfg)
    store = ws.store
    model_id = policy_model_id(cfg.policy)
    store.start_run(run_id, kind, cfg.model_dump(mode="json"), model_id)
    try:
        items, skipped = plan_eval(cfg, ws, run_id)
        meter = progress.Throughput()
        rollout = cfg.rollout if agent is None else cfg.rollout.model_copy(update={"agent": agent})
        record_rollouts(store, items, cfg.policy, rollout, run_id, meter)
        summary = summarize(store, run_id, model_id, ran=len(items), skipped=skipped)
        summary.throughput = meter.rates()
        store.finish_run(run_id, "completed", summary.as_dict())
    except BaseException as exc:
        fail_run(store, run_id, exc)
    run_artifact_task(store, run_id)  # the run's pass rates in the Prefect UI
    return summary


def fail_run(store: Store, run_id: str, exc: BaseException) -> NoReturn:
    """Mark ``run_id`` failed with ``exc`` as the reason and re-raise it; a store that stayed locked is
    re-raised saying what became of the run and how to complete it."""
    marked = store.fail_run(run_id, exc)
    if isinstance(exc, StoreBusyError):
        state = "is marked failed" if marked else "could not even be marked failed (it still says running)"
        raise StoreBusyError(
            f"{exc}; run {run_id} {state}: the episodes written so far are kept, and rerunning "
            "it with the same run id completes only what is missing"
        ) from None
    raise exc


def summarize(store: Store, run_id: str, model_id: str, ran: int, skipped: int) -> EvalSummary:
    """Pass rates and termination counts of a run, read back from the store."""
    rates = {
        r["bootcamp"]: float(r["pass_rate"] or 0.0)
        for r in store.query("SELECT bootcamp, pass_rate FROM pass_rates WHERE run_id = ? ORDER BY bootcamp", [run_id])
    }
    terms = {
        r["termination"]: int(r["n"])
        for r in store.query(
            "SELECT termination, count(*) AS n FROM episodes WHERE run_id = ? GROUP BY termination ORDER BY n DESC",
            [run_id],
        )
    }
    return EvalSummary(run_id, model_id, ran, skipped, rates, terms)


def evaluate(cfg: CampflowConfig, run_id: str | None = None, agent: str | None = None) -> EvalSummary:
    """Python API of ``campflow eval``: run the evaluate flow with the task runner ``cfg`` asks for.

    A local checkpoint (``policy.kind: local``) is reached as ``serving`` says: in-process, or through a
    server started for it (and stopped afterwards) or a running endpoint. With ``agent`` (``"python
    my_agent.py"`` or ``my_agent:run``), that program plays the episodes (docs/agents.md).
    """
    run = evaluate_flow.with_options(task_runner=task_runner(cfg.rollout))
    if cfg.policy.kind == "local" and cfg.policy.model:  # the mode follows the checkpoint, however it is served
        cfg = with_observation(cfg, cfg.policy.model)
    if cfg.policy.kind != "local" or cfg.serving.kind == "inprocess":
        return run(cfg, run_id, agent=agent)
    from campflow.serving import CheckpointServers

    with CheckpointServers(cfg) as servers:
        summary = run(servers.config(str(cfg.policy.model)), run_id, agent=agent)
        servers.check()  # a server that died mid-run left infra_error episodes: say so, the run resumes
    return summary
