"""Experiment tracking: ``training.report_to`` as transformers names its integrations, and a run name.

The run name is the checkpoint id, so a run in TensorBoard, Trackio or W&B and the checkpoint row in
the store name each other. The loss and reward curves go into the store's metrics either way.
Trackers that write local files (TensorBoard's event files) write them under ``<workspace>/runs/<model
id>``, which outlives the run; without trackers the trainer writes into the staged checkpoint, and
that scratch folder is removed when the checkpoint completes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from campflow.errors import ConfigError


def tracking_args(report_to: Sequence[str], run_name: str) -> dict[str, Any]:
    """TRL/transformers arguments for ``report_to`` and ``run_name``, checked first so a typo or a missing
    package is one line (transformers would fail inside the trainer's constructor).

    Raises:
        ConfigError: a name transformers does not know, or whose package is not installed.
    """
    names = list(report_to)
    if names:
        from transformers.integrations import get_available_reporting_integrations
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        for name in names:
            if name not in INTEGRATION_TO_CALLBACK:
                raise ConfigError(
                    f"training.report_to: {name!r} is not a tracker transformers knows; expected "
                    f"some of {', '.join(sorted(INTEGRATION_TO_CALLBACK))}"
                )
            if name not in get_available_reporting_integrations():
                raise ConfigError(f"training.report_to: {name!r} is not installed here (pip install {name})")
    return {"report_to": names, "run_name": run_name}


def trainer_dir(workspace: Path, staged: Path, model_id: str, report_to: Sequence[str]) -> Path:
    """The trainer's ``output_dir``: ``<workspace>/runs/<model_id>`` with trackers, else scratch in ``staged``."""
    return workspace / "runs" / model_id if report_to else staged / "trainer"
