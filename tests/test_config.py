"""Configuration: defaults, YAML, environment overrides, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from campflow.config import CampflowConfig, load_config
from campflow.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def _missing_fields(model: type[BaseModel], data: dict, prefix: str = "") -> list[str]:
    missing = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            missing += _missing_fields(annotation, data.get(name) or {}, key + ".") if name in data else [key]
        elif name not in data:
            missing.append(key)
    return missing


def test_the_shipped_default_config_validates_and_mirrors_every_setting() -> None:
    path = REPO / "configs" / "default.yaml"
    assert isinstance(load_config(path, env={}), CampflowConfig)
    missing = _missing_fields(CampflowConfig, yaml.safe_load(path.read_text()))
    optional = {
        "workspace.db",
        "policy.api_key_env",
        "policy.transport",
        "policy.send_reasoning",
        "rollout.ray_address",
        "rollout.max_turns",
        "rollout.max_calls_per_turn",
        "rollout.max_reply_chars",
        "rollout.max_observation_chars",
        "rollout.max_context_tokens",
        "training.filter.max_turns",
        "training.filter.max_per_bootcamp",
        "synthesis.llm.api_key_env",
    }
    assert set(missing) <= optional, sorted(set(missing) - optional)


@pytest.mark.parametrize("name", ["scale.yaml", "endpoint.yaml"])
def test_the_example_configs_validate(name: str) -> None:
    assert isinstance(load_config(REPO / "configs" / name, env={}), CampflowConfig)


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("rollout:\n  concurrency: 0\n", "rollout.concurrency = 0: Input should be greater than or equal to 1"),
        (
            "policy:\n  kind: gpt5\n",
            "policy.kind = 'gpt5': Input should be 'oracle', 'demonstrator', 'noisy', 'openai' or 'local'",
        ),
        ("policy:\n  temprature: 0.3\n", "policy.temprature is not a known setting"),
        ("eval:\n  n: lots\n", "eval.n = 'lots': Input should be a valid integer"),
        ("- just\n- a list\n", "expected a mapping of sections"),
        ("rollout: [\n", "not valid YAML"),
    ],
)
def test_invalid_values_are_one_line_with_key_value_and_expectation(tmp_path, yaml_text, message) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_environment_overrides_apply_with_types_and_name_themselves_in_errors() -> None:
    cfg = load_config(None, env={"CAMPFLOW__ROLLOUT__CONCURRENCY": "7", "CAMPFLOW__EVAL__BOOTCAMPS": "[maze]"})
    assert cfg.rollout.concurrency == 7 and cfg.eval.bootcamps == ["maze"]
    with pytest.raises(ConfigError, match=r"\$CAMPFLOW__ROLLOUT__WORKERS: rollout.workers = -1"):
        load_config(None, env={"CAMPFLOW__ROLLOUT__WORKERS": "-1"})


def test_overrides_beat_the_file_and_none_means_not_given(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("eval:\n  n: 5\n  samples: 2\n")
    cfg = load_config(path, {"eval.n": 9, "eval.samples": None}, env={})
    assert cfg.eval.n == 9 and cfg.eval.samples == 2


def test_a_missing_config_file_is_named() -> None:
    with pytest.raises(ConfigError, match="config file nowhere.yaml does not exist"):
        load_config("nowhere.yaml", env={})
