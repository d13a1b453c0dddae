"""Gymnasium's toy-text environments imported as multi-turn step(action) bootcamps."""

from __future__ import annotations

import asyncio
import random

import pytest

from campflow.agents.oracle import NoisyOraclePolicy, OraclePolicy
from campflow.bootcamps.base import Action
from campflow.errors import ImportSourceError, InvalidParamsError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec, build_bootcamp
from campflow.sources.gym_envs import GymBootcamp
from tests.policies import WrongAnswerPolicy

pytest.importorskip("gymnasium")

PLANNED = ["FrozenLake-v1", "Taxi-v4", "CliffWalking-v1"]  # transition table known: value iteration
SEEDS = 30


def gym(env_id: str, **options) -> GymBootcamp:
    return build_bootcamp(ImportSpec(name=f"gym-{env_id}", adapter="gymnasium", source=env_id, options=options))


def run(bootcamp, instances, policy):
    return asyncio.run(run_episodes([EpisodeSpec(bootcamp, i) for i in instances], policy))


@pytest.mark.parametrize("env_id", PLANNED)
def test_planner_oracle_solves_every_instance_of_every_level_with_full_reward(env_id: str) -> None:
    b = gym(env_id)
    assert len(b.levels) >= 3
    for level in sorted(b.levels):
        instances = [b.generate(level, seed) for seed in range(SEEDS)]
        episodes = run(b, instances, OraclePolicy())
        assert {e.termination for e in episodes} == {Termination.SOLVED}, level
        assert {e.reward for e in episodes} == {1.0}
        assert all(e.turns == i.data["optimal_steps"] for e, i in zip(episodes, instances))


@pytest.mark.parametrize("env_id", [*PLANNED, "Blackjack-v1"])
def test_wrong_answers_score_zero_and_noisy_play_earns_partial_credit(env_id: str) -> None:
    b = gym(env_id)
    instances = [b.generate(level, seed) for level in sorted(b.levels) for seed in range(10)]
    wrong = run(b, instances, WrongAnswerPolicy())
    assert {e.termination for e in wrong} == {Termination.WRONG_ANSWER} and {e.reward for e in wrong} == {0.0}
    noisy = run(b, instances, NoisyOraclePolicy(p_wrong_move=0.3, p_malformed=0.0, p_wrong_answer=0.0, seed=1))
    assert all(0.0 <= e.reward <= 1.0 for e in noisy)
    if env_id != "Blackjack-v1":
        assert any(e.reward < 1.0 for e in noisy)


def test_step_schema_comes_from_the_action_space_with_named_actions() -> None:
    b = gym("FrozenLake-v1")
    instance = b.generate(1, 0)
    step = next(t for t in b.tools(instance) if t.name == "step")
    prop = step.schema()["function"]["parameters"]["properties"]["action"]
    assert prop["type"] == "integer" and "0 = left, 1 = down, 2 = right, 3 = up" in prop["description"]
    assert step.args_model(action=3).action == 3
    with pytest.raises(ValueError):
        step.args_model(action=4)
    assert [t.name for t in b.tools(instance)] == ["step", "stop"] and b.is_final("stop")


def test_frozen_lake_maps_come_from_size_and_seed_and_episodes_replay_exactly() -> None:
    b = gym("FrozenLake-v1")
    assert [b.levels[lv].size for lv in sorted(b.levels)] == [4, 6, 8]
    assert not any(p.is_slippery for p in b.levels.values()), "property-checked levels are deterministic"
    maps = {tuple(b.generate(3, seed).data["kwargs"]["desc"]) for seed in range(10)}
    assert len(maps) == 10 and all(len(m) == 8 for m in maps)
    instance = b.generate(2, 7)
    assert b.generate(2, 7).data == instance.data
    first, second = (
        run(b, [instance], NoisyOraclePolicy(p_wrong_move=0.5, p_malformed=0, p_wrong_answer=0))[0] for _ in range(2)
    )
    assert first.transcript == second.transcript
    big = b.generate({**b.levels[1].model_dump(), "size": 10}, 0)
    assert len(big.data["kwargs"]["desc"]) == 10 and "You (@) are at row 0, column 0." in big.data["start"]
    with pytest.raises(InvalidParamsError, match="size = 40"):
        b.params({**b.levels[1].model_dump(), "size": 40})


def test_slippery_ice_is_a_knob_where_the_planner_is_a_good_policy_not_a_solver() -> None:
    b = gym("FrozenLake-v1", is_slippery=True)
    assert all(p.is_slippery for p in b.levels.values())
    episodes = run(b, [b.generate(1, seed) for seed in range(40)], OraclePolicy())
    wins = sum(e.success for e in episodes)
    assert 8 <= wins < 40, wins
    assert all(e.reward in (0.0, 1.0) for e in episodes)


def test_taxi_view_names_the_passenger_and_the_destination() -> None:
    b = gym("Taxi-v4")
    text = b.prompt(b.generate(1, 3))[1]["content"]
    assert "Taxi (@) at row" in text and "Passenger waiting at" in text and "Destination" in text
    assert "\x1b" not in text, "colour codes are stripped"
    assert "4 = pickup, 5 = dropoff" in b.prompt(b.generate(1, 3))[0]["content"]


def test_a_detour_still_succeeds_but_earns_less_than_the_optimum() -> None:
    b = gym("CliffWalking-v1")
    instance = b.generate(1, 0)
    state = b.new_state(instance)
    b.apply(instance, state, Action("step", {"action": 3}))  # left into the wall: a wasted step
    while not state.finished:
        b.apply(instance, state, b.oracle(instance, state))
    score = b.score(instance, state, ())
    assert score.success and 0.9 < score.reward < 1.0, score


def test_blackjack_strategy_wins_often_and_beats_always_hitting() -> None:
    b = gym("Blackjack-v1")
    instances = [b.generate(1, seed) for seed in range(300)]
    planned = run(b, instances, OraclePolicy())
    assert 0.35 <= sum(e.success for e in planned) / 300 <= 0.55
    assert {e.reward for e in planned} <= {0.0, 0.5, 1.0}

    always_hit = []
    for instance in instances:
        state = b.new_state(instance)
        while not state.finished:
            b.apply(instance, state, Action("step", {"action": 1}))
        always_hit.append(b.score(instance, state, ()).reward)
    assert sum(e.reward for e in planned) > sum(always_hit) + 30


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "MountainCarContinuous-v0"])
def test_continuous_action_spaces_are_rejected_with_one_clear_error(env_id: str) -> None:
    with pytest.raises(ImportSourceError, match=rf"{env_id} has continuous actions \(Box"):
        gym(env_id)


def test_unknown_and_deprecated_environments_are_clear_errors() -> None:
    with pytest.raises(ImportSourceError, match="gymnasium cannot make 'FrozenPond-v1'"):
        gym("FrozenPond-v1")
    with pytest.raises(ImportSourceError, match="Taxi-v4"):
        gym("Taxi-v3")
    with pytest.raises(ImportSourceError, match="has no knob 'slippery'"):
        gym("FrozenLake-v1", slippery=True)


def test_an_environment_without_a_model_or_strategy_can_be_played_but_has_no_oracle() -> None:
    b = gym("CartPole-v1")
    instance = b.generate(1, 0)
    assert instance.data["return_range"] == [0.0, 475.0], "reward_threshold scales the return"
    state = b.new_state(instance)
    with pytest.raises(ImportSourceError, match="no oracle"):
        b.oracle(instance, state)
    steps = 0
    while not state.finished and steps < 600:
        b.apply(instance, state, Action("step", {"action": random.Random(steps).randrange(2)}))
        steps += 1
    score = b.score(instance, state, ())
    assert 0.0 < score.reward < 0.2 and not score.success
