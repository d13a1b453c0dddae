"""The ``improve`` flow: one full cycle, ending in a before/after report and a promotion decision.

evaluate the current model on the eval split -> mine and cluster its failures -> synthesize variants
aimed at them -> collect teacher trajectories on training instances (the variants included) -> filter
-> SFT -> RL -> re-evaluate the candidate on the same eval split and on the accepted variants ->
report -> promote the candidate only if it is better on the configured metric.

Every step's output lives in the store and is recorded in the cycle's state as soon as the step
completes; every step is idempotent (fixed run ids complete only what is missing, datasets and
checkpoints have content ids). So a cycle killed at any point resumes from its last completed step
(``campflow improve --resume``) without duplicating episodes, variants, datasets or checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import flow

from campflow import progress, stopping
from campflow.config import CampflowConfig, as_config
from campflow.errors import CampflowError
from campflow.flows.collect import collect_flow
from campflow.flows.evaluate import evaluate_flow
from campflow.flows.runners import task_runner
from campflow.flows.teachers import collect_teachers
from campflow.report.facts import cycle_facts
from campflow.report.page import write_report
from campflow.serving import CheckpointServers
from campflow.storage import cycles
from campflow.storage.schema import RETRYABLE_SQL
from campflow.storage.store import Store
from campflow.storage.workspace import Workspace
from campflow.tasks.synthesis import mine_failures_task, synthesize_task
from campflow.tasks.training import build_dataset_task, rl_task, sft_task, start_model_task
from campflow.training import checkpoints

STEPS = ("evaluate", "mine", "synthesize", "collect", "dataset", "sft", "rl", "re-evaluate", "variants",
         "report", "promote")


@dataclass
class CycleSummary:
    """The outcome of a cycle: the two figures, the decision and where the report is."""

    cycle_id: str
    model_id: str
    candidate_id: str
    metric: str
    before: float
    after: float
    promoted: bool
    pass_before: dict[str, float]
    pass_after: dict[str, float]
    report: Path


def _metric(store: Store, run_id: str, metric: str) -> float:
    column = "success::INTEGER" if metric == "pass_rate" else "reward"
    value = store.scalar(f"SELECT avg({column}) FROM episodes WHERE run_id = ? "
                         f"AND termination NOT IN {RETRYABLE_SQL}", [run_id])
    return float(value or 0.0)


@flow(name="improve", log_prints=False, validate_parameters=False)
@stopping.unwinding
def improve_flow(cfg: CampflowConfig, cycle_id: str | None = None, resume: bool = False) -> CycleSummary:
    """Run (or resume) one improvement cycle. ``cfg`` may also be a dict or a YAML path (a deployment's parameters)."""
    cfg = as_config(cfg)
    ws = Workspace.from_config(cfg)
    store = ws.store
    cfg = cfg.model_copy(deep=True)
    cfg.eval.bootcamps = ws.names(cfg.eval.bootcamps)  # a schedule's "all" or a typo is resolved here too
    cfg.training.bootcamps = list(cfg.eval.bootcamps)  # train on what is evaluated
    if resume:
        cycle = cycles.load(store, cycle_id) if cycle_id else cycles.latest_unfinished(store)
        if cycle is None:
            raise CampflowError("no unfinished cycle to resume; start one with `campflow improve`")
    else:
        cycle = cycles.start(store, cycle_id)
    state = cycle.state
    runner = task_runner(cfg.rollout)  # subflows fan out as the config says, not with Prefect's default
    # one server per checkpoint (serving: launch / endpoint), shared by the steps that evaluate it and
    # stopped when the cycle ends, however it ends; a resumed cycle starts its own
    servers = CheckpointServers(cfg)

    def served(path: Path) -> CampflowConfig:
        return servers.config(path)
    reporter = progress.current()
    reporter.start("cycle", f"cycle {cycle.cycle_id}", len(STEPS))
    reporter.advance("cycle", sum(1 for s in STEPS if s in state.get("done", [])))

    def done(step: str, **produced: object) -> None:
        produced["done"] = [*state.get("done", []), step]
        cycles.save_step(store, cycle, step, **produced)
        reporter.advance("cycle")
        reporter.update("cycle", f"cycle {cycle.cycle_id}: {step} done")

    def pending(step: str) -> bool:
        if step in state.get("done", []):
            return False
        reporter.update("cycle", f"cycle {cycle.cycle_id}: {step}")
        return True

    try:
        if "model" not in state:
            current = cycles.promoted_model(store) or start_model_task(cfg)
            cycle.base_model_id = current
            cycles.save_step(store, cycle, "start", model=current)
        model = checkpoints.get(store, state["model"])
        cycle.base_model_id = model.model_id
        before_run = f"{cycle.cycle_id}-before"
        if pending("evaluate"):
            evaluate_flow.with_options(task_runner=runner)(served(model.path), before_run)
            servers.check()  # a server that died mid-run: its infra_error episodes run again on resume
            done("evaluate", eval_before=before_run)
        if pending("mine"):
            clusters = mine_failures_task(cfg, before_run)
            done("mine", clusters=len(clusters))
        if pending("synthesize"):
            calibrating = served(model.path).policy if cfg.synthesis.calibration_samples else None
            summary = synthesize_task(cfg, before_run, calibrating)
            servers.check()
            variant_ids = [r["variant_id"] for r in store.query(
                "SELECT variant_id FROM variants WHERE run_id = ?", [summary["run_id"]])]
            done("synthesize", synthesis_run=summary["run_id"], variant_ids=variant_ids,
                 accepted=summary["accepted"])
        if pending("collect"):
            runs = collect_teachers(cfg, servers, model.path, cycle.cycle_id, runner)
            done("collect", collect_run=runs[0], collect_runs=runs)
        if pending("dataset"):
            done("dataset", dataset=build_dataset_task(cfg, state.get("collect_runs") or [state["collect_run"]],
                                                       str(model.path)))
        if pending("sft"):
            done("sft", sft_model=sft_task(cfg, model.model_id, state["dataset"]))
        if pending("rl"):
            done("rl", rl_model=rl_task(cfg, state["sft_model"]) if cfg.improve.rl else None)
        candidate = checkpoints.get(store, state["rl_model"] or state["sft_model"])
        after_run = f"{cycle.cycle_id}-after"
        if pending("re-evaluate"):
            evaluate_flow.with_options(task_runner=runner)(served(candidate.path), after_run)
            servers.check()
            done("re-evaluate", eval_after=after_run)
        if pending("variants"):
            variant_run = None
            if cfg.improve.eval_variants and state.get("variant_ids"):
                ids = [r["instance_id"] for r in store.query(
                    "SELECT instance_id FROM (SELECT unnest(instance_ids) AS instance_id FROM variants "
                    "WHERE status = 'accepted' AND variant_id IN (SELECT unnest(?))) ORDER BY instance_id LIMIT ?",
                    [state["variant_ids"], cfg.improve.variant_eval_n])]
                if ids:
                    variant_run = f"{cycle.cycle_id}-variants"
                    collect_flow.with_options(task_runner=runner)(served(candidate.path), variant_run,
                                                                  only_ids=ids, kind="evaluate_variants")
                    servers.check()
            done("variants", eval_variants=variant_run)
        metric = cfg.improve.metric
        before, after = _metric(store, before_run, metric), _metric(store, after_run, metric)
        promoted = after > before + cfg.improve.min_improvement
        cycles.decide(store, cycle, candidate=candidate.model_id, metric=metric, before=before, after=after,
                      promoted=promoted)
        if pending("report"):
            page = write_report(cycle_facts(store, cycle.cycle_id), cfg.improve.reports_dir / cycle.cycle_id)
            done("report", report=str(page))
        if pending("promote"):
            done("promote", promoted=promoted)
        cycles.finish(store, cycle)
    except BaseException as exc:
        signal_name = stopping.received()
        cycles.fail(store, cycle, f"stopped by {signal_name}" if signal_name else f"{type(exc).__name__}: {exc}")
        raise
    finally:
        servers.close()
    reporter.finish("cycle")
    facts = cycle_facts(store, cycle.cycle_id)
    return CycleSummary(cycle.cycle_id, model.model_id, candidate.model_id, metric, before, after, promoted,
                        facts.pass_before, facts.pass_after, Path(state["report"]))


def improve(cfg: CampflowConfig, cycle_id: str | None = None, resume: bool = False) -> CycleSummary:
    """Python API of ``campflow improve``."""
    return improve_flow.with_options(task_runner=task_runner(cfg.rollout))(cfg, cycle_id, resume)
