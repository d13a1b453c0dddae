"""The ``improve`` flow: improvement cycles, each ending in a before/after report and a gated promotion.

One cycle: evaluate the current model on the eval split -> mine and cluster its failures -> synthesize
variants aimed at them (each with held-out probes) -> run the current model on the probes -> collect
teacher trajectories at the curriculum's levels, ``synthesis.share`` of them on the variants -> filter
-> SFT -> find the SFT checkpoint's learnable band -> RL on it -> measure SFT vs RL on held-out band
instances, the RL checkpoint the candidate only if it beats the SFT one there -> re-evaluate the candidate on the same eval split and on the probes -> step the curriculum
-> promote the candidate only if it passes the gate (:mod:`campflow.storage.promotion`) -> report.
``improve.cycles`` cycles run in a row, each from the last promoted model.

The steps are one table, :data:`CYCLE_STEPS`: (name, function) in order, each function taking the
cycle's :class:`CycleRun` and returning what it produced; the flow walks it (:data:`STEPS` is its names).

Every step's output lives in the store and is recorded in the cycle's state as soon as the step
completes; every step is idempotent (fixed run ids complete only what is missing, datasets and
checkpoints have content ids). So a cycle killed at any point resumes from its last completed step
(``campflow improve --resume``) without duplicating episodes, variants, datasets or checkpoints, and a
series of cycles continues with the cycles it has left.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from prefect import flow

from campflow import progress, stopping
from campflow.agents.vision import observation_mode, with_observation
from campflow.bootcamps.splits import train_instances
from campflow.config import CampflowConfig, as_config
from campflow.errors import CampflowError
from campflow.flows import band
from campflow.flows.collect import collect_flow
from campflow.flows.evaluate import evaluate_flow
from campflow.flows.runners import task_runner
from campflow.flows.teachers import collect_corrections, collect_teachers
from campflow.report.facts import cycle_facts
from campflow.report.inspect_log import cycle_runs, export_runs, require_inspect
from campflow.report.page import write_report
from campflow.serving import CheckpointServers
from campflow.storage import cycles, variants
from campflow.storage.lock import WorkspaceLock
from campflow.storage.promotion import CandidateChoice, Decision, choose_candidate, compare, gate, run_metric
from campflow.storage.store import Store
from campflow.storage.suspicion import largest_rise, mine_suspicious
from campflow.storage.workspace import Workspace
from campflow.synthesis.curriculum import current_level, train_levels
from campflow.tasks.artifacts import cycle_artifacts_task
from campflow.tasks.corrections import corrected_dataset_task
from campflow.tasks.synthesis import (
    mine_failures_task,
    synthesize_task,
    update_curriculum_task,
)
from campflow.tasks.training import (
    build_dataset_task,
    rl_task,
    sft_task,
    start_model_task,
)
from campflow.training import checkpoints


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
    decision: str = ""
    earlier: list[CycleSummary] = field(default_factory=list)  # the cycles before it in the same run


def _series(store: Store, cycle_id: str | None, resume: bool, count: int) -> tuple[cycles.Cycle, list[str]]:
    """The cycle to run now and the ids of the cycles of its series still to come after it."""
    if resume:
        cycle = cycles.load(store, cycle_id) if cycle_id else cycles.latest_unfinished(store)
        if cycle is None:
            last = cycles.latest_id(store)
            series = cycles.load(store, last).state.get("series") if last else None
            if not series or series["index"] >= len(series["ids"]) - 1:
                raise CampflowError("no unfinished cycle to resume; start one with `campflow improve`")
            nxt = series["index"] + 1  # killed between two cycles of a series: start the next one
            cycle = cycles.start(store, series["ids"][nxt])
            cycles.save_step(store, cycle, "start", series={"ids": series["ids"], "index": nxt})
        series = cycle.state.get("series") or {"ids": [cycle.cycle_id], "index": 0}
        return cycle, series["ids"][series["index"] + 1 :]
    base = cycle_id or cycles.new_cycle_id()
    ids = [base] if count == 1 else [f"{base}-{i}" for i in range(1, count + 1)]
    cycle = cycles.start(store, ids[0])
    cycles.save_step(store, cycle, "start", series={"ids": ids, "index": 0})
    return cycle, ids[1:]


def improve_run_name() -> str:
    """The flow run's name before the cycle is known: the cycle id a caller gave, else what it will do."""
    from prefect.runtime import flow_run

    parameters = flow_run.parameters or {}
    return parameters.get("cycle_id") or ("improve-resume" if parameters.get("resume") else "improve-new")


@flow(name="improve", flow_run_name=improve_run_name, log_prints=False, validate_parameters=False)
@stopping.unwinding
def improve_flow(
    cfg: CampflowConfig | str, cycle_id: str | None = None, resume: bool = False, cycles_n: int | None = None
) -> CycleSummary:
    """Run (or resume) ``cycles_n`` (default ``improve.cycles``) improvement cycles; returns the last's summary.

    ``cfg`` may also be a dict or a YAML path (a deployment's parameters). With more than one cycle their
    ids are ``<cycle_id>-1``, ``<cycle_id>-2``, ...; ``resume`` finishes the interrupted cycle and then
    runs the ones its series has left.
    """
    cfg = as_config(cfg)
    ws = Workspace.from_config(cfg)
    # one cycle at a time per workspace, for the whole series; re-entrant when the CLI holds it already
    with WorkspaceLock(cfg.workspace.db_path, cycle_id) as lock:
        if lock.taken_over is not None:
            progress.current().note(f"took over the workspace lock of {lock.taken_over.describe()}: it has ended")
        store = ws.store
        cfg = cfg.model_copy(deep=True)
        cfg.eval.bootcamps = ws.names(cfg.eval.bootcamps)  # a schedule's "all" or a typo is resolved here too
        cfg.training.bootcamps = list(cfg.eval.bootcamps)  # train on what is evaluated
        cycle, rest = _series(store, cycle_id, resume, cycles_n or cfg.improve.cycles)
        hold_for_cycle(lock, cycle.cycle_id)
        summaries = [_run_cycle(cfg, store, cycle)]
        for nxt in rest:
            series = cycle.state["series"]
            cycle = cycles.start(store, nxt)
            cycles.save_step(store, cycle, "start", series={"ids": series["ids"], "index": series["index"] + 1})
            hold_for_cycle(lock, cycle.cycle_id)
            summaries.append(_run_cycle(cfg, store, cycle))
    last = summaries[-1]
    last.earlier = summaries[:-1]
    return last


def hold_for_cycle(lock: WorkspaceLock, cycle_id: str) -> None:
    """Record ``cycle_id`` as the lock's holder and name the flow run after it (a resume's or a
    scheduled run's cycle id is known only now)."""
    lock.name(cycle_id)
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    if flow_run.id and flow_run.name != cycle_id:
        try:
            with get_client(sync_client=True) as client:
                client.update_flow_run(flow_run.id, name=cycle_id)
        except Exception as exc:  # noqa: BLE001 - a run's name is not worth a cycle
            progress.current().note(f"could not name the flow run {cycle_id}: {type(exc).__name__}: {exc}")


@dataclass
class Verdict:
    """The gate's reading of a cycle: the metric before and after, and the decision (on record)."""

    metric: str
    before: float
    after: float
    decision: Decision


@dataclass
class CycleRun:
    """What the steps of one cycle share: its config, store, record, task runner, servers and model.

    ``cycle.state`` holds what the completed steps produced; the candidate and the gate's verdict are
    read from it the first time a step needs them.
    """

    cfg: CampflowConfig
    store: Store
    cycle: cycles.Cycle
    runner: Any
    servers: CheckpointServers
    model: checkpoints.Checkpoint

    @property
    def state(self) -> dict[str, Any]:
        return self.cycle.state

    @property
    def levels(self) -> dict[str, list[int]]:
        return self.state["levels"]

    @property
    def before_run(self) -> str:
        return f"{self.cycle.cycle_id}-before"

    @property
    def after_run(self) -> str:
        return f"{self.cycle.cycle_id}-after"

    def served(self, path: Path) -> CampflowConfig:
        """The config whose policy is the checkpoint at ``path``, served as ``serving`` says."""
        return self.servers.config(path)

    @cached_property
    def sft(self) -> checkpoints.Checkpoint:
        return checkpoints.get(self.store, self.state["sft_model"])

    @cached_property
    def choice(self) -> CandidateChoice:
        """RL becomes the candidate only on evidence: it beat the SFT checkpoint on held-out band instances."""
        return choose_candidate(
            self.state["sft_model"],
            self.state["rl_model"],
            self.state.get("rl_effect"),
            rl_min_gain=self.cfg.improve.rl_min_gain,
        )

    @cached_property
    def candidate(self) -> checkpoints.Checkpoint:
        return checkpoints.get(self.store, self.choice.model_id)

    @cached_property
    def verdict(self) -> Verdict:
        """The gate on the before and after runs, recorded as the cycle's decision."""
        cfg, store = self.cfg, self.store
        metric = cfg.improve.metric
        before, after = run_metric(store, self.before_run, metric), run_metric(store, self.after_run, metric)
        ws = Workspace.from_config(cfg)
        for run in (self.before_run, self.after_run):  # successes a human should check, mined like failures
            mine_suspicious(ws, run)
        decision = gate(
            compare(store, self.before_run, self.after_run),
            metric=metric,
            before=before,
            after=after,
            min_improvement=cfg.improve.min_improvement,
            max_regression=cfg.improve.max_regression,
            suspicion=largest_rise(store, self.before_run, self.after_run),
            max_suspicious_increase=cfg.improve.max_suspicious_increase,
        )
        cycles.decide(
            store,
            self.cycle,
            candidate=self.candidate.model_id,
            metric=metric,
            before=before,
            after=after,
            promoted=decision.promoted,
            reason=f"{decision.reason}; candidate: {self.choice.reason}",
        )
        return Verdict(metric, before, after, decision)


def _evaluate(run: CycleRun) -> dict[str, Any]:
    evaluate_flow.with_options(task_runner=run.runner)(run.served(run.model.path), run.before_run)
    run.servers.check()  # a server that died mid-run: its infra_error episodes run again on resume
    return {"eval_before": run.before_run}


def _mine(run: CycleRun) -> dict[str, Any]:
    return {"clusters": len(mine_failures_task(run.cfg, run.before_run))}


def _synthesize(run: CycleRun) -> dict[str, Any]:
    calibrating = run.served(run.model.path).policy if run.cfg.synthesis.calibration_samples else None
    summary = synthesize_task(run.cfg, run.before_run, calibrating, {b: max(lv) for b, lv in run.levels.items()})
    run.servers.check()
    return {
        "synthesis_run": summary["run_id"],
        # this synthesis's variants, and the tasks made from production failures since the last cycle
        "variant_ids": variants.run_variant_ids(run.store, summary["run_id"])
        + variants.pending_production_ids(run.store, run.cfg.training.bootcamps, run.cycle.cycle_id),
        "accepted": summary["accepted"],
    }


def _probe_before(run: CycleRun) -> dict[str, Any]:
    ids = _probe_ids(run.store, run.cfg, run.state.get("variant_ids") or [])
    return {"probe_before": _play_probes(run, run.model.path, "probe-before", ids), "probe_ids": ids}


def _collect(run: CycleRun) -> dict[str, Any]:
    runs = collect_teachers(
        run.cfg,
        run.servers,
        run.model.path,
        run.cycle.cycle_id,
        run.runner,
        variant_ids=run.state.get("variant_ids") or [],
        levels=run.levels,
    )
    corrections = None
    if run.cfg.training.corrections.enabled:  # the model plays, the demonstrator labels its states (DAgger)
        corrections = collect_corrections(run.cfg, run.servers, run.model.path, run.cycle.cycle_id, levels=run.levels)
    return {"collect_run": runs[0], "collect_runs": runs, "corrections_run": corrections}


def _dataset(run: CycleRun) -> dict[str, Any]:
    collected = run.state.get("collect_runs") or [run.state["collect_run"]]
    if run.state.get("corrections_run"):
        return {
            "dataset": corrected_dataset_task(run.cfg, collected, run.state["corrections_run"], str(run.model.path))
        }
    return {"dataset": build_dataset_task(run.cfg, collected, str(run.model.path))}


def _sft(run: CycleRun) -> dict[str, Any]:
    return {"sft_model": sft_task(run.cfg, run.model.model_id, run.state["dataset"])}


def _rl_band(run: CycleRun) -> dict[str, Any]:
    found = (
        band.find_band(run.cfg, run.runner, run.sft.path, f"{run.cycle.cycle_id}-rl-band", run.levels)
        if run.cfg.improve.rl
        else None
    )
    return {
        "rl_band_run": found and found.run_id,
        "rl_calibrated": found and found.calibrated,
        "rl_prompts": found.prompts if found else [],
        "rl_holdout": found.holdout if found else [],
    }


def _rl(run: CycleRun) -> dict[str, Any]:
    # an empty band gives GRPO nothing to learn from (every group's rewards are equal): no RL then
    prompts = run.state["rl_prompts"]
    return {"rl_model": rl_task(run.cfg, run.state["sft_model"], prompts) if prompts else None}


def _rl_effect(run: CycleRun) -> dict[str, Any]:
    cfg, state, cycle_id = run.cfg, run.state, run.cycle.cycle_id
    effect = None
    if state["rl_model"] and state["rl_holdout"]:
        rl_path = checkpoints.get(run.store, state["rl_model"]).path
        effect = {
            "instances": len(state["rl_holdout"]),
            "samples": cfg.training.rl.band_samples,
            "sft": band.measure(cfg, run.runner, run.sft.path, f"{cycle_id}-band-sft", state["rl_holdout"]),
            "rl": band.measure(cfg, run.runner, rl_path, f"{cycle_id}-band-rl", state["rl_holdout"]),
        }
    chosen = choose_candidate(state["sft_model"], state["rl_model"], effect, rl_min_gain=cfg.improve.rl_min_gain)
    return {"rl_effect": effect, "candidate_kind": chosen.kind, "candidate_reason": chosen.reason}


def _re_evaluate(run: CycleRun) -> dict[str, Any]:
    evaluate_flow.with_options(task_runner=run.runner)(run.served(run.candidate.path), run.after_run)
    run.servers.check()
    return {"eval_after": run.after_run}


def _probe_after(run: CycleRun) -> dict[str, Any]:
    ids = list(run.state.get("probe_ids") or []) + _curriculum_check(run.cfg, run.store, run.cycle.cycle_id)
    return {"probe_after": _play_probes(run, run.candidate.path, "probe-after", ids)}


def _curriculum(run: CycleRun) -> dict[str, Any]:
    probed = run.state.get("probe_after")
    return {"curriculum": update_curriculum_task(run.cfg, probed) if probed else {}}


def _promote(run: CycleRun) -> dict[str, Any]:
    return {"promoted": run.verdict.decision.promoted}


def _report(run: CycleRun) -> dict[str, Any]:
    run.verdict  # noqa: B018 - the decision is on record before the page that shows it
    # the page is the cycle's last act: it shows the state that writing it completes
    facts = replace(cycle_facts(run.store, run.cycle.cycle_id), status="completed", step="report")
    page = write_report(facts, run.cfg.improve.reports_dir / run.cycle.cycle_id)
    if run.cfg.improve.inspect_logs:
        export_runs(run.store, cycle_runs(run.store, run.cycle.cycle_id, run.state), page.parent / "inspect")
    cycle_artifacts_task(facts, page)  # what the Prefect UI shows of the cycle
    return {"report": str(page)}


#: a cycle's steps in order: each runs unless the cycle's state says it is done, and what it returns
#: is recorded in that state (a resumed cycle starts at its first step not done)
CYCLE_STEPS: tuple[tuple[str, Callable[[CycleRun], dict[str, Any]]], ...] = (
    ("evaluate", _evaluate),
    ("mine", _mine),
    ("synthesize", _synthesize),
    ("probe-before", _probe_before),
    ("collect", _collect),
    ("dataset", _dataset),
    ("sft", _sft),
    ("rl-band", _rl_band),
    ("rl", _rl),
    ("rl-effect", _rl_effect),
    ("re-evaluate", _re_evaluate),
    ("probe-after", _probe_after),
    ("curriculum", _curriculum),
    ("promote", _promote),
    ("report", _report),
)
STEPS = tuple(name for name, _ in CYCLE_STEPS)


def _run_cycle(cfg: CampflowConfig, store: Store, cycle: cycles.Cycle) -> CycleSummary:
    """One cycle from its first step not yet done."""
    state = cycle.state
    if cfg.improve.inspect_logs:
        require_inspect()  # fail at the start, not after the training
    runner = task_runner(cfg.rollout)  # subflows fan out as the config says, not with Prefect's default
    # one server per checkpoint (serving: launch / endpoint), shared by the steps that evaluate it and
    # stopped when the cycle ends, however it ends; a resumed cycle starts its own
    servers = CheckpointServers(cfg)

    reporter = progress.current()
    reporter.start("cycle", f"cycle {cycle.cycle_id}", len(STEPS))
    reporter.advance("cycle", sum(1 for s in STEPS if s in state.get("done", [])))

    def done(step: str, **produced: object) -> None:
        produced["done"] = [*state.get("done", []), step]
        cycles.save_step(store, cycle, step, **produced)
        reporter.advance("cycle")
        reporter.update("cycle", f"cycle {cycle.cycle_id}: {step} done")
        reporter.note(f"cycle {cycle.cycle_id}: {step} done")  # a line per step, also in a log

    def pending(step: str) -> bool:
        if step in state.get("done", []):
            return False
        reporter.update("cycle", f"cycle {cycle.cycle_id}: {step}")
        reporter.note(f"cycle {cycle.cycle_id}: {step} ...")
        return True

    try:
        if "model" not in state:
            current = cycles.promoted_model(store) or start_model_task(cfg)
            cycle.base_model_id = current
            # the train-side levels are fixed for the whole cycle when it starts, so a resume keeps them
            levels = {b: train_levels(store, b, cfg.training.levels) for b in cfg.training.bootcamps}
            cycles.save_step(store, cycle, "start", model=current, levels=levels, agent=cfg.rollout.agent)
        model = checkpoints.get(store, state["model"])
        cycle.base_model_id = model.model_id
        if state.get("agent") and cfg.rollout.agent is None:  # a cycle of a user's agent resumes with that agent
            cfg = cfg.model_copy(deep=True)
            cfg.rollout.agent = state["agent"]
        # vision bootcamps in the mode this model reads, in every step (teachers and served checkpoints too)
        cfg = servers.cfg = with_observation(cfg, model.path)
        run = CycleRun(cfg, store, cycle, runner, servers, model)
        for name, step in CYCLE_STEPS:
            if pending(name):
                done(name, **step(run))
        verdict = run.verdict
        cycles.finish(store, cycle)
    except BaseException as exc:
        signal_name = stopping.received()
        cycles.fail(store, cycle, f"stopped by {signal_name}" if signal_name else f"{type(exc).__name__}: {exc}")
        raise
    finally:
        servers.close()
    reporter.finish("cycle")
    facts = cycle_facts(store, cycle.cycle_id)
    return CycleSummary(
        cycle.cycle_id,
        model.model_id,
        run.candidate.model_id,
        verdict.metric,
        verdict.before,
        verdict.after,
        verdict.decision.promoted,
        facts.pass_before,
        facts.pass_after,
        Path(state["report"]),
        f"{verdict.decision.reason}; candidate: {run.choice.reason}",
    )


def _play_probes(run: CycleRun, path: Path, label: str, ids: list[str]) -> str | None:
    """The checkpoint at ``path`` plays the probes ``ids`` as run ``<cycle>-<label>``; None when there are none."""
    if not ids:
        return None
    probe_run = f"{run.cycle.cycle_id}-{label}"
    collect_flow.with_options(task_runner=run.runner)(
        run.served(path), probe_run, only_ids=ids, kind="probe", samples=run.cfg.eval.samples
    )
    run.servers.check()
    return probe_run


def _probe_ids(store: Store, cfg: CampflowConfig, variant_ids: list[str]) -> list[str]:
    """The probes of this cycle's accepted variants (at most ``improve.variant_eval_n``), or none."""
    if not cfg.improve.eval_variants or not variant_ids:
        return []
    return variants.accepted_probe_ids(store, variant_ids, cfg.improve.variant_eval_n)


def _curriculum_check(cfg: CampflowConfig, store: Store, cycle_id: str) -> list[str]:
    """Fresh train instances at each bootcamp's curriculum level, recorded, for the candidate to play.

    Their seeds come from the cycle id, apart from the collection's, so the candidate has not trained on them.
    """
    ws = Workspace.from_config(cfg)
    out = []
    for b in ws.bootcamps(cfg.training.bootcamps):
        level = current_level(store, b.name)
        if cfg.improve.curriculum_n and level in b.levels:
            seed = int(hashlib.sha256(f"curriculum:{cycle_id}".encode()).hexdigest()[:12], 16)
            mode = observation_mode(cfg.rollout.observation, cfg.policy.kind, cfg.policy.model)
            made = train_instances(b, cfg.improve.curriculum_n, seed=seed, levels=[level], observation=mode)
            store.write_instances(made, split="train")
            out += [i.id for i in made]
    return out


def improve(
    cfg: CampflowConfig, cycle_id: str | None = None, resume: bool = False, cycles_n: int | None = None
) -> CycleSummary:
    """Python API of ``campflow improve``."""
    return improve_flow.with_options(task_runner=task_runner(cfg.rollout))(cfg, cycle_id, resume, cycles_n)
