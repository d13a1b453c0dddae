"""The ``base`` checkpoint: the embedded tiny model (or the tiny vision-language model), built once per
configuration and registered."""

from __future__ import annotations

from campflow.config import CampflowConfig
from campflow.hardware import resolve_hardware
from campflow.storage.store import Store
from campflow.training import checkpoints
from campflow.training.tinymodel import build_tiny_model
from campflow.training.tinyvlm import build_tiny_vlm


def ensure_base(store: Store, cfg: CampflowConfig) -> checkpoints.Checkpoint:
    """The registered base model for ``cfg.training`` (built now if it does not exist yet), saved in the
    training precision (float32 on a CPU)."""
    bootcamps = sorted(cfg.training.bootcamps)
    hardware = resolve_hardware(cfg.training.device, cfg.training.precision, cpu_threads=cfg.training.cpu_threads)
    dtype = [] if hardware.dtype == "float32" else [hardware.dtype]  # weights saved in half precision differ
    model_id = checkpoints.checkpoint_id("base", cfg.training.tiny.model_dump(), bootcamps, *dtype)
    existing = checkpoints.find(store, model_id)
    if existing is not None:
        return existing
    final = checkpoints.models_dir(cfg.workspace.path) / model_id
    with checkpoints.staging(final) as tmp:
        built = build_tiny_model(tmp, cfg.training.tiny, bootcamps, hardware=hardware)
    return checkpoints.register(
        store,
        model_id,
        "base",
        final,
        metrics={"parameters": built.parameters, "vocab_size": built.vocab_size, "fingerprint": built.fingerprint},
    )


def ensure_vision_base(store: Store, cfg: CampflowConfig) -> checkpoints.Checkpoint:
    """The registered tiny vision-language model for ``cfg.training`` (``training.tiny_vl``), built now if
    it does not exist yet, saved in the training precision."""
    bootcamps = sorted(cfg.training.bootcamps)
    hardware = resolve_hardware(cfg.training.device, cfg.training.precision)
    dtype = [] if hardware.dtype == "float32" else [hardware.dtype]
    model_id = checkpoints.checkpoint_id("base", "vision", cfg.training.tiny_vl.model_dump(), bootcamps, *dtype)
    existing = checkpoints.find(store, model_id)
    if existing is not None:
        return existing
    final = checkpoints.models_dir(cfg.workspace.path) / model_id
    with checkpoints.staging(final) as tmp:
        built = build_tiny_vlm(tmp, cfg.training.tiny_vl, bootcamps, hardware=hardware)
    return checkpoints.register(
        store,
        model_id,
        "base",
        final,
        metrics={
            "parameters": built.parameters,
            "vocab_size": built.vocab_size,
            "fingerprint": built.fingerprint,
            "vision": True,
        },
    )
