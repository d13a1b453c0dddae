"""The termination taxonomy lives in ``Termination`` and its two groups; views and queries derive from them."""

from __future__ import annotations

import re
from pathlib import Path

from campflow.bootcamps import registry
from campflow.rollout.episode import MODEL_FAILURES, RETRYABLE, Episode, Termination
from campflow.storage.schema import VIEWS
from campflow.storage.store import Store
from campflow.synthesis.curriculum import update_curriculum
from campflow.synthesis.traits import Population

PACKAGE = Path(__file__).resolve().parent.parent / "campflow"
COUNTED = [t for t in Termination if t not in RETRYABLE]  # what pass rates and populations count


def test_every_termination_is_solved_a_model_failure_or_retryable_and_only_one() -> None:
    for t in Termination:
        groups = [t == Termination.SOLVED, t.is_model_failure, t.is_retryable]
        assert groups.count(True) == 1, f"{t} belongs to {groups.count(True)} groups; expected exactly one"


def _one_episode_per_termination(store: Store) -> None:
    """A run of kind evaluate with one episode ending in each termination, all on one train instance."""
    instance = registry.make("calculator").generate(1, 0)
    store.write_instances([instance], split="train")
    store.start_run("r", "evaluate", {}, "m")
    store.write_episodes(
        [
            Episode(
                run_id="r",
                instance_id=instance.id,
                bootcamp="calculator",
                model_id="m",
                sample=n,
                reward=float(t == Termination.SOLVED),
                success=t == Termination.SOLVED,
                termination=t,
                turns=1,
                tool_calls=1,
                invalid_calls=0,
                prompt_tokens=0,
                completion_tokens=0,
                latency_s=0.0,
                wall_s=0.0,
                transcript=[],
                level=1,
            )
            for n, t in enumerate(Termination)
        ]
    )


def test_views_and_queries_put_every_termination_in_its_group(store: Store) -> None:
    _one_episode_per_termination(store)
    (rates,) = store.query("SELECT * FROM pass_rates")
    assert rates["episodes"] == len(Termination) and rates["solved"] == 1
    assert rates["model_failures"] == len(MODEL_FAILURES) and rates["infra_failures"] == len(RETRYABLE)
    assert rates["pass_rate"] == round(1 / len(COUNTED), 4)
    assert store.scalar("SELECT episodes FROM pass_rates_by_level") == len(COUNTED)
    mined = {Termination(r["termination"]) for r in store.query("SELECT termination FROM failure_summary")}
    assert mined == MODEL_FAILURES
    watched = {Termination(r["termination"]) for r in store.query("SELECT termination FROM new_failures")}
    assert watched == MODEL_FAILURES
    assert {sample for _, sample in store.completed_keys("r")} == {
        n for n, t in enumerate(Termination) if not t.is_retryable
    }
    population = Population.load(store, "r", "calculator")
    assert population.episodes.tolist() == [len(COUNTED)] and population.failures.tolist() == [len(MODEL_FAILURES)]
    (decision,) = update_curriculum(store, "r")
    assert decision.episodes == len(COUNTED)


def test_no_module_spells_out_a_list_of_terminations_by_hand() -> None:
    value = "|".join(t.value for t in Termination)
    hand_written = re.compile(rf"'({value})'\s*,\s*'({value})'")
    offenders = [
        f"{p.relative_to(PACKAGE.parent)}:{n}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "episode.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if hand_written.search(line)
    ]
    assert not offenders, f"take the list from rollout.episode (storage.schema.sql_values): {offenders}"
    assert all(f"'{t.value}'" in "".join(VIEWS.values()) for t in MODEL_FAILURES | RETRYABLE)


def test_an_existing_store_gets_the_current_view_definitions_when_it_is_opened(workspace: Path) -> None:
    store = Store(workspace / "c.duckdb")
    with store.connection() as con:  # as a store written by an older campflow would be
        con.execute("CREATE OR REPLACE VIEW pass_rates AS SELECT 1 AS stale")
        con.execute("UPDATE meta SET value = 'older' WHERE key = 'views'")
    store = Store(workspace / "c.duckdb")
    _one_episode_per_termination(store)
    assert store.scalar("SELECT infra_failures FROM pass_rates") == len(RETRYABLE)
