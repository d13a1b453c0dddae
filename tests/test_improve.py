"""The improvement loop: one cycle end to end, resuming after SIGKILL and after SIGTERM, and watch's trigger."""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campflow.config import load_config
from campflow.storage.query import run_sql
from tests.conftest import run_cli
from tests.loop_config import write_tiny_config

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _sql(db: Path, query: str) -> list[tuple]:
    return run_sql(db, query, wait_s=30).rows


@pytest.fixture(scope="module")
def one_cycle(tmp_path_factory: pytest.TempPathFactory):
    """One cycle c1 of the tiny loop, completed (the tests of its record and of the commands that read it)."""
    from campflow.flows.improve import improve

    config = write_tiny_config(tmp_path_factory.mktemp("one-cycle") / "ws", improve__inspect_logs=True)
    cfg = load_config(config, env={})
    return config, cfg, improve(cfg, cycle_id="c1")


@pytest.mark.slow
def test_one_cycle_trains_reports_and_records_its_decision(one_cycle) -> None:
    _, cfg, summary = one_cycle
    db = cfg.workspace.db_path
    status, before, after, promoted, candidate, decision = _sql(
        db, "SELECT status, before_value, after_value, promoted, candidate_model_id, decision FROM cycles"
    )[0]
    assert status == "completed" and candidate == summary.candidate_id
    assert (before, after, promoted, decision) == (summary.before, summary.after, summary.promoted, summary.decision)
    assert decision.startswith("pass_rate ")
    assert (
        promoted
        or "not an improvement" in decision
        or "improve.max_regression" in decision
        or "improve.max_suspicious_increase" in decision
    )
    state = json.loads(_sql(db, "SELECT state FROM cycles")[0][0])
    kinds = dict(_sql(db, "SELECT kind, count(*) FROM checkpoints GROUP BY kind"))
    trained_rl = bool(state["rl_prompts"])  # RL runs only when the SFT checkpoint has a learnable band
    assert kinds == {"base": 1, "sft": 1, **({"rl": 1} if trained_rl else {})}
    lineage = _sql(db, f"SELECT kind FROM checkpoint_lineage WHERE model_id = '{candidate}' ORDER BY depth")
    chosen_rl = state["candidate_kind"] == "rl"  # RL is the candidate only when it beat SFT on held-out band
    assert not chosen_rl or (trained_rl and state["rl_effect"]["rl"] > state["rl_effect"]["sft"])
    assert [k for (k,) in lineage] == (["rl", "sft", "base"] if chosen_rl else ["sft", "base"])
    assert "candidate: the " in decision
    runs = dict(_sql(db, "SELECT run_id, kind FROM runs"))
    assert runs["c1-before"] == runs["c1-after"] == "evaluate" and runs["c1-collect"] == "collect"
    assert runs["c1-rl-band"] == "calibrate"
    outcomes = _sql(db, "SELECT outcome, count(*) FROM cycle_outcomes WHERE cycle_id = 'c1' GROUP BY ALL")
    assert sum(n for _, n in outcomes) == 12  # every eval-split instance, before vs after
    if state["probe_ids"]:
        assert runs["c1-probe-before"] == runs["c1-probe-after"] == "probe"
        probes = _sql(db, "SELECT sum(probes) FROM probe_outcomes WHERE cycle_id = 'c1'")[0][0]
        assert probes == len(state["probe_ids"])
    assert set(summary.pass_before) == set(summary.pass_after) == {"calculator", "maze"}
    page = summary.report
    assert page.name == "index.html" and page.exists()
    pngs = sorted(p.name for p in page.parent.glob("*.png"))
    assert {"pass_rates.png", "training.png", "outcomes.png"} <= set(pngs)
    for png in pngs:
        assert (page.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.read_text().count('<img src="data:image/png;base64,') >= len(pngs)  # the page stands alone
    text = page.read_text()
    assert "Status: completed" in text and html.escape(decision) in text
    assert " ± " in text  # every difference with its standard error
    from campflow.flows.improve import STEPS

    assert state["done"] == list(STEPS)
    logs = sorted(p.name for p in (page.parent / "inspect").glob("*.eval"))  # improve.inspect_logs
    assert {"c1-before.eval", "c1-after.eval", "c1-collect.eval"} <= set(logs)
    from prefect.artifacts import Artifact

    assert decision in Artifact.get("cycle-c1").data  # the cycle's decision in the Prefect UI
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:  # the flow run is named after its cycle
        named = FlowRunFilter(name=FlowRunFilterName(any_=["c1"]))  # not the first 200 of the session's runs
        assert client.read_flow_runs(flow_run_filter=named)


def _start(config: Path, *args: str, stderr: int = subprocess.STDOUT) -> subprocess.Popen:
    exe = Path(sys.executable).parent / "campflow"
    # its own process group, so a kill takes the Prefect API server it started along with it
    return subprocess.Popen(
        [str(exe), "improve", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _wait_until(proc: subprocess.Popen, condition, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the cycle ended before {what}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.2)
    _kill(proc)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_a_cycle_killed_during_evaluation_and_stopped_by_sigterm_during_sft_resumes_without_duplicates(
    tmp_path,
) -> None:
    ws = tmp_path / "ws"
    config = write_tiny_config(
        ws, eval__n=6, rollout__shard_size=2, rollout__concurrency=2, training__sft__max_steps=40
    )
    db = ws / "campflow.duckdb"

    def evaluating() -> bool:
        if not db.exists():
            return False
        rows = _sql(db, "SELECT count(*) FROM episodes WHERE run_id = 'k1-before'")
        return rows[0][0] > 0

    proc = _start(config, "--cycle-id", "k1")
    _wait_until(proc, evaluating, "the evaluation started writing episodes")
    _kill(proc)
    written = _sql(db, "SELECT count(*) FROM episodes WHERE run_id = 'k1-before'")[0][0]
    assert 0 < written < 12, "killed during the evaluation, not before or after it"

    def training() -> bool:
        return any(p.name.endswith(".partial") and p.name.startswith("sft-") for p in (ws / "models").glob("*"))

    proc = _start(config, "--resume", stderr=subprocess.PIPE)
    _wait_until(proc, lambda: (ws / "models").exists() and training(), "SFT started")
    time.sleep(1.0)
    # SIGTERM to the whole group, as a service manager stops a job: Prefect's API server goes down with it
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in out + err, err[-3000:]
    from campflow.flows.improve import STEPS

    assert err.splitlines() == [
        f"error: stopped by SIGTERM: cycle k1 stopped during step 'sft' ({STEPS.index('sft')} of {len(STEPS)} "
        f"steps done); resume with `campflow improve --resume --config {config}`"
    ], err[-3000:]
    step, state = _sql(db, "SELECT step, state FROM cycles")[0]
    assert step == "dataset" and json.loads(state)["error"] == "stopped by SIGTERM"

    proc = _start(config, "--resume")
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out[-3000:]
    assert "k1" in out and "report:" in out

    assert _sql(db, "SELECT status FROM cycles") == [("completed",)]
    per_run = dict(_sql(db, "SELECT run_id, count(*) FROM episodes GROUP BY run_id"))
    assert per_run["k1-before"] == per_run["k1-after"] == 12
    assert _sql(db, "SELECT count(*) - count(DISTINCT episode_id) FROM episodes") == [(0,)]
    assert _sql(db, "SELECT count(*) - count(DISTINCT variant_id) FROM variants") == [(0,)]
    assert _sql(db, "SELECT kind, count(*) FROM datasets GROUP BY kind") == [("sft", 1)]
    kinds = dict(_sql(db, "SELECT kind, count(*) FROM checkpoints GROUP BY kind"))
    assert kinds["base"] == kinds["sft"] == 1 and kinds.get("rl", 0) <= 1
    assert not list((ws / "models").glob("*.partial"))
    tables = [t for (t,) in _sql(db, "SELECT table_name FROM information_schema.tables")]
    for table in tables:
        _sql(db, f"SELECT count(*) FROM {table}")


@pytest.mark.slow
def test_two_cycles_run_the_second_from_the_firsts_promoted_model_and_a_kill_in_the_second_resumes_it(tmp_path) -> None:
    ws = tmp_path / "ws"
    config = write_tiny_config(
        ws,
        rollout__shard_size=2,
        improve__rl=False,
        improve__curriculum_n=2,
        training__collect_n=4,
        training__sft__max_steps=4,
    )
    db = ws / "campflow.duckdb"

    def second_evaluated() -> bool:
        rows = _sql(db, "SELECT state FROM cycles WHERE cycle_id = 'm-2'") if db.exists() else []
        return bool(rows) and "evaluate" in json.loads(rows[0][0]).get("done", [])

    proc = _start(config, "--cycles", "2", "--cycle-id", "m")
    _wait_until(proc, second_evaluated, "the second cycle evaluated its starting model", timeout=400)
    _kill(proc)
    assert _sql(db, "SELECT cycle_id, status FROM cycles ORDER BY cycle_id") == [
        ("m-1", "completed"),
        ("m-2", "running"),
    ]
    proc = _start(config, "--resume")
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out[-3000:]
    assert "cycle m-2" in out and "cycle m-1" not in out  # the resumed run finishes m-2 and nothing else

    rows = _sql(
        db,
        "SELECT cycle_id, status, base_model_id, candidate_model_id, promoted, decision FROM cycles ORDER BY cycle_id",
    )
    assert [(r[0], r[1]) for r in rows] == [("m-1", "completed"), ("m-2", "completed")]
    (_, _, base1, cand1, promoted1, decision1), (_, _, base2, _, _, decision2) = rows
    assert base2 == (cand1 if promoted1 else base1), "the second cycle starts from the last promoted model"
    assert decision1 and decision2
    per_run = dict(_sql(db, "SELECT run_id, count(*) FROM episodes GROUP BY run_id"))
    assert per_run["m-2-before"] == per_run["m-2-after"] == 12
    assert _sql(db, "SELECT count(*) - count(DISTINCT episode_id) FROM episodes") == [(0,)]
    assert _sql(db, "SELECT count(*) FROM curriculum WHERE run_id LIKE 'm-%-probe-after'")[0][0] > 0


@pytest.mark.slow
def test_watch_starts_no_cycle_below_the_threshold_and_exactly_one_above(tmp_path) -> None:
    from campflow.flows.evaluate import evaluate
    from campflow.flows.watch import watch_flow

    cfg = load_config(write_tiny_config(tmp_path / "ws"), env={})
    db = cfg.workspace.db_path
    noisy = cfg.model_copy(deep=True)
    noisy.policy.kind = "noisy"
    noisy.policy.noise.p_wrong_answer = 0.5
    evaluate(noisy, run_id="probe")
    failures = _sql(db, "SELECT coalesce(sum(failures), 0) FROM new_failures")[0][0]
    assert failures > 0

    cfg.watch.threshold = failures + 1
    decision = watch_flow(cfg)
    assert decision.started is None and decision.new_failures == failures
    assert _sql(db, "SELECT count(*) FROM cycles") == [(0,)]

    cfg.watch.threshold = failures
    decision = watch_flow(cfg)
    assert decision.started is not None
    assert _sql(db, "SELECT count(*) FROM cycles") == [(1,)]

    decision = watch_flow(cfg)  # the cycle's training reset the count
    assert decision.started is None and decision.new_failures == 0
    assert _sql(db, "SELECT count(*) FROM cycles") == [(1,)]
    assert [
        r[1] is not None
        for r in _sql(db, "SELECT decided_at, started_cycle_id FROM watch_decisions ORDER BY decided_at")
    ] == [False, True, False]


def test_report_command_writes_the_page_of_the_latest_cycle(one_cycle) -> None:
    config, _, _ = one_cycle
    out = run_cli("report", "--config", str(config))
    assert out.returncode == 0, out.stderr
    assert "cycle c1" in out.stdout and "index.html" in out.stdout
    cycles_out = run_cli("cycles", "--config", str(config))
    assert "c1" in cycles_out.stdout and "completed" in cycles_out.stdout
