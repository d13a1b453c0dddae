"""Prefect tasks for the training steps. Thin: the work is in campflow.training. Each is idempotent
(content-hashed dataset and checkpoint ids), so a retried or resumed task reuses finished work."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from campflow.config import CampflowConfig
from campflow.storage.store import Store
from campflow.training import checkpoints
from campflow.training.base import ensure_base
from campflow.training.filtering import build_sft_dataset
from campflow.training.rl import train_rl
from campflow.training.sft import train_sft


@task(name="start-model", cache_policy=NO_CACHE)
def start_model_task(cfg: CampflowConfig) -> str:
    """The model a first cycle starts from: the embedded tiny model, or a registered local folder."""
    store = Store.of_workspace(cfg.workspace)
    if cfg.improve.model == "embedded":
        return ensure_base(store, cfg).model_id
    return checkpoints.adopt(store, cfg.improve.model).model_id


@task(name="build-dataset", cache_policy=NO_CACHE)
def build_dataset_task(cfg: CampflowConfig, run_ids: list[str]) -> str:
    """Filter the episodes of ``run_ids`` into an SFT dataset; returns its id."""
    build = build_sft_dataset(Store.of_workspace(cfg.workspace), cfg.workspace.path, run_ids, cfg.training.filter)
    return build.dataset_id


@task(name="sft", cache_policy=NO_CACHE)
def sft_task(cfg: CampflowConfig, base: str, dataset_id: str) -> str:
    """Supervised fine-tuning; returns the new checkpoint's id."""
    return train_sft(Store.of_workspace(cfg.workspace), cfg.workspace.path, base, dataset_id,
                     cfg.training.sft).checkpoint.model_id


@task(name="rl", cache_policy=NO_CACHE)
def rl_task(cfg: CampflowConfig, base: str) -> str:
    """GRPO on the bootcamps as environments; returns the new checkpoint's id."""
    return train_rl(Store.of_workspace(cfg.workspace), cfg.workspace.path, base, cfg.training.bootcamps,
                    cfg.training.rl, cfg.training.levels).checkpoint.model_id
