"""InternBootcamp-style classes, written here, imported by dotted path or file path as bootcamps."""

from __future__ import annotations

import asyncio
import random
import textwrap
from pathlib import Path

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps.base import Action
from campflow.errors import ImportSourceError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec, build_bootcamp
from tests.policies import WrongAnswerPolicy

# Shaped like InternBootcamp's Basebootcamp subclasses: knobs in __init__, an instance-method
# case_generator using the global `random`, static prompt_func and extract_output, and a classmethod
# verify_score with InternBootcamp's penalties (which would fail every short submitted answer).
SOURCE = '''
import random
import re


class SumBootcamp:
    """Add up a list of whole numbers."""

    def __init__(self, count=3, max_value=20):
        self.count, self.max_value = count, max_value

    def case_generator(self):
        return {"numbers": [random.randint(1, self.max_value) for _ in range(self.count)]}

    @staticmethod
    def prompt_func(identity):
        numbers = " + ".join(str(n) for n in identity["numbers"])
        return f"What is {numbers}? Put the result inside [answer][/answer]."

    @staticmethod
    def extract_output(output):
        found = re.findall(r"\\[answer\\](.*?)\\[/answer\\]", output)
        return found[-1].strip() if found else None

    @classmethod
    def _verify_correction(cls, solution, identity):
        return solution == str(sum(identity["numbers"]))

    @classmethod
    def verify_score(cls, model_output, identity, format_score=0.1, short_penalty=True, short_threshold=100,
                     format_penalty=True):
        if short_penalty and len(model_output) < short_threshold:
            return 0.0
        solution = cls.extract_output(model_output)
        if solution is None:
            return 0.0
        return 1.0 if cls._verify_correction(solution, identity) else format_score

    def oracle_answer(self, identity):
        return f"[answer]{sum(identity['numbers'])}[/answer]"


class ParityBootcamp:
    """Say whether a number is even."""

    def case_generator(self):
        return {"n": random.randint(0, 1000)}

    def prompt_func(self, identity):
        return f"Is {identity['n']} even? Answer yes or no."

    def verify_score(self, model_output, identity):
        return model_output.strip().lower() == ("yes" if identity["n"] % 2 == 0 else "no")


class NoVerifier:
    def case_generator(self):
        return {}

    def prompt_func(self, identity):
        return "?"
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch) -> str:
    name = f"campflow_test_tasks_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def cls(source: str, **options):
    return build_bootcamp(ImportSpec(name="ib-test", adapter="internbootcamp", source=source, options=options))


def test_oracle_answer_scores_one_and_wrong_answers_score_less(module: str) -> None:
    b = cls(f"{module}:SumBootcamp")
    instances = [b.generate(level, seed) for level in sorted(b.levels) for seed in range(30)]
    solved = asyncio.run(run_episodes([EpisodeSpec(b, i) for i in instances], OraclePolicy()))
    assert {e.termination for e in solved} == {Termination.SOLVED} and {e.reward for e in solved} == {1.0}
    wrong = asyncio.run(run_episodes([EpisodeSpec(b, i) for i in instances], WrongAnswerPolicy()))
    assert {e.termination for e in wrong} == {Termination.WRONG_ANSWER} and max(e.reward for e in wrong) == 0.0


def test_penalties_are_off_and_extract_output_explains_a_failure(module: str) -> None:
    b = cls(f"{module}.SumBootcamp")
    instance = b.generate(1, 0)
    state = b.new_state(instance)
    b.apply(instance, state, Action("submit", {"answer": "[answer]-1[/answer]"}))
    score = b.score(instance, state, ())
    assert score.reward == pytest.approx(0.1) and not score.success, "the class's own format credit"
    assert score.details["extracted"] == "'-1'"


def test_constructor_arguments_are_the_params_and_options_set_them(module: str) -> None:
    b = cls(f"{module}:SumBootcamp", count=5)
    assert set(b.params_model.model_fields) == {"level", "count", "max_value"}
    assert all(p.count == 5 for p in b.levels.values())
    assert len(b.generate(1, 0).data["identity"]["numbers"]) == 5
    varied = b.generate({"level": 2, "count": 2, "max_value": 3}, 0)
    assert len(varied.data["identity"]["numbers"]) == 2 and max(varied.data["identity"]["numbers"]) <= 3
    with pytest.raises(ImportSourceError, match="takes no keyword argument 'size'"):
        cls(f"{module}:SumBootcamp", size=3)


def test_identities_are_reproducible_and_leave_the_global_random_state_alone(module: str) -> None:
    b = cls(f"{module}:SumBootcamp")
    random.seed(1)
    first = [b.generate(1, seed).data for seed in range(20)]
    after = random.random()
    random.seed(99)
    again = [b.generate(1, seed).data for seed in range(20)]
    assert first == again
    assert len({str(d["identity"]) for d in first}) >= 15
    random.seed(1)
    assert random.random() == after, "generation restores the caller's random state"


def test_a_file_path_works_like_a_dotted_path(module: str, tmp_path: Path) -> None:
    by_file = cls(f"{tmp_path / module}.py:SumBootcamp")
    by_name = cls(f"{module}:SumBootcamp")
    assert by_file.version == by_name.version
    assert by_file.generate(2, 5).data == by_name.generate(2, 5).data


def test_a_class_without_an_oracle_can_be_evaluated_but_not_solved(module: str) -> None:
    b = cls(f"{module}:ParityBootcamp")
    instance = b.generate(1, 0)
    answer = "yes" if instance.data["identity"]["n"] % 2 == 0 else "no"
    state = b.new_state(instance)
    b.apply(instance, state, Action("submit", {"answer": answer}))
    assert b.score(instance, state, ()).success, "a bool verify_score counts as 1.0"
    with pytest.raises(ImportSourceError, match="has no oracle_answer\\(identity\\) or solve\\(identity\\)"):
        b.oracle(instance, b.new_state(instance))
    episode = asyncio.run(run_episodes([EpisodeSpec(b, instance)], OraclePolicy()))[0]
    assert episode.termination == Termination.INFRA_ERROR, "teacher collection never learns from it"


def test_a_class_without_verify_score_is_one_clear_error(module: str) -> None:
    with pytest.raises(ImportSourceError, match=r"has no verify_score\(\); an InternBootcamp-style class needs"):
        cls(f"{module}:NoVerifier")


def test_unimportable_sources_are_clear_errors(module: str, tmp_path: Path) -> None:
    with pytest.raises(ImportSourceError, match="cannot import no_such_module_here"):
        cls("no_such_module_here:Task")
    with pytest.raises(ImportSourceError, match="has no class 'Missing'"):
        cls(f"{module}:Missing")
    with pytest.raises(ImportSourceError, match="does not exist"):
        cls(f"{tmp_path}/absent.py:Task")
