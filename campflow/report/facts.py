"""What a cycle report shows, read from the store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from campflow.errors import CampflowError
from campflow.report.episodes import StoredEpisode, episode
from campflow.storage.promotion import Comparison, compare
from campflow.storage.store import Store

OUTCOMES = ("fixed", "regressed", "still_failing", "still_passing")  # the columns of cycle_outcome_counts


@dataclass
class ClusterExemplar:
    """A failure cluster of the starting model: one exemplar failure, and what the candidate did on the same
    instance (or, where it did not play that instance, on a probe of a variant aimed at the cluster)."""

    bootcamp: str
    cluster_id: str
    label: str
    size: int
    before: StoredEpisode
    after: StoredEpisode | None
    after_on: str  # "the same instance", "a probe of its variants", or "" when the candidate played neither


@dataclass
class CycleFacts:
    """Everything the report of one improvement cycle plots and tabulates."""

    cycle_id: str
    status: str
    step: str | None
    metric: str | None
    before_value: float | None
    after_value: float | None
    promoted: bool | None
    base_model_id: str | None
    candidate_model_id: str | None
    state: dict[str, Any]
    pass_before: dict[str, float] = field(default_factory=dict)
    pass_after: dict[str, float] = field(default_factory=dict)
    decision: str | None = None
    comparisons: list[Comparison] = field(default_factory=list)  # eval split: all, per bootcamp, per level
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)  # bootcamp -> outcome -> instances
    cluster_outcomes: list[dict[str, Any]] = field(default_factory=list)  # per failure cluster of the before-run
    probes: list[dict[str, Any]] = field(default_factory=list)  # per cluster: probes, pass before and after
    rl_effect: dict[str, Any] | None = None  # SFT vs RL checkpoint on held-out band instances
    suspicious: list[dict[str, Any]] = field(default_factory=list)  # per bootcamp: suspicious share before/after
    curriculum: dict[str, int] = field(default_factory=dict)  # the next train-side level per bootcamp
    failure_categories: list[tuple[str, str, int]] = field(default_factory=list)  # bootcamp, category, count
    clusters: list[tuple[str, str, int]] = field(default_factory=list)  # bootcamp, label, size
    variants: list[tuple[str, str, int]] = field(default_factory=list)  # status, reason, count
    sft_loss: list[tuple[int, float]] = field(default_factory=list)
    rl_reward: list[tuple[int, float]] = field(default_factory=list)
    history: list[tuple[str, float | None, float | None, bool | None]] = field(default_factory=list)
    exemplars: list[ClusterExemplar] = field(default_factory=list)  # per failure cluster of the before-run


def cycle_facts(store: Store, cycle_id: str | None = None) -> CycleFacts:
    """The facts of ``cycle_id`` (default: the latest cycle)."""
    if cycle_id is None:
        cycle_id = store.scalar("SELECT cycle_id FROM cycles ORDER BY started_at DESC LIMIT 1")
        if cycle_id is None:
            raise CampflowError("no improvement cycle has run yet; start one with `campflow improve`")
    rows = store.query("SELECT * FROM cycles WHERE cycle_id = ?", [cycle_id])
    if not rows:
        raise CampflowError(f'no cycle {cycle_id!r}; `campflow sql "SELECT cycle_id FROM cycles"` lists them')
    c = rows[0]
    state = json.loads(c["state"] or "{}")
    facts = CycleFacts(
        cycle_id,
        c["status"],
        c["step"],
        c["metric"],
        c["before_value"],
        c["after_value"],
        c["promoted"],
        c["base_model_id"],
        c["candidate_model_id"],
        state,
    )
    facts.pass_before = _pass_rates(store, state.get("eval_before"))
    facts.pass_after = _pass_rates(store, state.get("eval_after"))
    facts.decision = c.get("decision")
    facts.rl_effect = state.get("rl_effect")
    facts.curriculum = state.get("curriculum") or {}
    if state.get("eval_before") and state.get("eval_after"):
        facts.comparisons = compare(store, state["eval_before"], state["eval_after"])
        for r in store.query(
            "SELECT bootcamp, sum(fixed) AS fixed, sum(regressed) AS regressed, "
            "sum(still_failing) AS still_failing, sum(still_passing) AS still_passing "
            "FROM cycle_outcome_counts WHERE cycle_id = ? GROUP BY bootcamp ORDER BY bootcamp",
            [cycle_id],
        ):
            facts.outcomes[r["bootcamp"]] = {k: int(r[k] or 0) for k in OUTCOMES}
        facts.cluster_outcomes = store.query(
            "SELECT bootcamp, cluster_label, sum(instances) AS instances, sum(fixed) AS fixed, "
            "sum(still_failing) AS still_failing FROM cycle_outcome_counts WHERE cycle_id = ? "
            "AND cluster_id IS NOT NULL GROUP BY bootcamp, cluster_id, cluster_label ORDER BY bootcamp, instances DESC",
            [cycle_id],
        )
    if state.get("eval_before") and state.get("eval_after"):
        facts.suspicious = store.query(
            "SELECT bootcamp, sum(solved) FILTER (WHERE run_id = ?) AS solved_before, "
            "sum(suspicious) FILTER (WHERE run_id = ?) AS suspicious_before, "
            "sum(solved) FILTER (WHERE run_id = ?) AS solved_after, "
            "sum(suspicious) FILTER (WHERE run_id = ?) AS suspicious_after "
            "FROM suspicious_shares WHERE run_id IN (?, ?) GROUP BY bootcamp ORDER BY bootcamp",
            [state["eval_before"], state["eval_before"], state["eval_after"], state["eval_after"]]
            + [state["eval_before"], state["eval_after"]],
        )
    facts.probes = store.query(
        "SELECT bootcamp, cluster_label, count(*) AS variants, sum(probes) AS probes, "
        "sum(pass_before * probes) / sum(probes) AS pass_before, sum(pass_after * probes) / sum(probes) AS pass_after "
        "FROM probe_outcomes WHERE cycle_id = ? GROUP BY bootcamp, cluster_id, cluster_label "
        "ORDER BY bootcamp, probes DESC",
        [cycle_id],
    )
    if state.get("eval_before"):
        facts.failure_categories = [
            (r["bootcamp"], r["category"], int(r["n"]))
            for r in store.query(
                "SELECT bootcamp, category, count(*) AS n FROM failures WHERE run_id = ? "
                "GROUP BY bootcamp, category ORDER BY n DESC",
                [state["eval_before"]],
            )
        ]
        facts.clusters = [
            (r["bootcamp"], r["label"], int(r["size"]))
            for r in store.query(
                "SELECT bootcamp, label, size FROM clusters WHERE run_id = ? ORDER BY size DESC", [state["eval_before"]]
            )
        ]
    if state.get("variant_ids"):
        facts.variants = [
            (r["status"], r["reason"] or "", int(r["n"]))
            for r in store.query(
                "SELECT status, coalesce(reject_reason, '') AS reason, count(*) AS n FROM variants "
                "WHERE variant_id IN (SELECT unnest(?)) GROUP BY status, reason ORDER BY n DESC",
                [state["variant_ids"]],
            )
        ]
    for key, target in (("sft_model", "sft_loss"), ("rl_model", "rl_reward")):
        if state.get(key):
            metrics = json.loads(
                store.scalar("SELECT metrics FROM checkpoints WHERE model_id = ?", [state[key]]) or "{}"
            )
            curve = metrics.get("loss_curve" if target == "sft_loss" else "reward_curve") or []
            setattr(facts, target, [(int(s), float(v)) for s, v in curve])
    if state.get("eval_before"):
        facts.exemplars = cluster_exemplars(
            store, state["eval_before"], state.get("eval_after"), state.get("probe_after")
        )
    facts.history = [
        (r["cycle_id"], r["before_value"], r["after_value"], r["promoted"])
        for r in store.query(
            "SELECT cycle_id, before_value, after_value, promoted FROM cycles WHERE status = 'completed' "
            "ORDER BY started_at"
        )
    ]
    return facts


def _pass_rates(store: Store, run_id: str | None) -> dict[str, float]:
    if not run_id:
        return {}
    return {
        r["bootcamp"]: float(r["pass_rate"] or 0.0)
        for r in store.query("SELECT bootcamp, pass_rate FROM pass_rates WHERE run_id = ? ORDER BY bootcamp", [run_id])
    }


def cluster_exemplars(
    store: Store, before_run: str, after_run: str | None, probe_after: str | None = None, per_bootcamp: int = 4
) -> list[ClusterExemplar]:
    """Per failure cluster of ``before_run`` (the largest ``per_bootcamp`` of each bootcamp): its first exemplar,
    and the candidate's episode on the same instance in ``after_run`` or on a probe of the cluster's variants."""
    out: list[ClusterExemplar] = []
    taken: dict[str, int] = {}
    for c in store.query(
        "SELECT cluster_id, bootcamp, label, size, exemplar_episode_ids FROM clusters WHERE run_id = ? "
        "AND cluster_id IN (SELECT cluster_id FROM failures WHERE run_id = ?) ORDER BY bootcamp, size DESC, cluster_id",
        [before_run, before_run],
    ):
        if not c["exemplar_episode_ids"] or taken.get(c["bootcamp"], 0) >= per_bootcamp:
            continue
        taken[c["bootcamp"]] = taken.get(c["bootcamp"], 0) + 1
        before = episode(store, c["exemplar_episode_ids"][0])
        after_id = store.scalar(
            "SELECT episode_id FROM episodes WHERE run_id = ? AND instance_id = ? ORDER BY sample_index LIMIT 1",
            [after_run, before.instance_id],
        )
        after_on = "the same instance" if after_id else ""
        if after_id is None and probe_after:
            after_id = store.scalar(
                "SELECT e.episode_id FROM episodes e JOIN instances i USING (instance_id) "
                "JOIN variants v ON v.variant_id = i.variant_id WHERE e.run_id = ? AND v.cluster_id = ? "
                "ORDER BY e.instance_id, e.sample_index LIMIT 1",
                [probe_after, c["cluster_id"]],
            )
            after_on = "a probe of its variants" if after_id else ""
        out.append(
            ClusterExemplar(
                c["bootcamp"],
                c["cluster_id"],
                c["label"],
                int(c["size"]),
                before,
                episode(store, after_id) if after_id else None,
                after_on,
            )
        )
    return out
