"""Prefect tasks for the training steps. Thin: the work is in campflow.training. Each is idempotent
(content-hashed dataset and checkpoint ids), so a retried or resumed task reuses finished work."""

from __future__ import annotations

import json

from prefect import task
from prefect.cache_policies import NO_CACHE

from campflow.config import CampflowConfig
from campflow.hardware import resolve_hardware
from campflow.storage.workspace import Workspace
from campflow.training import checkpoints
from campflow.training.base import ensure_base, ensure_vision_base
from campflow.training.filtering import build_sft_dataset
from campflow.training.rl import train_rl
from campflow.training.sft import train_sft


@task(name="start-model", cache_policy=NO_CACHE)
def start_model_task(cfg: CampflowConfig) -> str:
    """The model a first cycle starts from: the embedded tiny model (``embedded``), the tiny vision-language
    model (``embedded-vl``), or a registered local folder."""
    store = Workspace.from_config(cfg).store
    if cfg.improve.model == "embedded":
        return ensure_base(store, cfg).model_id
    if cfg.improve.model == "embedded-vl":
        return ensure_vision_base(store, cfg).model_id
    return checkpoints.adopt(store, cfg.improve.model).model_id


@task(name="build-dataset", cache_policy=NO_CACHE)
def build_dataset_task(
    cfg: CampflowConfig, run_ids: list[str], model_path: str | None = None, episode_ids: list[str] | None = None
) -> str:
    """Filter the episodes of ``run_ids`` (only ``episode_ids`` of them, if given) into an SFT dataset for
    the model at ``model_path``; returns its id.

    A thinking model (its chat template renders ``<think>``) gets its oracle rows marked, or left out
    with ``training.exclude_oracle_for_thinking``. With ``rollout.agent`` the rows are the token ids the
    proxy recorded (:mod:`campflow.training.agent_data`).
    """
    ws = Workspace.from_config(cfg)
    if cfg.rollout.agent is not None:  # a user's agent played the episodes: its rows are the recorded ids
        from campflow.training.agent_data import build_agent_sft_dataset

        built = build_agent_sft_dataset(ws.store, ws.path, run_ids, cfg.training.filter, episode_ids=episode_ids)
        return built.dataset_id
    thinking = False
    if model_path is not None:
        from transformers import AutoTokenizer

        from campflow.agents.local import adapter_base
        from campflow.agents.templates import chat_format

        tokenizer = AutoTokenizer.from_pretrained(adapter_base(model_path) or model_path)
        thinking = chat_format(tokenizer.chat_template).thinking
    build = build_sft_dataset(
        ws.store,
        ws.path,
        run_ids,
        cfg.training.filter,
        thinking=thinking,
        exclude_oracle=cfg.training.exclude_oracle_for_thinking,
        episode_ids=episode_ids,
    )
    return build.dataset_id


@task(name="sft", cache_policy=NO_CACHE)
def sft_task(cfg: CampflowConfig, base: str, dataset_id: str) -> str:
    """Supervised fine-tuning; returns the new checkpoint's id."""
    ws = Workspace.from_config(cfg)
    return train_sft(
        ws.store,
        ws.path,
        base,
        dataset_id,
        cfg.training.sft,
        hardware=resolve_hardware(cfg.training.device, cfg.training.precision, cpu_threads=cfg.training.cpu_threads),
        report_to=cfg.training.report_to,
        save_steps=cfg.training.save_steps,
    ).checkpoint.model_id


@task(name="rl", cache_policy=NO_CACHE)
def rl_task(cfg: CampflowConfig, base: str, instance_ids: list[str] | None = None) -> str:
    """GRPO on the bootcamps as environments, prompted with the recorded ``instance_ids`` (default: drawn
    from the train split); returns the new checkpoint's id. With ``rollout.agent`` every rollout is an
    episode of the user's agent, the model being trained behind the proxy (:mod:`campflow.training.agent_rl`)."""
    ws = Workspace.from_config(cfg)
    hardware = resolve_hardware(cfg.training.device, cfg.training.precision, cpu_threads=cfg.training.cpu_threads)
    instances = None
    if instance_ids is not None:
        rows = ws.store.query(
            "SELECT bootcamp, params, seed FROM instances WHERE instance_id IN (SELECT unnest(?)) ORDER BY instance_id",
            [instance_ids],
        )
        instances = [ws.bootcamp(r["bootcamp"]).generate(json.loads(r["params"]), int(r["seed"])) for r in rows]
    if cfg.rollout.agent is not None:
        from campflow.rollout.engine import RolloutSettings
        from campflow.training.agent_rl import train_agent_rl

        if instances is None:
            raise ValueError("RL with a user's agent needs its prompts (the band's instance ids)")
        return train_agent_rl(
            ws.store,
            ws.path,
            base,
            instances,
            cfg.training.rl,
            cfg.rollout.agent,
            RolloutSettings.from_config(cfg.rollout),
            max_new_tokens=cfg.policy.max_tokens,
            concurrency=cfg.rollout.concurrency,
            hardware=hardware,
            report_to=cfg.training.report_to,
            save_steps=cfg.training.save_steps,
        ).checkpoint.model_id
    return train_rl(
        ws.store,
        ws.path,
        base,
        cfg.training.bootcamps,
        cfg.training.rl,
        cfg.training.levels,
        hardware=hardware,
        report_to=cfg.training.report_to,
        instances=instances,
        save_steps=cfg.training.save_steps,
    ).checkpoint.model_id
