"""A cycle's candidate is chosen on evidence: the RL checkpoint only when it beats its SFT checkpoint on the
held-out band by ``improve.rl_min_gain``, else the SFT checkpoint; the decision says which and why."""

from __future__ import annotations

import json

import pytest

from campflow.config import load_config
from campflow.storage.promotion import choose_candidate
from campflow.storage.query import run_sql
from tests.loop_config import write_tiny_config


def _effect(sft: float, rl: float) -> dict:
    return {"instances": 10, "samples": 4, "sft": sft, "rl": rl}


def test_rl_is_the_candidate_only_when_it_beats_sft_by_the_minimum_gain() -> None:
    assert choose_candidate("sft-1", "rl-1", _effect(0.4, 0.5), rl_min_gain=0.0).kind == "rl"
    assert choose_candidate("sft-1", "rl-1", _effect(0.4, 0.5), rl_min_gain=0.1).kind == "rl"
    assert choose_candidate("sft-1", "rl-1", _effect(0.4, 0.45), rl_min_gain=0.1).kind == "sft"
    tie = choose_candidate("sft-1", "rl-1", _effect(0.5, 0.5), rl_min_gain=0.0)
    assert (tie.kind, tie.model_id) == ("sft", "sft-1")  # a tie is no evidence for RL
    worse = choose_candidate("sft-1", "rl-1", _effect(0.494, 0.439), rl_min_gain=0.0)
    assert worse.model_id == "sft-1"
    assert "RL checkpoint scored 43.9%, the SFT checkpoint 49.4% (-5.5 ±" in worse.reason
    assert "improve.rl_min_gain = 0" in worse.reason


def test_without_rl_or_without_a_held_out_measurement_the_sft_checkpoint_is_the_candidate() -> None:
    assert choose_candidate("sft-1", None, None, rl_min_gain=0.0).reason == "the SFT checkpoint: RL did not run"
    unmeasured = choose_candidate("sft-1", "rl-1", None, rl_min_gain=0.0)
    assert unmeasured.model_id == "sft-1" and "not measured" in unmeasured.reason


@pytest.mark.usefixtures("prefect_harness")
def test_a_cycle_whose_rl_checkpoint_loses_on_the_held_out_band_evaluates_and_records_the_sft_checkpoint(
    tmp_path, monkeypatch
) -> None:
    """RL is planted to run (a band of two calibrated instances) and to lose (its band measurement)."""
    from campflow.flows import band
    from campflow.flows.improve import improve

    real_find_band = band.find_band

    def planted_band(cfg, runner, sft_path, run_id, levels):
        found = real_find_band(cfg, runner, sft_path, run_id, levels)
        ids = [
            r[0]
            for r in run_sql(
                cfg.workspace.db_path,
                f"SELECT DISTINCT instance_id FROM episodes WHERE run_id = '{run_id}' ORDER BY 1",
                wait_s=30,
            ).rows
        ]
        return band.Band(found.run_id, found.calibrated, ids[:1], ids[1:2])

    measured = []

    def planted_measure(cfg, runner, path, run_id, instance_ids):
        measured.append(run_id)
        return 0.25 if run_id.endswith("-band-rl") else 0.5

    monkeypatch.setattr(band, "find_band", planted_band)
    monkeypatch.setattr(band, "measure", planted_measure)
    config = write_tiny_config(
        tmp_path / "ws",
        eval__bootcamps=["calculator"],
        eval__n=2,
        eval__levels=[1],
        training__levels=[1],
        improve__curriculum_n=0,
        improve__eval_variants=False,
    )
    cfg = load_config(config, env={})
    summary = improve(cfg, cycle_id="c1")
    db = cfg.workspace.db_path

    def sql(query: str) -> list[tuple]:
        return run_sql(db, query, wait_s=30).rows

    assert measured == ["c1-band-sft", "c1-band-rl"]
    kinds = dict(sql("SELECT kind, model_id FROM checkpoints"))
    assert {"sft", "rl"} <= set(kinds)  # RL ran and produced a checkpoint ...
    candidate, decision, promoted = sql("SELECT candidate_model_id, decision, promoted FROM cycles")[0]
    assert candidate == summary.candidate_id == kinds["sft"]  # ... but the SFT checkpoint is the candidate
    (after_model,) = sql("SELECT DISTINCT model_id FROM runs WHERE run_id = 'c1-after'")[0]
    sft_path = sql(f"SELECT path FROM checkpoints WHERE model_id = '{kinds['sft']}'")[0][0]
    assert after_model in (kinds["sft"], sft_path)  # the eval split was played by the SFT checkpoint
    assert "candidate: the SFT checkpoint: on 1 held-out band instances" in decision
    assert "the RL checkpoint scored 25.0%, the SFT checkpoint 50.0%" in decision
    state = json.loads(sql("SELECT state FROM cycles")[0][0])
    assert state["candidate_kind"] == "sft" and state["candidate_reason"] in decision
    if promoted:
        assert sql("SELECT candidate_model_id FROM cycles WHERE promoted")[0][0] == kinds["sft"]
