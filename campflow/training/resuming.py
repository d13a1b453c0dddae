"""Training that resumes mid-run: SFT and GRPO save a resumable checkpoint every ``training.save_steps``.

transformers' Trainer (which TRL's trainers are) saves ``checkpoint-<step>/`` in the trainer's output
folder: the weights, the optimizer and scheduler state, the RNG states of every generator it uses and
``trainer_state.json`` (the step, the log history). Only the last one is kept (``save_total_limit=1``).
The output folder lies in the checkpoint's staged ``.partial`` folder (or ``<workspace>/runs/<model
id>`` with trackers), whose name is the checkpoint's content id, so a run of the same training that
finds one there (``campflow improve --resume``, or the same ``campflow train sft`` again) continues
from it: same data order from that step on, same optimizer moments, same learning-rate schedule.

A checkpoint is complete when its ``trainer_state.json`` exists: transformers writes it last. A kill
during a save leaves an incomplete folder, which is removed; the run resumes from the one before.

The resumable checkpoints stay until the finished model is recorded in the store: a stop while the final model
is written (or between its folder's move into place and the store's row) loses no training. A run that finished
writes its metrics last (:data:`TRAINED`), so a rerun that finds the model in place but not recorded records it
instead of training again.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from campflow.serialization import from_json, to_json

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def save_every(save_steps: int | None, max_steps: int) -> int:
    """Steps between resumable saves: ``save_steps``, or a tenth of ``max_steps`` (at least 1)."""
    return save_steps if save_steps is not None else max(1, max_steps // 10)


def saving_args(save_steps: int | None, max_steps: int) -> dict[str, object]:
    """The Trainer arguments that save a resumable checkpoint every :func:`save_every` steps and keep the last."""
    return {"save_strategy": "steps", "save_steps": save_every(save_steps, max_steps), "save_total_limit": 1}


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint in a trainer's ``output_dir`` (incomplete ones are removed), or None."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    found = sorted(
        ((int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))),
        reverse=True,
    )
    for _, path in found:
        if (path / "trainer_state.json").exists():
            return path
        shutil.rmtree(path, ignore_errors=True)  # killed while it was being written
    return None


def drop_checkpoints(output_dir: Path) -> None:
    """Remove the resumable checkpoints of a run that completed (its final model is saved apart)."""
    folder = Path(output_dir)
    if folder.is_dir():
        for path in folder.iterdir():
            if path.is_dir() and _CHECKPOINT.match(path.name):
                shutil.rmtree(path, ignore_errors=True)


def resumed_step(checkpoint: Path | None) -> int | None:
    """The step a run resumed from (None: it started from step 0)."""
    return int(_CHECKPOINT.match(checkpoint.name).group(1)) if checkpoint is not None else None


TRAINED = "campflow-trained.json"  # in a model folder: the finished run's metrics, written after its model


def mark_trained(out: Path, metrics: Mapping[str, Any]) -> None:
    """Record in the staged model folder ``out``, last and atomically, that its run finished, with its metrics."""
    tmp = out / f"{TRAINED}.tmp"
    tmp.write_text(to_json(dict(metrics)))
    tmp.replace(out / TRAINED)


def finished_run(final: Path) -> dict[str, Any] | None:
    """The metrics of a run whose model was moved into place at ``final`` (None if there is none there)."""
    path = Path(final) / TRAINED
    return from_json(path.read_text()) if path.is_file() else None


def clear_trainer(final: Path, output_dir: Path) -> None:
    """Once the checkpoint at ``final`` is recorded: remove the trainer's resumable checkpoints (in
    ``output_dir``, which outlives the run when trackers keep it) and its scratch folder."""
    drop_checkpoints(output_dir)
    shutil.rmtree(Path(final) / "trainer", ignore_errors=True)
