"""Cluster labels tell one bootcamp's clusters apart: the separating trait is named, never two alike."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from campflow.synthesis.clustering import cluster_bootcamp
from campflow.synthesis.knobs import knobs_of
from campflow.synthesis.labels import separate_labels
from campflow.synthesis.mining import Failure
from campflow.synthesis.traits import Population

LEVEL_1 = {"level": 1, "steps": 1, "max_operand": 20, "operations": "+-", "distractors": 0}
LEVEL_3 = {"level": 3, "steps": 3, "max_operand": 100, "operations": "+-*", "distractors": 1}


def _failure(
    i: int, params: dict, turns: int = 2, category: str = "format_error:no_tool_call", tool: str = ""
) -> Failure:
    features = {"params": params, "level": params["level"], "turns": turns, "last_tool": tool}
    return Failure(f"e{i:03d}", "r", "calculator", f"i{i:03d}", category, category, features)


def _knobs():
    from campflow.bootcamps import registry

    return knobs_of(registry.make("calculator").params_model)


def test_two_clusters_of_the_same_category_at_two_levels_are_labelled_by_their_level() -> None:
    # what `make run` showed: two calculator clusters, both `format_error:no_tool_call (100%)`, one per level;
    # every episode failed, so no param stands out against the run and the labels had nothing to add
    failures = [_failure(i, LEVEL_1) for i in range(20)] + [_failure(20 + i, LEVEL_3, turns=4) for i in range(20)]
    population = Population([LEVEL_1, LEVEL_3], np.array([20.0, 20.0]), np.array([20.0, 20.0]))
    clusters = cluster_bootcamp("r", "calculator", failures, population, max_clusters=4)
    assert len(clusters) == 2
    labels = sorted(c.label for c in clusters)
    assert labels == ["format_error:no_tool_call (100%) · level 1", "format_error:no_tool_call (100%) · level 3"]
    assert {c.traits["separated_by"] for c in clusters} == {"level 1", "level 3"}


def _cluster(label: str = "wrong_answer (100%)") -> SimpleNamespace:
    return SimpleNamespace(label=label, traits={})


def test_without_a_level_between_them_a_param_then_the_failing_turn_then_a_number_separates_them() -> None:
    knobs = _knobs()
    same_level = {**LEVEL_3, "steps": 2}
    by_param = [_cluster(), _cluster()]
    separate_labels([(by_param[0], [_failure(1, LEVEL_3)]), (by_param[1], [_failure(2, same_level)])], knobs)
    assert [c.label for c in by_param] == ["wrong_answer (100%) · steps=3", "wrong_answer (100%) · steps=2"]
    by_turn = [_cluster(), _cluster()]
    separate_labels([(by_turn[0], [_failure(1, LEVEL_3, 2)]), (by_turn[1], [_failure(2, LEVEL_3, 5)])], knobs)
    assert [c.label for c in by_turn] == [
        "wrong_answer (100%) · failed at turn 2",
        "wrong_answer (100%) · failed at turn 5",
    ]
    alike = [_cluster(), _cluster(), _cluster("other")]
    separate_labels([(c, [_failure(i, LEVEL_3)]) for i, c in enumerate(alike)], knobs)
    assert [c.label for c in alike] == [
        "wrong_answer (100%) · 1 of 2",  # nothing tells them apart: numbered
        "wrong_answer (100%) · 2 of 2",
        "other",  # a label no other cluster has is left as it is
    ]
