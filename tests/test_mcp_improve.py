"""One improvement cycle on an imported MCP bootcamp with the embedded model, RL included: the cycle's
evaluation, collection, calibration and GRPO all play the MCP server's tasks, each episode on its own server.

The cycle is the one `watch` starts when judged failures of a deployed agent cross the production threshold
(and not before), and it collects on the ledger task made from their cluster (``campflow proxy tasks``).

The tiny model's learnable band is usually empty (a few SFT steps solve nothing or everything), so the band
is planted on top of the real calibration, as tests/test_candidate_choice.py does: the first calibrated
instance becomes RL's prompt, the second the held-out one. Everything else is the cycle's own.
"""

from __future__ import annotations

import json
import sys

import pytest

from campflow.config import load_config
from campflow.storage.query import run_sql
from tests.loop_config import write_tiny_config
from tests.production_records import record_judged
from tests.test_mcp import LEDGER, LEDGER_TASKS, _servers_gone


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_one_cycle_on_an_imported_mcp_bootcamp_reaches_rl_and_leaves_no_server(tmp_path, monkeypatch) -> None:
    from campflow.flows import band
    from campflow.flows.watch import watch_flow
    from campflow.mcp.server import ServerSpec
    from campflow.mcp.tasks import parse_tasks
    from campflow.storage.imports import import_mcp_tasks
    from campflow.storage.store import Store

    pids = tmp_path / "pids"
    config = write_tiny_config(
        tmp_path / "ws",
        eval__bootcamps=["mcp-ledger"],
        eval__n=2,
        training__bootcamps=["mcp-ledger"],
        improve__curriculum_n=0,
        improve__eval_variants=False,
    )
    cfg = load_config(config, env={})
    rows = parse_tasks([json.dumps(t) for t in LEDGER_TASKS[:2]], "ledger.jsonl")
    server = ServerSpec(command=[sys.executable, LEDGER, "--seed", "{seed}", "--pid-file", str(pids)])
    import_mcp_tasks("mcp-ledger", server, rows, Store(cfg.workspace.db_path))

    real_find_band = band.find_band
    found_by_calibration = []

    def planted_band(cfg, runner, sft_path, run_id, levels):
        found = real_find_band(cfg, runner, sft_path, run_id, levels)
        found_by_calibration.append(found)
        ids = [
            r[0]
            for r in run_sql(
                cfg.workspace.db_path,
                f"SELECT DISTINCT instance_id FROM episodes WHERE run_id = '{run_id}' ORDER BY 1",
                wait_s=30,
            ).rows
        ]
        return band.Band(found.run_id, found.calibrated, ids[:1], ids[1:2])

    monkeypatch.setattr(band, "find_band", planted_band)
    accepted = _production_task(cfg)
    cfg.watch.threshold, cfg.watch.production_threshold = 10**6, 5
    assert watch_flow(cfg).started is None  # four judged failures: below the threshold
    cfg.watch.production_threshold = 4
    decision = watch_flow(cfg)
    assert decision.production.total == 4 and decision.started is not None
    summary = decision.started
    c1 = summary.cycle_id

    def sql(query: str) -> list[tuple]:
        return run_sql(cfg.workspace.db_path, query.replace("'c1-", f"'{c1}-"), wait_s=30).rows

    # the task made from production failures was collected on (the demonstrator's transcripts SFT trains on)
    assert accepted in json.loads(sql("SELECT state FROM cycles")[0][0])["variant_ids"]
    collected = sql(
        "SELECT count(*) FROM episodes e JOIN instances i USING (instance_id) "
        f"WHERE e.run_id = 'c1-collect' AND i.variant_id = '{accepted}'"
    )
    assert collected[0][0] > 0

    assert sql("SELECT status FROM cycles") == [("completed",)]
    assert found_by_calibration[0].calibrated > 0  # the band's calibration played the MCP bootcamp
    calibrated = sql("SELECT bootcamp, count(*) FROM episodes WHERE run_id = 'c1-rl-band' GROUP BY ALL")
    assert [b for b, _ in calibrated] == ["mcp-ledger"]
    kinds = {k: (m, metrics) for k, m, metrics in sql("SELECT kind, model_id, metrics FROM checkpoints")}
    assert {"base", "sft", "rl"} <= set(kinds)  # GRPO ran on the MCP bootcamp
    rl_metrics = json.loads(kinds["rl"][1])
    assert rl_metrics["steps"] == 1 and rl_metrics["instances"] == 1
    assert all(0.0 <= r <= 1.0 for _, r in rl_metrics["reward_curve"])
    state = json.loads(sql("SELECT state FROM cycles")[0][0])
    assert state["rl_model"] == kinds["rl"][0] and set(state["rl_effect"]) >= {"sft", "rl"}
    runs = dict(sql("SELECT run_id, kind FROM runs"))
    assert runs[f"{c1}-before"] == runs[f"{c1}-after"] == "evaluate" and runs[f"{c1}-band-rl"] == "calibrate"
    assert set(summary.pass_before) == set(summary.pass_after) == {"mcp-ledger"}
    infra = sql("SELECT count(*) FROM episodes WHERE termination = 'infra_error'")[0][0]
    assert infra == 0  # every episode had its server
    assert _servers_gone(pids) == []


def _production_task(cfg) -> str:
    """Four conversations of a deployed agent judged failed by the application, filed into a cluster, and a
    ledger task proposed from it (a scripted synthesis endpoint) and validated: its variant id."""
    from campflow.proxy.filing import file_judged
    from campflow.storage.store import Store
    from campflow.synthesis.from_production import synthesize_from_production
    from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint

    store = Store(cfg.workspace.db_path)
    asked = {"role": "user", "content": "Open an account for Bo with 12."}
    said = {"role": "assistant", "content": "Done, Bo has an account."}
    record_judged(store, {f"bank-{k}": (asked, said) for k in range(4)}, 0.0, "no account")
    filed = file_judged(store, cfg.production, cfg.synthesis)
    (cluster,) = [
        r["cluster_id"] for r in store.query("SELECT cluster_id FROM clusters WHERE run_id = ?", [filed.run_id])
    ]
    task = {
        "id": "open-bo",
        "level": 1,
        "prompt": "Open an account named bo with balance 12.",
        "reference": [{"tool": "open_account", "arguments": {"name": "bo", "balance": 12}}],
        "checks": [{"call": {"tool": "balances"}, "path": ["bo"], "equals": 12}],
    }
    synthesis = cfg.synthesis.model_copy(
        update={"synthesizer": "llm", "n_per_cluster": 1, "probes_per_variant": 0, "calibration_samples": 0}, deep=True
    )
    reply = json.dumps({"proposals": [{"params": {"level": 1, "row": task}, "rationale": "as in production"}]})
    with ScriptedEndpoint(ReplyScript([reply])) as server:
        synthesis.llm.model, synthesis.llm.base_url, synthesis.llm.max_requests = "scripted", server.url, 1
        summary = synthesize_from_production(store, cluster, "mcp-ledger", synthesis)
    assert summary.accepted == 1, summary
    return store.scalar("SELECT variant_id FROM variants WHERE synthesizer = 'llm-production' AND status = 'accepted'")
