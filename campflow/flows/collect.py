"""The ``collect`` flow: teacher (or self-sampled) episodes on train-split instances.

The grounded demonstrator (policy kind ``demonstrator``: it observes before it acts, see
:meth:`~campflow.bootcamps.base.Bootcamp.demonstrate`) is the offline teacher; a local or endpoint
model with ``samples`` > 1 and a temperature gives best-of-k self-sampling, of which the dataset filter keeps only the samples that pass. The eval
split is never touched: instances come from the training seed range, plus synthesized variants.
"""

from __future__ import annotations

import json

from prefect import flow

from campflow import progress, stopping
from campflow.agents.factory import policy_model_id
from campflow.bootcamps.base import Instance
from campflow.bootcamps.splits import assert_not_eval, train_instances
from campflow.config import CampflowConfig
from campflow.flows.evaluate import EvalSummary, fail_run, new_run_id, summarize
from campflow.flows.rollouts import record_rollouts
from campflow.flows.runners import task_runner
from campflow.storage.names import check_run_id
from campflow.storage.workspace import Workspace
from campflow.tasks.rollout import shard_items


def collection_instances(cfg: CampflowConfig, ws: Workspace,
                         extra_ids: list[str] | None = None) -> list[Instance]:
    """Train instances to collect on: generated ones per bootcamp, plus synthesized variants and
    ``extra_ids`` (instances recorded in the store, e.g. the ones a model failed on)."""
    t = cfg.training
    out: dict[str, Instance] = {}
    for bootcamp in ws.bootcamps(t.bootcamps):
        levels = [lv for lv in (t.levels or sorted(bootcamp.levels)) if lv in bootcamp.levels]
        for inst in train_instances(bootcamp, t.collect_n, seed=t.tiny.seed, levels=levels):
            out[inst.id] = inst
    sql = ("SELECT instance_id, bootcamp, params, seed FROM instances WHERE split = 'train' AND "
           "(origin = 'synthesized'" + (f" OR instance_id IN ({', '.join('?' for _ in extra_ids)})" if extra_ids else "")
           + ")")
    for r in ws.store.query(sql, list(extra_ids or [])):
        if r["bootcamp"] in t.bootcamps:
            inst = ws.bootcamp(r["bootcamp"]).generate(json.loads(r["params"]), int(r["seed"]))
            out[inst.id] = inst
    return list(out.values())


def recorded_instances(ws: Workspace, instance_ids: list[str]) -> list[Instance]:
    """Instances recorded in the workspace's store, rebuilt from their params and seed."""
    rows = ws.store.query("SELECT instance_id, bootcamp, params, seed FROM instances WHERE instance_id IN "
                       "(SELECT unnest(?))", [instance_ids])
    return [ws.bootcamp(r["bootcamp"]).generate(json.loads(r["params"]), int(r["seed"])) for r in rows]


@flow(name="collect", log_prints=False, validate_parameters=False)
@stopping.unwinding
def collect_flow(cfg: CampflowConfig, run_id: str | None = None, extra_ids: list[str] | None = None,
                 only_ids: list[str] | None = None, kind: str = "collect") -> EvalSummary:
    """Run ``cfg.policy`` on training instances and record every episode.

    By default the instances are :func:`collection_instances`; ``only_ids`` runs exactly those
    recorded train instances instead (e.g. a candidate on the variants synthesized for it).
    """
    run_id = check_run_id(run_id) if run_id is not None else new_run_id(kind)
    ws = Workspace.from_config(cfg)
    store = ws.store
    model_id = policy_model_id(cfg.policy)
    store.start_run(run_id, kind, cfg.model_dump(mode="json"), model_id)
    try:
        instances = (recorded_instances(ws, only_ids) if only_ids is not None
                     else collection_instances(cfg, ws, extra_ids))
        assert_not_eval((i.id for i in instances), store.eval_ids(), what="teacher collection")
        store.write_instances(instances, split="train")
        done = store.completed_keys(run_id)
        items = shard_items(instances, cfg.training.collect_samples, done)
        meter = progress.Throughput()
        record_rollouts(store, items, cfg.policy, cfg.rollout, run_id, meter)
        summary = summarize(store, run_id, model_id, ran=len(items), skipped=len(done))
        summary.throughput = meter.rates()
        store.finish_run(run_id, "completed", summary.as_dict())
    except BaseException as exc:
        fail_run(store, run_id, exc)
    return summary


def collect(cfg: CampflowConfig, run_id: str | None = None, extra_ids: list[str] | None = None) -> EvalSummary:
    """Python API of ``campflow collect``."""
    return collect_flow.with_options(task_runner=task_runner(cfg.rollout))(cfg, run_id, extra_ids)
