"""Experiment tracking: trackers as transformers names them, the run named after the checkpoint, curves in the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from campflow.config import SFTSettings, TinyModelConfig, load_config
from campflow.errors import ConfigError
from campflow.training.tracking import tracking_args
from tests import fixed_chats


def test_tracking_is_off_by_default_and_the_run_is_named_after_the_checkpoint() -> None:
    assert load_config(None, {}, env={}).training.report_to == []
    assert tracking_args([], "sft-abc") == {"report_to": [], "run_name": "sft-abc"}


def test_an_unknown_tracker_is_one_line_naming_it_and_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"'tensorbored' is not a tracker transformers knows.*tensorboard.*wandb"):
        tracking_args(["tensorbored"], "sft-abc")


def test_a_tracker_that_is_not_installed_is_one_line_saying_how_to_install_it() -> None:
    from transformers.integrations import get_available_reporting_integrations

    missing = next(
        n for n in ("clearml", "neptune", "dvclive", "swanlab") if n not in get_available_reporting_integrations()
    )
    with pytest.raises(ConfigError, match=f"'{missing}' is not installed here \\(pip install {missing}\\)"):
        tracking_args([missing], "sft-abc")


def test_tensorboard_receives_the_loss_curve_the_store_keeps(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from campflow.storage.store import Store
    from campflow.training import checkpoints, tinymodel
    from campflow.training.sft import train_sft

    store = Store(tmp_path / "campflow.duckdb")
    tinymodel.build_tiny_model(
        tmp_path / "base",
        TinyModelConfig(**fixed_chats.TINY),
        ["fixed"],
        texts=fixed_chats.corpus(tinymodel.chat_template()),
    )
    checkpoints.register(store, "base-fixed", "base", tmp_path / "base")
    dataset = fixed_chats.save_sft_dataset(store, tmp_path / "ds")
    result = train_sft(
        store, tmp_path, "base-fixed", dataset, SFTSettings(max_steps=3, batch_size=4), report_to=["tensorboard"]
    )
    model_id = result.checkpoint.model_id
    events = list((tmp_path / "runs" / model_id).rglob("events.out.tfevents.*"))
    assert len(events) == 1, "the event file outlives the run, under <workspace>/runs/<checkpoint id>"
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    logged = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    stored = store.query("SELECT metrics FROM checkpoints WHERE model_id = ?", [model_id])[0]["metrics"]
    curve = __import__("json").loads(stored)["loss_curve"]
    assert [s for s, _ in logged] == [s for s, _ in curve] == [1, 2, 3]
    assert all(abs(a - b) < 1e-6 for (_, a), (_, b) in zip(logged, curve))
    assert f'"run_name": "{model_id}"' in acc.Tensors("args/text_summary")[0].tensor_proto.string_val[0].decode()
