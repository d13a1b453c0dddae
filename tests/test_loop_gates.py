"""What keeps the loop honest without running it: probes held out, the promotion gate, the curriculum."""

from __future__ import annotations

import asyncio
import json

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import train_instances
from campflow.config import load_config
from campflow.errors import SplitLeakError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Episode, Termination
from campflow.storage.promotion import Comparison, compare, gate, paired
from campflow.storage.store import Store
from campflow.synthesis.curriculum import train_levels, update_curriculum
from campflow.synthesis.proposals import Proposal
from campflow.synthesis.validate import (
    ValidationSettings,
    record_verdicts,
    validate_proposals,
)


def _accepted_variant(store: Store) -> tuple[str, list[str], list[str]]:
    """Validate and record one calculator variant; returns its id, train instance ids and probe ids."""
    proposal = Proposal("calculator", "c1", "test", {"steps": 2, "max_operand": 40, "operations": "+-", "level": 1})
    result = validate_proposals(
        store, [proposal], ValidationSettings(instances_per_variant=2, probes_per_variant=3, calibration_samples=0)
    )
    record_verdicts(store, result.verdicts, "synth")
    (verdict,) = result.accepted
    return verdict.variant_id, [i.id for i in verdict.instances], [i.id for i in verdict.probes]


def test_an_accepted_variant_records_probes_from_fresh_seeds_in_the_probe_split(store: Store) -> None:
    _, train, probes = _accepted_variant(store)
    assert len(train) == 2 and len(probes) == 3 and not set(train) & set(probes)
    splits = {r["split"]: r["n"] for r in store.query("SELECT split, count(*) AS n FROM instances GROUP BY split")}
    assert splits == {"train": 2, "probe": 3}
    assert store.probe_ids() == set(probes)


def test_a_planted_probe_never_reaches_a_dataset_a_collection_or_rl(store: Store, tmp_path) -> None:
    from campflow.flows.collect import collection_instances, variant_instances
    from campflow.storage.workspace import Workspace
    from campflow.training.filtering import build_sft_dataset
    from campflow.training.rl import rl_instances, train_rl

    vid, _, probes = _accepted_variant(store)
    calc = registry.make("calculator")
    rows = store.query("SELECT instance_id, params, seed FROM instances WHERE split = 'probe'")
    planted = [calc.generate(json.loads(r["params"]), r["seed"]) for r in rows]
    # the leak: a teacher run that played the probes next to an honest train instance
    store.start_run("leaky", "collect", {}, "oracle")
    honest = train_instances(calc, 1, seed=3, levels=[1])
    store.write_instances(honest + planted, split="train")  # a wrong record too: a probe stays a probe
    specs = [EpisodeSpec(calc, i) for i in planted + honest]
    store.write_episodes(asyncio.run(run_episodes(specs, OraclePolicy(), run_id="leaky")))
    cfg = load_config(None, {"workspace.path": str(store.path.parent)})
    build = build_sft_dataset(store, tmp_path, ["leaky"], cfg.training.filter)
    assert build.dropped["probe_split"] == 3 and build.rows == 1
    assert not {i.id for i in rl_instances(store, ["calculator"], 50, 0, [1])} & set(probes)
    with pytest.raises(SplitLeakError, match="probe instance"):
        train_rl(store, tmp_path, "no-such-model", ["calculator"], cfg.training.rl, instances=planted[:1])
    ws = Workspace.from_config(cfg)
    many = variant_instances(ws, "calculator", 40, [vid], skip=store.probe_ids())
    assert len(many) == 40 and not {i.id for _, i in many} & set(probes)
    cfg.synthesis.share, cfg.training.collect_n, cfg.training.bootcamps = 0.5, 10, ["calculator"]
    chosen, synthesized = collection_instances(cfg, ws, variant_ids=[vid], levels={"calculator": [1]})
    assert len(chosen) == 10 and len(synthesized) == 5 and set(synthesized.values()) == {vid}
    assert not {i.id for i in chosen} & set(probes)


def _cmp(bootcamp: str | None, level: int | None, before: float, after: float, n: int = 40) -> Comparison:
    return Comparison(bootcamp, level, n, before, n, after)


@pytest.mark.parametrize(
    "comparisons, before, after, promoted, says",
    [
        (
            [_cmp(None, None, 0.3, 0.5), _cmp("calculator", None, 0.2, 0.6), _cmp("maze", None, 0.4, 0.4)],
            0.3,
            0.5,
            True,
            "no bootcamp or level fell by more than improve.max_regression = 5%",
        ),
        (
            [_cmp(None, None, 0.3, 0.5), _cmp("calculator", None, 0.1, 0.9), _cmp("maze", None, 0.5, 0.1)],
            0.3,
            0.5,
            False,
            "but maze 50.0% -> 10.0% (-40.0 ± 9.2 points) fell by more than improve.max_regression = 5%",
        ),
        (
            [_cmp(None, None, 0.3, 0.4), _cmp("maze", None, 0.3, 0.4), _cmp("maze", 2, 0.5, 0.3, n=20)],
            0.3,
            0.4,
            False,
            "but maze level 2 50.0% -> 30.0%",
        ),
        (
            [_cmp(None, None, 0.3, 0.31), _cmp("maze", None, 0.3, 0.31)],
            0.3,
            0.31,
            False,
            "not an improvement of at least improve.min_improvement = 0.05",
        ),
        ([_cmp(None, None, 0.3, 0.3)], 0.3, 0.3, False, "not an improvement"),
    ],
)
def test_the_gate_promotes_only_a_gain_with_no_bootcamp_or_level_falling_past_the_bound(
    comparisons, before, after, promoted, says
) -> None:
    min_improvement = 0.05 if "0.05" in says else 0.0
    decision = gate(
        comparisons,
        metric="pass_rate",
        before=before,
        after=after,
        min_improvement=min_improvement,
        max_regression=0.05,
    )
    assert decision.promoted is promoted and says in decision.reason


def test_a_candidate_that_regresses_one_bootcamp_beyond_the_bound_is_not_promoted_and_says_why(store) -> None:
    calc, maze = registry.make("calculator"), registry.make("maze")
    instances = train_instances(calc, 20, seed=1, levels=[1]) + train_instances(maze, 10, seed=1, levels=[1])
    store.write_instances(instances, split="eval")
    for run in ("before", "after"):
        specs = [EpisodeSpec(registry.make(i.bootcamp), i) for i in instances]
        store.write_episodes(asyncio.run(run_episodes(specs, OraclePolicy(), run_id=run)))
    # before: calculator half solved, maze all; after: calculator all, maze 7 of 10 (overall 25 -> 27 of 30)
    store.query(
        "UPDATE episodes SET success = false, termination = 'wrong_answer' WHERE run_id = 'before' "
        "AND bootcamp = 'calculator' AND instance_id IN (SELECT instance_id FROM episodes WHERE "
        "run_id = 'before' AND bootcamp = 'calculator' ORDER BY instance_id LIMIT 10)"
    )
    store.query(
        "UPDATE episodes SET success = false, termination = 'wrong_answer' WHERE run_id = 'after' "
        "AND bootcamp = 'maze' AND instance_id IN (SELECT instance_id FROM episodes WHERE "
        "run_id = 'after' AND bootcamp = 'maze' ORDER BY instance_id LIMIT 3)"
    )
    comparisons = compare(store, "before", "after")
    overall = comparisons[0]
    assert overall.scope == "all" and (overall.p_before, overall.p_after) == (20 / 30, 27 / 30)
    decision = gate(
        comparisons,
        metric="pass_rate",
        before=overall.p_before,
        after=overall.p_after,
        min_improvement=0.0,
        max_regression=0.1,
    )
    assert not decision.promoted
    assert (
        "but maze 100.0% -> 70.0% (-30.0 ± 14.5 points) fell by more than improve.max_regression = 10%"
        in decision.reason
    )
    assert gate(
        comparisons,
        metric="pass_rate",
        before=overall.p_before,
        after=overall.p_after,
        min_improvement=0.0,
        max_regression=0.3,
    ).promoted


def test_the_curriculum_raises_the_train_levels_when_the_train_pass_rate_passes_curriculum_up(store) -> None:
    calc = registry.make("calculator")
    assert train_levels(store, "calculator", [1, 2, 3]) == [1]  # a fresh curriculum trains the lowest level
    checked = train_instances(calc, 10, seed=9, levels=[1])
    store.write_instances(checked, split="train")
    episodes = asyncio.run(run_episodes([EpisodeSpec(calc, i) for i in checked], OraclePolicy(), run_id="check"))
    store.write_episodes(episodes[:7])  # 7 of 7 measured pass: at or above up = 0.8
    (decision,) = [d for d in update_curriculum(store, "check", up=0.8, down=0.3) if not d.cluster_id]
    assert (decision.level, decision.next_level, decision.pass_rate) == (1, 2, 1.0)
    assert train_levels(store, "calculator", [1, 2, 3]) == [1, 2]  # the easier level stays rehearsed
    assert store.query("SELECT level FROM curriculum_levels WHERE bootcamp = 'calculator'") == [{"level": 2}]


def test_synthesis_rejects_a_variant_above_the_curriculum_level(store: Store) -> None:
    proposals = [
        Proposal("calculator", "c1", "test", {"steps": 3, "max_operand": 40, "operations": "+-", "level": lv})
        for lv in (1, 2)
    ]
    result = validate_proposals(
        store,
        proposals,
        ValidationSettings(instances_per_variant=1, calibration_samples=0, max_levels={"calculator": 1}),
    )
    kinds = {v.proposal.params["level"]: v.reject_kind for v in result.verdicts}
    assert kinds == {1: None, 2: "above_curriculum"}
    assert "level 2 is above calculator's curriculum level 1" in result.verdicts[1].reject_reason


def _episode(run_id: str, instance_id: str, outcome: str) -> Episode:
    term = {"pass": Termination.SOLVED, "fail": Termination.WRONG_ANSWER, "infra": Termination.INFRA_ERROR}[outcome]
    return Episode(run_id, instance_id, "calculator", "m", 0, float(outcome == "pass"), outcome == "pass", term,
                   1, 1, 0, 0, 0, 0.0, 0.0, [], level=1)  # fmt: skip


def test_paired_comparison_counts_where_two_runs_disagree_and_leaves_infra_failures_out(store: Store) -> None:
    a = ["pass", "pass", "pass", "fail", "fail", "pass"]
    b = ["pass", "fail", "fail", "pass", "fail", "infra"]
    for run_id, outcomes in (("a", a), ("b", b)):
        store.write_episodes([_episode(run_id, f"i{k}", o) for k, o in enumerate(outcomes)])
    p = paired(store, "a", "b")
    assert (p.n, p.both, p.a_only, p.b_only, p.neither) == (5, 1, 2, 1, 1)
    assert (p.p_a, p.p_b) == pytest.approx((0.6, 0.4))
    assert p.delta == pytest.approx(0.2)
    assert p.se == pytest.approx((0.112) ** 0.5)  # mean of (+1, +1, -1, 0, 0) = 0.2, variance 0.56, over 5
    assert p.se_independent == pytest.approx((0.24 / 5 + 0.24 / 5) ** 0.5)
    only = paired(store, "a", "b", ["i1", "i2"])
    assert (only.n, only.a_only, only.delta, only.se) == (2, 2, 1.0, 0.0)
    assert paired(store, "a", "no-such-run").n == 0
