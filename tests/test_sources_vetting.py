"""What every import checks before it records a source: classes written here, each with one known defect."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.errors import ImportSourceError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec, build_bootcamp
from campflow.storage.imports import import_bootcamp, recorded
from tests.conftest import run_cli
from tests.policies import WrongAnswerPolicy

# Each class is sound but for the defect its docstring names.
SOURCE = '''
import os
import random


class Sound:
    """Name the larger of two numbers."""

    def __init__(self, top=50):
        self.top = top

    def case_generator(self):
        return {"a": random.randint(0, self.top), "b": random.randint(0, self.top)}

    def prompt_func(self, identity):
        return f"Which is larger, {identity['a']} or {identity['b']}?"

    def verify_score(self, model_output, identity):
        return model_output.strip() == str(max(identity["a"], identity["b"]))

    def oracle_answer(self, identity):
        return str(max(identity["a"], identity["b"]))


class HashOrdered(Sound):
    """Picks a word by the iteration order of a set of strings, which changes with the hash seed."""

    def case_generator(self):
        words = {"apple", "pear", "fig", "plum", "kiwi", "lime", "date", "yuzu"}
        return {"a": len(list(words)[0]) * random.randint(1, 9), "b": 3, "word": list(words)[0]}


class Entropic(Sound):
    """Draws from the operating system's entropy, which no seed reaches."""

    def case_generator(self):
        return {"a": int.from_bytes(os.urandom(4), "big"), "b": 0}


class Counting(Sound):
    """Keeps a counter on the class, so the n-th instance generated differs from the first."""

    made = 0

    def case_generator(self):
        Counting.made += 1
        return {"a": Counting.made, "b": 0}


class Generous(Sound):
    """Gives full marks to any answer that is not empty."""

    def verify_score(self, model_output, identity):
        return 1.0 if model_output.strip() else 0.0


class Lenient(Sound):
    """Gives 0.3 to every wrong answer, the empty one included."""

    def verify_score(self, model_output, identity):
        return 1.0 if model_output.strip() == str(max(identity["a"], identity["b"])) else 0.3


class WrongReference(Sound):
    """Its oracle answers -1 when the first number is even."""

    def oracle_answer(self, identity):
        return "-1" if identity["a"] % 2 == 0 else str(max(identity["a"], identity["b"]))


class Stuck(Sound):
    """Never finishes generating when top is 13, and fails when top is 7."""

    def case_generator(self):
        if self.top == 13:
            while True:
                pass
        if self.top == 7:
            raise ValueError("top 7 is unlucky")
        return super().case_generator()
'''


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch) -> str:
    name = f"campflow_vet_tasks_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture(autouse=True)
def forget_imports():
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)


def imported(store, source: str, *, options: dict | None = None, **kwargs) -> tuple[ImportSpec, object, list[str]]:
    notes: list[str] = []
    spec, bootcamp = import_bootcamp(
        ImportSpec(name="ib-vet", adapter="internbootcamp", source=source, options=options or {}),
        store,
        say=notes.append,
        **kwargs,
    )
    return spec, bootcamp, notes


def test_a_sound_class_is_recorded_as_given(store, tasks: str) -> None:
    spec, bootcamp, notes = imported(store, f"{tasks}:Sound")
    assert spec.options == {} and sorted(bootcamp.levels) == [1, 2, 3]
    assert [s.name for s in recorded(store)] == ["ib-vet"]
    assert any("no difficulty presets" in n for n in notes)


@pytest.mark.parametrize(
    ("cls", "cause"),
    [
        ("HashOrdered", "it depends on the hash seed"),
        ("Entropic", "differs even with the same hash seed and order"),
        ("Counting", "depends on the order instances are generated in"),
    ],
)
def test_a_task_that_differs_across_processes_is_refused_with_its_cause(
    store, tasks: str, cls: str, cause: str
) -> None:
    with pytest.raises(ImportSourceError, match="gives another task for the same instance in another process") as err:
        imported(store, f"{tasks}:{cls}")
    assert cause in str(err.value) and f"{tasks}:{cls}" in str(err.value)
    assert recorded(store) == [], "a refused import records nothing"


def test_without_the_process_check_state_kept_between_instances_is_still_caught(store, tasks: str) -> None:
    with pytest.raises(ImportSourceError, match="gives another task for the same instance when generated again"):
        imported(store, f"{tasks}:Counting", cross_process=False)
    spec, _, _ = imported(store, f"{tasks}:Sound", cross_process=False)
    assert spec.options == {}


def test_a_scorer_that_gives_full_marks_to_nonsense_is_refused(store, tasks: str) -> None:
    with pytest.raises(ImportSourceError, match="gives full marks to answers that are no answer .*'campflow probe"):
        imported(store, f"{tasks}:Generous")


def test_a_wrong_answer_above_the_declared_bound_raises_the_bound_on_record(store, tasks: str) -> None:
    spec, bootcamp, notes = imported(store, f"{tasks}:Lenient")
    assert spec.options == {"wrong_answer_bound": 0.3} and bootcamp.wrong_answer_bound == 0.3
    assert any("wrong answers score up to 0.3" in n for n in notes)
    registry.unregister("ib-vet")
    rebuilt = build_bootcamp(recorded(store)[0])
    episodes = asyncio.run(
        run_episodes([EpisodeSpec(rebuilt, rebuilt.generate(1, s)) for s in range(8)], WrongAnswerPolicy())
    )
    assert max(e.reward for e in episodes) <= rebuilt.wrong_answer_bound


def test_a_reference_that_fails_its_own_scorer_is_noted_and_the_oracle_skips_it(store, tasks: str) -> None:
    _, bootcamp, notes = imported(store, f"{tasks}:WrongReference")
    assert any("reference answer fails its own scorer" in n for n in notes)
    instances = [bootcamp.generate(1, s) for s in range(12)]
    episodes = asyncio.run(run_episodes([EpisodeSpec(bootcamp, i) for i in instances], OraclePolicy()))
    by_parity = {(i.data["identity"]["a"] % 2 == 0, e.termination) for i, e in zip(instances, episodes, strict=True)}
    assert by_parity <= {(True, Termination.INFRA_ERROR), (False, Termination.SOLVED)}, by_parity
    assert {t for _, t in by_parity} == {Termination.INFRA_ERROR, Termination.SOLVED}


def test_a_level_that_never_finishes_or_fails_is_dropped_and_the_rest_recorded(store, tasks: str) -> None:
    levels = [{"top": 10}, {"top": 13}, {"top": 20}, {"top": 7}, {"top": 40}]
    spec, bootcamp, notes = imported(store, f"{tasks}:Stuck", options={"levels": levels}, level_seconds=3)
    assert spec.options["levels"] == [{"top": 10}, {"top": 20}, {"top": 40}]
    assert [bootcamp.levels[lv].top for lv in sorted(bootcamp.levels)] == [10, 20, 40]
    assert "level 2 dropped: did not finish generating 4 instances in 3 s" in notes
    assert any(n.startswith("level 4 dropped: ValueError: top 7 is unlucky") for n in notes)
    assert recorded(store)[0].options == spec.options, "the levels left are the ones on record"


def test_a_class_whose_every_level_fails_is_refused_naming_each_level(store, tasks: str) -> None:
    with pytest.raises(ImportSourceError, match="no level generates .*level 1: ValueError: top 7 is unlucky"):
        imported(store, f"{tasks}:Stuck", options={"top": 7})


def test_the_command_line_prints_the_notes_and_refuses_on_one_line(tmp_path: Path, tasks: str) -> None:
    levels = tmp_path / "stuck_train.json"
    levels.write_text(json.dumps([{"top": 10}, {"top": 7}, {"top": 20}, {"top": 30, "unknown_knob": 1}]))
    env = {"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parent.parent}"}
    ok = run_cli("import", "class", f"{tasks}:Stuck", "--levels-from", str(levels), cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "note: level 2 dropped: ValueError: top 7 is unlucky" in ok.stdout
    assert "does not take unknown_knob" in ok.stdout and "imported ib-Stuck" in ok.stdout
    for argv, message in [
        (("class", f"{tasks}:HashOrdered"), "it depends on the hash seed"),
        (("class", f"{tasks}:Generous", "--no-process-check"), "gives full marks to answers that are no answer"),
        (("class", f"{tasks}:Sound", "--levels-from", str(tmp_path / "absent.json")), "absent.json"),
    ]:
        bad = run_cli("import", *argv, cwd=tmp_path, env=env)
        assert bad.returncode == 2 and message in bad.stderr, (argv, bad.stdout, bad.stderr)
        assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
