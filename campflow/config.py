"""Configuration: pydantic models, one per step, loaded from YAML with environment overrides.

``configs/default.yaml`` mirrors these models. Any key can be overridden from the environment as
``CAMPFLOW__<SECTION>__<KEY>`` (e.g. ``CAMPFLOW__ROLLOUT__CONCURRENCY=64``); values are read as YAML.
An invalid value is reported as one line naming the key, the value and what was expected.

This module is a leaf: it imports nothing else from campflow but the error types, so every layer may
read its configuration from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from campflow.errors import ConfigError

ENV_PREFIX = "CAMPFLOW__"


class Section(BaseModel):
    """Base of every config section: unknown keys are errors (a typo must not pass silently)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WorkspaceConfig(Section):
    """Where campflow keeps its data."""

    path: Path = Field(Path("campflow-data"), description="workspace folder: store, datasets, checkpoints")
    db: Path | None = Field(None, description="DuckDB file; default <path>/campflow.duckdb")

    @property
    def db_path(self) -> Path:
        """The store's file."""
        return self.db or self.path / "campflow.duckdb"


class NoiseConfig(Section):
    """Mistakes of the noisy oracle policy."""

    p_wrong_move: float = Field(0.1, ge=0, le=1, description="chance per turn of a plausible wrong step")
    p_malformed: float = Field(0.05, ge=0, le=1, description="chance per turn of a malformed tool call")
    p_wrong_answer: float = Field(0.2, ge=0, le=1, description="chance per episode of a wrong final answer")
    seed: int = Field(0, description="seed of every noisy decision")


class PolicyConfig(Section):
    """The agent under evaluation."""

    kind: Literal["oracle", "noisy", "openai", "local"] = Field("oracle", description="which policy")
    model: str | None = Field(None, description="endpoint model name, or a local model path (kind=local)")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key, if any")
    temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature")
    max_tokens: int = Field(512, ge=1, le=1_000_000, description="completion tokens per turn")
    timeout: float = Field(60.0, gt=0, description="seconds per request before it is retried")
    max_retries: int = Field(4, ge=0, le=20, description="retries (with backoff) before infra_error")
    transport: Literal["aiohttp", "httpx"] = Field("aiohttp", description="HTTP transport of the openai client")
    send_reasoning: bool = Field(False, description="send earlier turns' reasoning back to the model")
    batch_size: int = Field(16, ge=1, le=1024, description="local models: sequences generated together")
    noise: NoiseConfig = Field(default_factory=NoiseConfig, description="kind=noisy: its mistakes")


class RolloutConfig(Section):
    """How episodes run."""

    concurrency: int = Field(32, ge=1, le=4096, description="episodes in flight per worker")
    workers: int = Field(2, ge=1, le=256, description="parallel rollout tasks (threads, or Ray/Dask workers)")
    shard_size: int = Field(64, ge=1, le=100_000, description="episodes per rollout task, written as one batch")
    task_runner: Literal["threads", "ray", "dask"] = Field("threads", description="Prefect task runner")
    ray_address: str | None = Field(None, description="Ray cluster address; None starts a local Ray")
    max_turns: int | None = Field(None, ge=1, le=1000, description="turn budget; None: each bootcamp's own")
    episode_timeout: float = Field(300.0, gt=0, description="wall-clock seconds per episode")
    max_consecutive_errors: int = Field(3, ge=1, le=100, description="turns in a row without a usable call")
    max_calls_per_turn: int = Field(8, ge=1, le=64, description="tool calls run per turn")
    max_reply_chars: int = Field(32_000, ge=100, description="longer replies are a format error")
    max_observation_chars: int = Field(8_000, ge=100, description="observations are truncated past this")
    max_context_tokens: int | None = Field(None, ge=64, description="token budget per conversation")


class EvalConfig(Section):
    """What an evaluation covers."""

    bootcamps: list[str] = Field(["calculator", "maze"], min_length=1, description="bootcamps to evaluate")
    n: int = Field(50, ge=1, le=1_000_000, description="eval-split instances per bootcamp")
    samples: int = Field(1, ge=1, le=1024, description="episodes per instance")
    levels: list[int] | None = Field(None, description="only these levels; None: all")


class CampflowConfig(Section):
    """The whole configuration."""

    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                env: dict[str, str] | None = None) -> CampflowConfig:
    """Read ``path`` (or defaults), apply ``CAMPFLOW__*`` environment variables, then ``overrides``.

    ``overrides`` uses dotted keys: ``{"rollout.concurrency": 8}``; None values are skipped.

    Raises:
        ConfigError: one line naming the file, the key, the value and what was expected.
    """
    source = str(path) if path else "defaults"
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping of sections at the top, got {type(loaded).__name__}")
        data = loaded
    for key, raw in sorted((env if env is not None else os.environ).items()):
        if key.startswith(ENV_PREFIX):
            dotted = key[len(ENV_PREFIX):].lower().replace("__", ".")
            _set(data, dotted, yaml.safe_load(raw) if raw != "" else None)
            source += f" + ${key}"
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set(data, dotted, value)
    try:
        return CampflowConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_config_error(exc)}") from None


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"cannot set {dotted}: {part} is not a section")
        node = nxt
    node[parts[-1]] = value


def format_config_error(exc: ValidationError) -> str:
    """The first problem of a config validation error as ``key = value: expected``."""
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        msg = f"{key} is required"
    elif err["type"] == "extra_forbidden":
        msg = f"{key} is not a known setting"
    else:
        msg = f"{key} = {err.get('input')!r}: {err['msg']}"
    more = len(exc.errors()) - 1
    return msg + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")
