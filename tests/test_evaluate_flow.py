"""The evaluate flow against a real OpenAI-compatible server on 127.0.0.1, healthy and faulty."""

from __future__ import annotations

import json

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.config import load_config
from campflow.flows.evaluate import evaluate
from campflow.storage.store import Store
from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _script(n: int, as_text: bool = False) -> OracleScript:
    return OracleScript(
        [i for b in ("calculator", "maze") for i in eval_instances(registry.make(b), n)], as_text=as_text
    )


def _config(workspace, url: str, **extra):
    overrides = {
        "workspace.path": str(workspace),
        "policy.kind": "openai",
        "policy.model": "scripted",
        "policy.base_url": url,
        "eval.bootcamps": ["calculator", "maze"],
        "eval.n": 50,
        "rollout.concurrency": 16,
        "rollout.shard_size": 25,
    }
    overrides.update(extra)
    return load_config(None, overrides)


def test_a_hundred_episodes_through_the_openai_client_land_in_the_store(workspace) -> None:
    with ScriptedEndpoint(_script(50)) as server:
        summary = evaluate(_config(workspace, server.url), run_id="healthy")
        requests, headers = server.requests, {k.lower(): v for k, v in server.last_headers.items()}
    # what the endpoint sees: JSON with the key; the SDK's platform telemetry headers are left out
    assert headers["content-type"] == "application/json" and headers["authorization"].startswith("Bearer ")
    assert not [
        h
        for h in headers
        if h.startswith("x-stainless-") and h not in ("x-stainless-retry-count", "x-stainless-read-timeout")
    ], headers
    store = Store(workspace / "campflow.duckdb")
    rows = store.query("SELECT termination, transcript, turns FROM episodes WHERE run_id = 'healthy'")
    assert len(rows) == 100 and summary.ran == 100
    assert {r["termination"] for r in rows} == {"solved"}
    assert sum(r["turns"] for r in rows) == requests
    for r in rows:
        transcript = json.loads(r["transcript"])
        calls = [c for m in transcript if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        observations = [m for m in transcript if m["role"] == "tool"]
        assert calls and len(observations) == len(calls)
        assert {o["tool_call_id"] for o in observations} == {c["id"] for c in calls}
    assert store.scalar("SELECT count(*) FROM instances WHERE split = 'eval'") == 100
    assert store.query("SELECT status FROM runs WHERE run_id = 'healthy'")[0]["status"] == "completed"


def test_faults_end_every_episode_and_a_rerun_completes_only_what_is_missing(workspace) -> None:
    cfg = _config(workspace, "", **{"policy.timeout": 0.5, "policy.max_retries": 1})
    with ScriptedEndpoint(_script(50, as_text=True), fail_rate=0.3, stall_rate=0.05, stall_s=2.0, seed=3) as server:
        cfg.policy.base_url = server.url
        first = evaluate(cfg, run_id="faulty")
        assert server.failures > 0 and server.stalls > 0
    store = Store(workspace / "campflow.duckdb")
    rows = store.query("SELECT instance_id, termination FROM episodes WHERE run_id = 'faulty'")
    assert len(rows) == 100 and first.ran == 100
    infra = {r["instance_id"] for r in rows if r["termination"] == "infra_error"}
    assert infra, "with 30% failures and one retry some episodes must run out of retries"
    assert {r["termination"] for r in rows} <= {"solved", "infra_error"}
    summary_terms = {r["termination"] for r in store.query("SELECT termination FROM failure_summary")}
    assert "infra_error" not in summary_terms
    kept = {(r["instance_id"], r["termination"]) for r in rows if r["termination"] != "infra_error"}

    with ScriptedEndpoint(_script(50, as_text=True)) as server:
        cfg.policy.base_url = server.url
        second = evaluate(cfg, run_id="faulty")
    assert second.ran == len(infra) and second.skipped == 100 - len(infra)
    rows = store.query("SELECT instance_id, termination FROM episodes WHERE run_id = 'faulty'")
    assert len(rows) == 100
    assert {r["termination"] for r in rows} == {"solved"}
    assert kept <= {(r["instance_id"], r["termination"]) for r in rows}


def test_a_bad_endpoint_url_gives_infra_errors_not_a_crash(workspace) -> None:
    cfg = _config(workspace, "http://127.0.0.1:9/v1", **{"eval.n": 3, "policy.timeout": 0.5, "policy.max_retries": 0})
    summary = evaluate(cfg, run_id="unreachable")
    assert summary.terminations == {"infra_error": 6}
    errors = Store(workspace / "campflow.duckdb").query("SELECT DISTINCT error FROM episodes")
    assert all("endpoint http://127.0.0.1:9/v1" in r["error"] for r in errors)


def test_a_noisy_oracle_evaluation_over_all_ten_bootcamps_fills_pass_rates(workspace) -> None:
    cfg = load_config(
        None,
        {
            "workspace.path": str(workspace),
            "policy.kind": "noisy",
            "eval.bootcamps": ["all"],
            "eval.n": 4,
            "rollout.shard_size": 8,
        },
        env={},
    )
    cfg.eval.bootcamps = registry.parse_names(cfg.eval.bootcamps)
    summary = evaluate(cfg, run_id="all-ten")
    builtin = [e.name for e in registry.entries() if e.origin == "builtin"]
    assert len(builtin) == 10 and summary.ran == 40
    store = Store(workspace / "campflow.duckdb")
    rows = store.query("SELECT bootcamp, episodes FROM pass_rates WHERE run_id = 'all-ten'")
    assert {r["bootcamp"] for r in rows} == set(builtin)
    assert all(r["episodes"] == 4 for r in rows)
    modalities = {
        r["bootcamp"]: r["n"]
        for r in store.query(
            "SELECT bootcamp, count(*) AS n FROM episodes WHERE transcript LIKE '%data:image/png;base64,%' "
            "GROUP BY bootcamp"
        )
    }
    assert set(modalities) == {"gridworld", "chart", "gui"}
