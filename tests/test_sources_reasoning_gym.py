"""reasoning-gym datasets (the real package from PyPI) imported as single-turn bootcamps."""

from __future__ import annotations

import asyncio
import random

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps.base import Params
from campflow.errors import ImportSourceError, InvalidParamsError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec, build_bootcamp
from campflow.sources.rgym import ReasoningGymBootcamp
from tests.policies import WrongAnswerPolicy

pytest.importorskip("reasoning_gym")

# arithmetic, counting, sorting, strings, logic with enum-typed config lists (aiw), and a dataset whose
# own curriculum declares invalid top levels (caesar_cipher)
DATASETS = [
    "basic_arithmetic",
    "chain_sum",
    "leg_counting",
    "gcd",
    "number_sorting",
    "word_sorting",
    "aiw",
    "caesar_cipher",
]
SEEDS = 25


def rg(source: str, **options) -> ReasoningGymBootcamp:
    return build_bootcamp(ImportSpec(name=f"rg-{source}", adapter="reasoning-gym", source=source, options=options))


@pytest.mark.parametrize("source", DATASETS)
def test_oracle_scores_one_and_a_wrong_answer_less_at_every_level(source: str) -> None:
    b = rg(source)
    assert len(b.levels) >= 3
    for level in sorted(b.levels):
        for seed in range(SEEDS):
            instance = b.generate(level, seed)
            _, score = b.solve(instance)
            assert score.reward == 1.0 and score.success, (source, level, seed, score.details)
            state = b.new_state(instance)
            b.apply(instance, state, b.wrong_answer(instance, state, random.Random(seed)))
            wrong = b.score(instance, state, ())
            assert wrong.reward < 1.0 and wrong.reward <= b.wrong_answer_bound and not wrong.success
            assert wrong.details["reason"] in {"mismatch", "partial", "scorer_error"}


def test_oracle_and_wrong_answers_through_the_rollout_engine() -> None:
    b = rg("basic_arithmetic")
    specs = [EpisodeSpec(b, b.generate(level, seed)) for level in sorted(b.levels) for seed in range(10)]
    solved = asyncio.run(run_episodes(specs, OraclePolicy()))
    assert {e.termination for e in solved} == {Termination.SOLVED} and {e.reward for e in solved} == {1.0}
    wrong = asyncio.run(run_episodes(specs, WrongAnswerPolicy()))
    assert {e.termination for e in wrong} == {Termination.WRONG_ANSWER}


def test_params_are_the_dataset_config_fields_checked_by_its_own_validate() -> None:
    b = rg("basic_arithmetic")
    fields = b.params_model.model_fields
    assert {"min_terms", "max_terms", "min_digits", "max_digits", "operators", "level"} <= set(fields)
    assert "seed" not in fields and "size" not in fields, "seed and size belong to campflow"
    schema = b.describe()["params_schema"]["properties"]
    assert schema["min_terms"]["minimum"] == 1, "the config's `min_terms > 0` becomes a bound"
    assert schema["format_style"]["enum"] == ["simple", "natural"]
    with pytest.raises(InvalidParamsError, match="max_terms must be >= min_terms"):
        b.params({"level": 1, "min_terms": 5, "max_terms": 2})
    with pytest.raises(InvalidParamsError, match="not a known field"):
        b.params({"level": 1, "seed": 3})
    varied = b.generate({**b.levels[1].model_dump(), "operators": ["*"]}, 0)
    assert "*" in varied.data["question"] and "+" not in varied.data["question"].split("=")[0]


def test_levels_follow_the_dataset_curriculum_and_grow_harder() -> None:
    b = rg("basic_arithmetic")
    terms = [b.levels[lv].max_terms for lv in sorted(b.levels)]
    digits = [b.levels[lv].max_digits for lv in sorted(b.levels)]
    assert terms == sorted(terms) and terms[0] < terms[-1]
    assert digits == sorted(digits) and digits[0] < digits[-1]
    caesar = rg("caesar_cipher")
    assert all(p.max_rotation <= 25 for p in caesar.levels.values()), "levels its validate() rejects are skipped"


def test_import_options_fix_a_knob_in_every_level_and_curriculum_levels_can_be_chosen() -> None:
    b = rg("basic_arithmetic", operators=["+"], allow_negation=False)
    assert all(p.operators == ["+"] and not p.allow_negation for p in b.levels.values())
    assert b.params_model().operators == ["+"], "options are the params' defaults too"
    spell = rg("spell_backward", curriculum_levels=[0, 1, 2])
    assert sorted(spell.levels) == [1, 2, 3]
    for level in spell.levels:
        assert spell.solve(spell.generate(level, 0))[1].success


def test_generation_is_deterministic_and_seeds_differ() -> None:
    b, again = rg("chain_sum"), rg("chain_sum")
    for seed in range(20):
        assert b.generate(2, seed).data == again.generate(2, seed).data
    assert len({b.generate(2, seed).data["question"] for seed in range(20)}) >= 15


def test_submit_accepts_a_number_and_version_names_the_package() -> None:
    import importlib.metadata

    b = rg("gcd")
    instance = b.generate(1, 0)
    state = b.new_state(instance)
    b.apply(instance, state, b.oracle(instance, state).__class__("submit", {"answer": int(instance.data["answer"])}))
    assert b.score(instance, state, ()).success
    assert b.version.endswith(importlib.metadata.version("reasoning-gym")) and b.version.startswith("rg")
    assert isinstance(b.levels[1], Params) and b.name == "rg-gcd"


def test_unknown_dataset_is_one_clear_error() -> None:
    with pytest.raises(ImportSourceError, match=r"no dataset 'basic_arithmetc'; did you mean basic_arithmetic"):
        rg("basic_arithmetc")


def test_unknown_config_field_and_a_config_the_dataset_rejects_are_clear_errors() -> None:
    with pytest.raises(ImportSourceError, match="has no config field 'max_term'"):
        rg("basic_arithmetic", max_term=3)
    with pytest.raises(ImportSourceError, match="unsupported operator"):
        rg("basic_arithmetic", operators=["^"])


def test_a_dataset_without_reference_answers_has_no_oracle_but_still_scores() -> None:
    b = rg("rush_hour")
    instance = b.generate(1, 0)
    with pytest.raises(ImportSourceError, match="no reference answer"):
        b.oracle(instance, b.new_state(instance))
    state = b.new_state(instance)
    b.apply(instance, state, b.wrong_answer(instance, state, random.Random(0)))
    wrong = b.score(instance, state, ())
    assert wrong.reward <= b.wrong_answer_bound and not wrong.success
