"""Prefect task for an SFT dataset with on-policy corrections beside the demonstrations. Thin: the work is in
campflow.training.corrections; idempotent (the dataset id hashes its rows)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from campflow.config import CampflowConfig
from campflow.storage.workspace import Workspace
from campflow.training.corrections import build_corrected_dataset, correction_runs


@task(name="build-corrected-dataset", cache_policy=NO_CACHE)
def corrected_dataset_task(cfg: CampflowConfig, run_ids: list[str], corrections_run: str, model_path: str) -> str:
    """The demonstrations of ``run_ids`` beside the corrections of ``corrections_run`` and, with
    ``training.corrections.aggregate``, of every earlier corrections run too (DAgger), tokenized for the model
    at ``model_path``; returns the dataset's id."""
    from transformers import AutoTokenizer

    from campflow.agents.local import adapter_base

    ws = Workspace.from_config(cfg)
    runs = correction_runs(ws.store) if cfg.training.corrections.aggregate else [corrections_run]
    if corrections_run not in runs:
        runs.append(corrections_run)
    tokenizer = AutoTokenizer.from_pretrained(adapter_base(model_path) or model_path)
    built = build_corrected_dataset(ws.store, ws.path, run_ids, runs, cfg.training.filter, tokenizer)
    return built.dataset_id
