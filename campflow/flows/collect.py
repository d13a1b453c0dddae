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
from campflow.agents.vision import observation_mode
from campflow.bootcamps.base import Instance
from campflow.bootcamps.splits import assert_not_held_out, train_instances
from campflow.config import CampflowConfig
from campflow.flows.evaluate import EvalSummary, fail_run, new_run_id, summarize
from campflow.flows.rollouts import record_rollouts
from campflow.flows.runners import task_runner
from campflow.storage.names import check_run_id
from campflow.storage.store import instances_to_arrow
from campflow.storage.workspace import Workspace
from campflow.synthesis.validate import variant_seeds
from campflow.tasks.rollout import shard_items


def collection_instances(
    cfg: CampflowConfig,
    ws: Workspace,
    extra_ids: list[str] | None = None,
    *,
    variant_ids: list[str] | None = None,
    levels: dict[str, list[int]] | None = None,
) -> tuple[list[Instance], dict[str, str]]:
    """Train instances to collect on, and the variant of each synthesized one (instance id -> variant id).

    Per bootcamp, ``training.collect_n`` instances: ``synthesis.share`` of them from accepted variants
    (``variant_ids``, default every accepted variant), the rest generated at ``levels[bootcamp]``
    (default ``training.levels``); fewer variant instances than the share asks for leave the rest
    generated. Plus ``extra_ids`` (instances recorded in the store, e.g. the ones a model failed on).
    """
    t = cfg.training
    out: dict[str, Instance] = {}
    synthesized: dict[str, str] = {}
    probes = ws.store.probe_ids()
    observation = observation_mode(cfg.rollout.observation, cfg.policy.kind, cfg.policy.model)
    for bootcamp in ws.bootcamps(t.bootcamps):
        wanted = round(cfg.synthesis.share * t.collect_n)
        picked = variant_instances(ws, bootcamp.name, wanted, variant_ids, skip=probes)
        for vid, inst in picked:
            out[inst.id], synthesized[inst.id] = inst, vid
        lv = (levels or {}).get(bootcamp.name) or [
            lv for lv in (t.levels or sorted(bootcamp.levels)) if lv in bootcamp.levels
        ]
        for inst in train_instances(
            bootcamp, t.collect_n - len(picked), seed=t.tiny.seed, levels=lv, observation=observation
        ):
            out.setdefault(inst.id, inst)
    if extra_ids:
        for inst in recorded_instances(ws, extra_ids):
            if inst.bootcamp in t.bootcamps:
                out[inst.id] = inst
    return list(out.values()), synthesized


def variant_instances(
    ws: Workspace, bootcamp: str, n: int, variant_ids: list[str] | None = None, skip: set[str] = frozenset()
) -> list[tuple[str, Instance]]:
    """Up to ``n`` (variant id, instance) pairs from the accepted variants of ``bootcamp``, spread evenly.

    Each variant's instances come from its own seeds (:func:`variant_seeds`, whose first ones are the
    instances validation checked), so asking for more instances than validation made draws fresh ones;
    ``skip`` (the probes) is never returned, and params that fail to generate on a seed skip that seed.
    """
    if n <= 0 or variant_ids == []:
        return []
    sql = "SELECT variant_id, params FROM variants WHERE bootcamp = ? AND status = 'accepted'"
    args: list[object] = [bootcamp]
    if variant_ids is not None:
        sql += " AND variant_id IN (SELECT unnest(?))"
        args.append(list(variant_ids))
    rows = ws.store.query(sql + " ORDER BY variant_id", args)
    if not rows:
        return []
    made = ws.bootcamp(bootcamp)
    per = -(-n // len(rows))  # ceil: every variant gets its share
    out: list[tuple[str, Instance]] = []
    for k in range(per):
        for r in rows:
            if len(out) >= n:
                return out
            seed = variant_seeds(r["variant_id"], k + 1)[k]
            try:
                inst = made.generate(json.loads(r["params"]), seed)
            except Exception:  # noqa: BLE001, S112  (a seed these params cannot generate on is skipped)
                continue
            if inst.id not in skip:
                out.append((r["variant_id"], inst))
    return out


def recorded_instances(ws: Workspace, instance_ids: list[str]) -> list[Instance]:
    """Instances recorded in the workspace's store, rebuilt from their params and seed."""
    rows = ws.store.query(
        "SELECT instance_id, bootcamp, params, seed FROM instances WHERE instance_id IN (SELECT unnest(?))",
        [instance_ids],
    )
    return [ws.bootcamp(r["bootcamp"]).generate(json.loads(r["params"]), int(r["seed"])) for r in rows]


@flow(name="collect", log_prints=False, validate_parameters=False)
@stopping.unwinding
def collect_flow(
    cfg: CampflowConfig,
    run_id: str | None = None,
    extra_ids: list[str] | None = None,
    only_ids: list[str] | None = None,
    kind: str = "collect",
    *,
    variant_ids: list[str] | None = None,
    levels: dict[str, list[int]] | None = None,
    samples: int | None = None,
) -> EvalSummary:
    """Run ``cfg.policy`` on training instances and record every episode.

    By default the instances are :func:`collection_instances` (of ``variant_ids`` at ``levels``);
    ``only_ids`` runs exactly those recorded instances instead: train ones, or (kind ``probe``) a
    cycle's held-out probes. ``samples`` episodes per instance (default ``training.collect_samples``).
    """
    run_id = check_run_id(run_id) if run_id is not None else new_run_id(kind)
    ws = Workspace.from_config(cfg)
    store = ws.store
    model_id = policy_model_id(cfg.policy)
    store.start_run(run_id, kind, cfg.model_dump(mode="json"), model_id)
    try:
        synthesized: dict[str, str] = {}
        if only_ids is not None:
            instances = recorded_instances(ws, only_ids)
        else:
            instances, synthesized = collection_instances(cfg, ws, extra_ids, variant_ids=variant_ids, levels=levels)
        if kind != "probe":  # a probe run measures on held-out instances; every other run may train on its own
            assert_not_held_out(
                (i.id for i in instances), store.eval_ids(), store.probe_ids(), what="teacher collection"
            )
            variants = [i for i in instances if i.id in synthesized]
            store.insert(
                "instances",
                instances_to_arrow(
                    variants, split="train", origin="synthesized", variant_ids=[synthesized[i.id] for i in variants]
                ),
                on_conflict="ignore",
            )
            store.write_instances(instances, split="train")
        done = store.completed_keys(run_id)
        items = shard_items(instances, samples or cfg.training.collect_samples, done)
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
