"""Failure mining and clustering: categories, signatures, idempotence, and planted failure modes recovered."""

from __future__ import annotations

import asyncio
import json

import pytest

from campflow.agents.oracle import NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.errors import RunNotFoundError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import MODEL_FAILURES, Episode, Termination
from campflow.storage.store import Store
from campflow.synthesis.clustering import cluster_failures, load_clusters
from campflow.synthesis.mining import failure_reason, mine_failures, signature
from campflow.synthesis.pipeline import analyze_run, failure_report, resolve_run
from tests.conftest import run_cli
from tests.planted import RUN_ID, record_planted_run

# ParsedCall.error_kind values (see its docstring)
ERROR_KINDS = {
    "invalid_json",
    "not_an_object",
    "unknown_tool",
    "missing_argument",
    "extra_argument",
    "wrong_type",
    "too_many_calls",
}


def _noisy_run(store: Store, names: list[str], n: int, run_id: str = "noisy", **noise) -> list[Episode]:
    specs, instances = [], []
    for name in names:
        b = registry.make(name)
        insts = eval_instances(b, n)
        instances += insts
        specs += [EpisodeSpec(b, i) for i in insts]
    store.write_instances(instances, split="eval")
    policy = NoisyOraclePolicy(**{"p_wrong_move": 0.2, "p_malformed": 0.3, "p_wrong_answer": 0.3, **noise})
    episodes = asyncio.run(run_episodes(specs, policy, run_id=run_id))
    store.write_episodes(episodes)
    return episodes


def _infra(episode: Episode, termination: Termination, sample: int) -> Episode:
    return Episode(
        run_id=episode.run_id,
        instance_id=episode.instance_id,
        bootcamp=episode.bootcamp,
        model_id=episode.model_id,
        sample=sample,
        reward=0.0,
        success=False,
        termination=termination,
        turns=0,
        tool_calls=0,
        invalid_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        latency_s=0.0,
        wall_s=0.0,
        transcript=[],
        error="endpoint down",
    )


def test_only_model_failures_are_mined_never_infra_errors_or_timeouts(store) -> None:
    episodes = _noisy_run(store, ["calculator", "maze"], 40)
    store.write_episodes([_infra(episodes[0], Termination.INFRA_ERROR, 7), _infra(episodes[1], Termination.TIMEOUT, 8)])
    summary = mine_failures(store, "noisy")
    expected = {e.id for e in episodes if e.termination in MODEL_FAILURES}
    mined = store.query("SELECT episode_id, category FROM failures WHERE run_id = 'noisy'")
    assert expected and {r["episode_id"] for r in mined} == expected and summary.failures == len(expected)
    assert not any(r["category"].startswith(("infra_error", "timeout", "solved")) for r in mined)


def test_categories_are_the_termination_plus_the_reward_reason_or_the_parsers_error_kind(store) -> None:
    episodes = {e.id: e for e in _noisy_run(store, ["calculator", "maze"], 60)}
    mine_failures(store, "noisy")
    rows = store.query("SELECT episode_id, category, signature, features FROM failures")
    seen = set()
    for r in rows:
        e = episodes[r["episode_id"]]
        termination, _, reason = r["category"].partition(":")
        assert termination == e.termination.value and r["signature"].startswith(r["category"])
        if e.termination in (Termination.WRONG_ANSWER, Termination.MAX_TURNS):
            assert reason == e.details["reason"]
        if e.termination == Termination.INVALID_TOOL_CALL:
            assert reason in ERROR_KINDS
        features = json.loads(r["features"])
        assert features["turns"] == e.turns and features["params"]["level"] == e.level
        seen.add(termination)
    assert {"wrong_answer", "invalid_tool_call"} <= seen


def test_a_text_tool_call_with_broken_json_is_an_invalid_json_failure() -> None:
    tools = {t.name: t for t in registry.make("calculator").tools(registry.make("calculator").generate(1, 0))}
    message = {"role": "assistant", "content": '<tool_call>{"name": "calculate", "arguments": {oops</tool_call>'}
    assert failure_reason(Termination.INVALID_TOOL_CALL, {}, None, message, tools) == "invalid_json"
    native = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "calculate", "arguments": "{}"}}],
    }
    assert failure_reason(Termination.INVALID_TOOL_CALL, {}, None, native, tools) == "missing_argument"
    assert failure_reason(Termination.FORMAT_ERROR, {}, "No tool call found.", {}, tools) == "no_tool_call"
    assert failure_reason(Termination.WRONG_ANSWER, {"reason": "Wrong Cell"}, None, {}, tools) == "wrong_cell"


def test_signatures_blank_numbers_and_quoted_names_so_alike_failures_share_them() -> None:
    a = signature("invalid_tool_call:unknown_tool", "solve", "unknown tool 'solve'; available: a, b (12 calls)")
    b = signature("invalid_tool_call:unknown_tool", "solve", "unknown tool 'fix'; available: a, b (7 calls)")
    assert a == b == "invalid_tool_call:unknown_tool|solve|unknown tool '_'; available: a, b (# calls)"


def test_mining_and_clustering_again_change_nothing(store) -> None:
    _noisy_run(store, ["calculator", "maze"], 40)
    first = analyze_run(store, "noisy")
    before = store.query("SELECT episode_id, category, cluster_id FROM failures ORDER BY episode_id")
    again = analyze_run(store, "noisy", refresh=True)
    assert [c.cluster_id for c in again.clusters] == [c.cluster_id for c in first.clusters]
    assert store.query("SELECT episode_id, category, cluster_id FROM failures ORDER BY episode_id") == before
    assert store.scalar("SELECT count(*) FROM clusters") == len(first.clusters)
    assert sum(c.size for c in first.clusters) == len(before)


def test_an_unknown_run_is_a_clear_error(store) -> None:
    with pytest.raises(RunNotFoundError, match="'nope' has no episodes"):
        mine_failures(store, "nope")
    with pytest.raises(RunNotFoundError, match="no episodes yet"):
        resolve_run(store)


@pytest.mark.parametrize("name", registry.names())
def test_every_bootcamp_mines_and_clusters_with_labelled_exemplars(name: str, store) -> None:
    b = registry.make(name)
    _noisy_run(store, [name], 8 * len(b.levels), p_wrong_answer=0.6)
    analysis = analyze_run(store, "noisy")
    failures = store.query("SELECT category, cluster_id FROM failures")
    assert failures and all(r["cluster_id"] for r in failures)
    assert sum(c.size for c in analysis.clusters) == len(failures)
    for c in analysis.clusters:
        assert c.bootcamp == name and c.label.startswith(c.traits["category"])
        assert set(c.exemplar_episode_ids) <= set(c.episode_ids) and c.exemplar_episode_ids


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("planted") / "campflow.duckdb")
    record_planted_run(store, n=400)
    return store


def test_planted_failure_modes_are_each_the_dominant_trait_of_some_cluster(planted: Store) -> None:
    analysis = analyze_run(planted, RUN_ID)
    dominant = {c.bootcamp: [] for c in analysis.clusters}
    for c in analysis.clusters:
        if c.traits["dominant"]:
            dominant[c.bootcamp].append(c.traits["dominant"])
    assert {"knob": "steps", "op": ">=", "lo": 3.0} in [
        {k: d[k] for k in ("knob", "op", "lo")} for d in dominant["calculator"]
    ], analysis.clusters
    assert any(d["knob"] in ("width", "height") and d["op"] == ">=" and d["lo"] == 9.0 for d in dominant["maze"]), (
        analysis.clusters
    )
    for c in analysis.clusters:  # no cluster is dominated by a knob the policy does not care about
        if c.traits["dominant"]:
            assert c.traits["dominant"]["knob"] in {"steps", "width", "height"}, c.label
    calculator = next(c for c in analysis.clusters if c.bootcamp == "calculator" and c.traits["dominant"])
    assert "steps>=3" in calculator.label


def test_clusters_referenced_by_variants_survive_reclustering(planted: Store) -> None:
    analyze_run(planted, RUN_ID)
    kept = load_clusters(planted, RUN_ID)[0]
    with planted.connection() as con:
        con.execute(
            "INSERT INTO variants (variant_id, cluster_id, bootcamp, synthesizer, status, created_at) "
            "VALUES ('v-test', ?, ?, 'mutate', 'rejected', now())",
            [kept.cluster_id, kept.bootcamp],
        )
    cluster_failures(planted, RUN_ID, max_clusters=1)
    assert kept.cluster_id not in {c.cluster_id for c in load_clusters(planted, RUN_ID)}
    assert planted.scalar("SELECT size FROM clusters WHERE cluster_id = ?", [kept.cluster_id]) == kept.size
    cluster_failures(planted, RUN_ID)  # back to the data's own choice for the tests after this one
    with planted.connection() as con:
        con.execute("DELETE FROM variants WHERE variant_id = 'v-test'")


def test_failure_report_and_the_failures_command_show_categories_and_clusters(planted: Store, tmp_path) -> None:
    analyze_run(planted, RUN_ID)
    categories, clusters = failure_report(planted, RUN_ID)
    assert sum(r["failures"] for r in categories) == planted.scalar("SELECT count(*) FROM failures")
    assert {r["cluster_id"] for r in clusters} == {c.cluster_id for c in load_clusters(planted, RUN_ID)}
    out = run_cli("failures", "--db", str(planted.path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "failure categories of planted" in out.stdout and "steps>=3" in out.stdout
    assert "wrong_answer:" in out.stdout and "clusters" in out.stdout
    missing = run_cli("failures", "--run", "nope", "--db", str(planted.path), cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "'nope' has no episodes" in missing.stderr
