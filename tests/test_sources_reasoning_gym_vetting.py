"""What the real reasoning-gym datasets teach an import: each test is a dataset the package ships with a defect."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.errors import ImportSourceError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec, build_bootcamp
from campflow.sources.probes import ChildClock
from campflow.storage.imports import import_bootcamp, recorded
from tests.conftest import run_cli
from tests.policies import WrongAnswerPolicy

pytest.importorskip("reasoning_gym")


@pytest.fixture(autouse=True)
def forget_imports():
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)


def rg(source: str, **options):
    return build_bootcamp(ImportSpec(name=f"rg-{source}", adapter="reasoning-gym", source=source, options=options))


def imported(store, source: str, options: dict | None = None, **kwargs):
    notes: list[str] = []
    spec, bootcamp = import_bootcamp(
        ImportSpec(name=f"rg-{source}", adapter="reasoning-gym", source=source, options=options or {}),
        store,
        say=notes.append,
        **kwargs,
    )
    return spec, bootcamp, notes


def questions_in_a_fresh_process(source: str, hash_seed: str) -> list[str]:
    code = (
        "import json, sys\nfrom campflow.sources import ImportSpec, build_bootcamp\n"
        "b = build_bootcamp(ImportSpec(name='rg-' + sys.argv[1], adapter='reasoning-gym', source=sys.argv[1]))\n"
        "print(json.dumps([b.generate(lv, s).data['question'] for lv in sorted(b.levels) for s in range(10)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, source],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )
    return json.loads(out.stdout.splitlines()[-1])  # codeio prints its generators' errors first


def test_composite_says_it_needs_its_datasets_and_mixes_the_ones_named(tmp_path: Path) -> None:
    with pytest.raises(ImportSourceError, match="composite dataset mixes other datasets and needs them named"):
        rg("composite")
    mixed = rg("composite", datasets=["gcd", {"name": "chain_sum", "weight": 2}])
    for seed in range(12):
        assert mixed.solve(mixed.generate(1, seed))[1].success
    with pytest.raises(ImportSourceError, match="'nope' is not a reasoning-gym dataset"):
        rg("composite", datasets=["nope"])
    bad = run_cli("import", "reasoning-gym", "composite", "--set", "datasets=[{nam: gcd}]", cwd=tmp_path)
    assert bad.returncode == 2 and "expected each a dataset name or an object" in bad.stderr, bad.stderr
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    ok = run_cli("import", "reasoning-gym", "composite", "--set", "datasets=[gcd, chain_sum]", cwd=tmp_path)
    assert ok.returncode == 0 and "imported rg-composite" in ok.stdout, ok.stderr


@pytest.mark.parametrize("source", ["list_functions", "codeio"])
def test_generators_that_draw_on_global_random_give_one_task_per_id(source: str) -> None:
    b = rg(source)
    here = [b.generate(lv, s).data["question"] for lv in sorted(b.levels) for s in range(10)]
    backwards = [b.generate(lv, s).data["question"] for lv in sorted(b.levels, reverse=True) for s in range(9, -1, -1)]
    assert backwards[::-1] == here, "the same ids in the other order are the same tasks"
    assert questions_in_a_fresh_process(source, "5") == here


@pytest.mark.parametrize("source", ["isomorphic_strings", "polynomial_multiplication", "ransom_note", "word_ladder"])
def test_a_dataset_that_depends_on_the_hash_seed_is_refused_naming_the_cause(store, source: str) -> None:
    with pytest.raises(
        ImportSourceError,
        match=f"'{source}' gives another task for the same instance in another process .*it depends on the hash seed",
    ):
        imported(store, source)
    assert recorded(store) == []


def test_a_scorer_that_rewards_any_answer_is_refused(store) -> None:
    with pytest.raises(
        ImportSourceError, match="'game_of_life_halting': its scorer gives full marks to answers that are no answer"
    ):
        imported(store, "game_of_life_halting")


@pytest.mark.parametrize(("source", "failing"), [("letter_jumble", [3, 4]), ("spell_backward", [5])])
def test_a_curriculum_level_that_fails_to_generate_is_dropped_not_the_dataset(
    store, source: str, failing: list[int]
) -> None:
    spec, b, notes = imported(store, source)
    assert [n.split(":")[0] for n in notes if "dropped" in n] == [f"level {lv} dropped" for lv in failing]
    assert recorded(store)[0].options["curriculum_levels"] == spec.options["curriculum_levels"]
    registry.unregister(spec.name)
    again = build_bootcamp(recorded(store)[0])
    for level in sorted(again.levels):
        for seed in range(10):
            assert again.solve(again.generate(level, seed))[1].success, (level, seed)


def test_a_level_that_never_finishes_generating_is_dropped(store) -> None:
    # levels 1-3 take ~1.3 s of CPU for their 4 instances, levels 4 and 5 never finish: 3 s tells them apart
    spec, b, notes = imported(store, "puzzle24", level_seconds=3)
    assert "level 4 dropped: did not finish generating 4 instances in 3 s" in notes
    assert spec.options["curriculum_levels"] == [0, 1, 2] and sorted(b.levels) == [1, 2, 3]


SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass\n"


def _pinned(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: os.sched_setaffinity(0, {0}))


def test_a_levels_clock_does_not_count_the_time_it_waits_behind_other_work() -> None:
    """The level budget is the child's own time: a child sharing one CPU with a busy neighbour gets at most
    about half of the wall time on its clock, while a child that sleeps (blocked, as a hung generator can be)
    gets all of it, so a level is dropped for its own slowness, never for a loaded machine's."""
    neighbour = _pinned(SPIN.format(s=8))
    try:
        spinner = _pinned(SPIN.format(s=3))
        clock, start = ChildClock(spinner.pid), time.monotonic()
        while spinner.poll() is None:
            own, wall = clock.seconds(), time.monotonic() - start
            time.sleep(0.05)
        assert wall > 2 and own < 0.8 * wall, (own, wall)
    finally:
        neighbour.kill()
        neighbour.wait()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    clock, start = ChildClock(sleeper.pid), time.monotonic()
    while sleeper.poll() is None:
        own, wall = clock.seconds(), time.monotonic() - start
        time.sleep(0.05)
    assert own > 0.6 * wall and wall > 1, (own, wall)


@pytest.mark.slow
def test_reference_answers_that_fail_their_own_scorer_are_never_submitted_by_the_oracle(store) -> None:
    # curriculum level 1 already has references that fail ("No solution"); level 2 would cost ~20 s of
    # generation, so the three levels are 0, 0 and 1, level 3 the one with such references
    _, b, notes = imported(store, "jugs", {"curriculum_levels": [0, 0, 1]}, cross_process=False)
    assert any(n.startswith("level 3: the source's reference answer fails its own scorer") for n in notes), notes
    instances = [b.generate(3, seed) for seed in range(6)]
    episodes = asyncio.run(run_episodes([EpisodeSpec(b, i) for i in instances], OraclePolicy()))
    by_reference = {
        (i.data["answer"] == '["No solution"]', e.termination) for i, e in zip(instances, episodes, strict=True)
    }
    assert (True, Termination.INFRA_ERROR) in by_reference and (False, Termination.SOLVED) in by_reference
    assert by_reference <= {(True, Termination.INFRA_ERROR), (False, Termination.SOLVED)}


def test_the_wrong_answer_of_a_dataset_without_references_stays_under_its_bound() -> None:
    b = rg("propositional_logic")
    specs = [EpisodeSpec(b, b.generate(level, seed)) for level in sorted(b.levels) for seed in range(5)]
    wrong = asyncio.run(run_episodes(specs, WrongAnswerPolicy()))
    assert max(e.reward for e in wrong) <= b.wrong_answer_bound
    assert {e.termination for e in wrong} == {Termination.WRONG_ANSWER}
