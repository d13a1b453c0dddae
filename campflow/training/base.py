"""The ``base`` checkpoint: the embedded tiny model (or the tiny vision-language model), built once per
configuration and registered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from campflow.config import CampflowConfig
from campflow.hardware import resolve_hardware
from campflow.storage.store import Store
from campflow.training import checkpoints
from campflow.training.tinymodel import build_tiny_model
from campflow.training.tinyvlm import build_tiny_vlm


def ensure_base(store: Store, cfg: CampflowConfig) -> checkpoints.Checkpoint:
    """The registered base model for ``cfg.training`` (built now if it does not exist yet), saved in the
    training precision (float32 on a CPU)."""
    return _ensure(store, cfg, build_tiny_model, cfg.training.tiny, [])


def ensure_vision_base(store: Store, cfg: CampflowConfig) -> checkpoints.Checkpoint:
    """The registered tiny vision-language model for ``cfg.training`` (``training.tiny_vl``), built now if
    it does not exist yet, saved in the training precision."""
    return _ensure(store, cfg, build_tiny_vlm, cfg.training.tiny_vl, ["vision"])


def _ensure(
    store: Store, cfg: CampflowConfig, build: Callable[..., Any], model_cfg: Any, kind: list[str]
) -> checkpoints.Checkpoint:
    """The base checkpoint ``build`` makes from ``model_cfg`` (``kind`` marks the vision model's id and
    metrics), found in the store or built, staged and registered."""
    bootcamps = sorted(cfg.training.bootcamps)
    hardware = resolve_hardware(cfg.training.device, cfg.training.precision, cpu_threads=cfg.training.cpu_threads)
    dtype = [] if hardware.dtype == "float32" else [hardware.dtype]  # weights saved in half precision differ
    model_id = checkpoints.checkpoint_id("base", *kind, model_cfg.model_dump(), bootcamps, *dtype)
    existing = checkpoints.find(store, model_id)
    if existing is not None:
        return existing
    final = checkpoints.models_dir(cfg.workspace.path) / model_id
    with checkpoints.staging(final) as tmp:
        built = build(tmp, model_cfg, bootcamps, hardware=hardware)
    metrics = {
        "parameters": built.parameters,
        "vocab_size": built.vocab_size,
        "fingerprint": built.fingerprint,
        "init_fingerprint": built.init_fingerprint,
        **built.pretraining,
    }
    return checkpoints.register(store, model_id, "base", final, metrics={**metrics, **dict.fromkeys(kind, True)})
