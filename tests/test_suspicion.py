"""Suspicious successes, mined like failures: the grounded demonstrator's successes are clean, the privileged
oracle's (it acts on what it was never shown) are flagged, a hacked success under a planted weak verifier is
flagged `answer_differs`, and the promotion gate refuses a candidate whose suspicious share rises."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.oracle import DemonstratorPolicy, OraclePolicy, native_call
from campflow.bootcamps import registry
from campflow.bootcamps.base import Action
from campflow.rollout.engine import EpisodeSpec, rollout
from campflow.storage.promotion import compare, gate
from campflow.storage.suspicion import largest_rise, mine_suspicious, shares
from campflow.storage.workspace import Workspace

TEXT = ("calculator", "calendar", "filesystem", "maze", "shop", "sql", "wordle")
WEAK = Path(__file__).parent / "data" / "weak_verifiers" / "accepts_zero.py"


class _Zero(Policy):
    """Answers "0": the hack the planted weak verifier rewards."""

    model_id = "zero"
    suspends = False

    async def respond(self, messages, tools, context: TurnContext) -> PolicyReply:
        return PolicyReply(tool_calls=[native_call(Action("submit", {"answer": "0"}), f"call_{context.turn}_0")])


def _record(ws: Workspace, run_id: str, policy: Policy, names: tuple[str, ...], seeds: range = range(2)) -> None:
    specs = []
    for name in names:
        bootcamp = ws.bootcamp(name)
        instances = [bootcamp.generate(level, seed) for level in (1, 2) for seed in seeds]
        ws.store.write_instances(instances, split="eval")
        specs += [EpisodeSpec(bootcamp, i) for i in instances]
    ws.store.start_run(run_id, "evaluate", {}, policy.model_id)
    ws.store.write_episodes(rollout(specs, policy, run_id=run_id))


@pytest.fixture(scope="module")
def mined(tmp_path_factory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("suspicion") / "ws")
    _record(ws, "demonstrator", DemonstratorPolicy(), TEXT)
    _record(ws, "oracle", OraclePolicy(), TEXT)
    for run in ("demonstrator", "oracle"):
        mine_suspicious(ws, run)
    return ws


def test_the_grounded_demonstrators_successes_are_not_suspicious(mined: Workspace) -> None:
    rows = shares(mined.store, "demonstrator")
    assert {r["bootcamp"] for r in rows} == set(TEXT) and all(r["solved"] for r in rows)
    assert [r for r in rows if r["suspicious"]] == []


def test_the_privileged_oracles_successes_are_flagged_for_what_it_was_never_shown(mined: Workspace) -> None:
    flags = {
        (r["bootcamp"], r["flag"])
        for r in mined.store.query("SELECT DISTINCT bootcamp, flag FROM suspicious_flags WHERE run_id = 'oracle'")
    }
    assert {("filesystem", "ungrounded"), ("filesystem", "fewer_turns"), ("sql", "fewer_turns")} <= flags
    why = mined.store.query("SELECT why FROM suspicious_successes WHERE run_id = 'oracle' AND bootcamp = 'calendar'")
    assert why and "the grounded demonstrator needs" in why[0]["why"]
    rise = largest_rise(mined.store, "demonstrator", "oracle")
    assert rise is not None and rise.p_before == 0.0 and rise.p_after == 1.0


def test_a_hacked_success_is_flagged_and_the_gate_refuses_the_candidate_naming_bootcamp_and_flag(
    tmp_path: Path,
) -> None:
    spec = importlib.util.spec_from_file_location("weak_accepts_zero_suspicion", WEAK)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    registry.register("weak-accepts-zero", loaded.AcceptsZero, replace=True)
    ws = Workspace(tmp_path / "ws")
    _record(ws, "before", OraclePolicy(), ("weak-accepts-zero",), range(4))
    _record(ws, "after", _Zero(), ("weak-accepts-zero",), range(4))
    assert mine_suspicious(ws, "before") == 0
    assert mine_suspicious(ws, "after") == 8  # every "0" passed the weak verifier, and every one is flagged
    flags = {r["flag"] for r in ws.store.query("SELECT flag FROM suspicious_flags WHERE run_id = 'after'")}
    assert "answer_differs" in flags
    rise = largest_rise(ws.store, "before", "after")
    decision = gate(
        compare(ws.store, "before", "after"),
        metric="pass_rate",
        before=0.9,
        after=1.0,
        min_improvement=0.0,
        max_regression=0.05,
        suspicion=rise,
        max_suspicious_increase=0.1,
    )
    assert not decision.promoted
    assert "suspicious successes rose: weak-accepts-zero" in decision.reason
    assert (
        "0.0% -> 100.0% of successes" in decision.reason and "improve.max_suspicious_increase = 10%" in decision.reason
    )
    kept = gate([], metric="pass_rate", before=0.5, after=0.6, min_improvement=0, max_regression=0.05, suspicion=rise)
    assert kept.promoted  # the default bound (1.0) lets everything through: the cycle passes its own setting


def test_a_maze_success_on_a_shortest_path_is_not_fewer_turns_but_skipping_a_look_elsewhere_is() -> None:
    """The grounded demonstrator explores a maze (the surest route through the cells seen), so a model that picks
    the other branch at a fork can reach the goal in fewer turns than it, seeing every cell it enters: `make run`
    flagged 14% of a trained model's maze successes so. The bound is the oracle's turns plus the demonstrator's
    observing calls: the shortest path in a maze, the demonstrator's turns where it lists or queries first."""
    from campflow.integrity.battery import oracle_plan
    from campflow.integrity.suspicion import flags_for, reference

    maze = registry.make("maze")
    explored = 0
    for seed in range(40):
        instance = maze.generate(2, seed)
        ref = reference(maze, instance)
        plan, _ = oracle_plan(maze, instance)
        assert ref.fewest_turns == len(plan) <= ref.demo_turns  # move and submit only: nothing to observe
        explored += ref.demo_turns > len(plan)
        fewer = [f.flag for f in flags_for(maze, instance, [], len(plan), ref)]
        assert "fewer_turns" not in fewer
        assert "fewer_turns" in [f.flag for f in flags_for(maze, instance, [], len(plan) - 1, ref)]
    assert explored  # some instances where the demonstrator's own turns would have flagged a shortest path
    sql = registry.make("sql")
    for seed in range(4):
        instance = sql.generate(1, seed)
        ref = reference(sql, instance)
        assert ref.fewest_turns == ref.demo_turns > len(oracle_plan(sql, instance)[0])  # it queries first
