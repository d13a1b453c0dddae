"""bench_learning's decision rule (issue 40, item 5): it names the cycle's default recipe, so it is tested on
seed files made here, where the right answer is known by construction."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_learning.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    saved = dict(os.environ)  # the module sets a few variables for its runs on import
    spec = importlib.util.spec_from_file_location("bench_learning_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.environ.clear()
    os.environ.update(saved)
    return module


def seed_file(seed: int, val: dict[str, float], seconds: dict[str, float], resumed: int = 0) -> dict[str, Any]:
    """One seed's figures in the benchmark's own shape; eval split rates equal to validation's."""

    def rates(p: float) -> dict[str, Any]:
        return {"calculator/L1": [p, p], "maze/L1": [p, p], "overall": [p, p]}

    arms = {arm: {"pass1": rates(v), "pass8": {"overall": v}, "val": rates(v)} for arm, v in val.items()}
    return {"seed": seed, "arms": arms, "seconds": seconds, "resumed": resumed}


SECONDS = {"a": 400, "b": 400, "c": 560, "d": 1160, "e": 780, "f": 900}
BASE = {"a": 0.10, "b": 0.30, "c": 0.12, "e": 0.10, "f": 0.14}


def results(d_minus_b: list[float], seconds: dict[str, float] = SECONDS) -> list[dict[str, Any]]:
    """Five seeds where (d) leads (b) on validation by the given points per seed."""
    return [seed_file(i, {**BASE, "d": BASE["b"] + x / 100}, seconds) for i, x in enumerate(d_minus_b)]


def rule_line(bench: Any, found: list[dict[str, Any]], capsys: Any) -> str:
    bench.report(found)
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("RESULT default by the tie rule")]
    return line


def test_a_lead_inside_the_noise_goes_to_the_arm_that_trains_for_less(bench: Any, capsys: Any) -> None:
    line = rule_line(bench, results([12, -8, 6, -4, 4]), capsys)  # (d) leads by 2 points, interval covers zero
    assert "(b) SFT on twice the demonstrations" in line.split(";")[0], line
    assert "(b) 800 s, (d) 1560 s" in line, line  # (b): a + b; (d): a + d, its sampling included
    assert "(c)" not in line and "(e)" not in line  # shown below the leader: not contenders


def test_a_lead_shown_above_zero_keeps_the_leader_however_dear(bench: Any, capsys: Any) -> None:
    line = rule_line(bench, results([10, 12, 9, 11, 10]), capsys)
    assert "(d) expert iteration" in line.split(";")[0], line
    assert "contenders by training seconds a seed: (d) 1560 s" in line, line  # (b) is shown below: alone


def test_the_cheaper_leader_wins_a_tie_with_a_dearer_arm(bench: Any, capsys: Any) -> None:
    line = rule_line(bench, results([-2, 3, -5, 1, -1]), capsys)  # (b) leads, (d) inside its noise
    assert "(b) SFT on twice the demonstrations" in line.split(";")[0], line


def test_costs_come_from_the_seeds_that_ran_whole(bench: Any) -> None:
    found = results([1, 1, 1, 1, 1])
    found[0]["resumed"] = 1
    found[0]["seconds"] = {k: 0 for k in SECONDS}  # timed only after its cut: left out
    cost = bench.training_seconds(found)
    assert cost["f"] == SECONDS["a"] + SECONDS["c"] + SECONDS["f"] and cost["b"] == 800
    for r in found:
        r["resumed"] = 1
    assert bench.training_seconds(found) == {}  # no whole seed: no costs


def test_no_seed_run_whole_names_no_default(bench: Any, capsys: Any) -> None:
    found = results([1, 1, 1, 1, 1])
    for r in found:
        r["resumed"] = 1
    assert rule_line(bench, found, capsys).endswith("none: no seed ran whole, so no costs")
