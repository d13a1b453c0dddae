"""A tiny configuration of the whole loop, for tests that run improvement cycles (about a minute each)."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_tiny_config(workspace: Path, **overrides: object) -> Path:
    """Write a config that runs one cycle on calculator and maze in about a minute; returns its path."""
    cfg = {
        "workspace": {"path": str(workspace)},
        "policy": {"kind": "local", "max_tokens": 24, "batch_size": 16},
        "rollout": {"concurrency": 16, "workers": 1, "shard_size": 4},
        "eval": {"bootcamps": ["calculator", "maze"], "n": 6, "levels": [1, 2]},
        "synthesis": {
            "n_per_cluster": 2,
            "calibration_samples": 1,
            "band_min": 0.0,
            "max_clusters": 2,
            "instances_per_variant": 1,
        },
        "training": {
            "levels": [1, 2],
            "collect_n": 8,
            "tiny": {
                "corpus_per_level": 6,
                "vocab_size": 600,
                "hidden_size": 64,
                "intermediate_size": 128,
                "layers": 2,
                "heads": 2,
                "kv_heads": 1,
                "max_positions": 1024,
                "pretrain": {"steps": 0},
            },
            "sft": {"max_steps": 6, "batch_size": 4},
            "rl": {
                "max_steps": 1,
                "num_generations": 2,
                "prompts_per_step": 1,
                "instances_per_bootcamp": 2,
                "max_completion_length": 32,
                "max_tool_calling_iterations": 2,
            },
        },
        "improve": {"rl": True, "reports_dir": str(workspace / "reports")},  # the whole loop: RL too
        "watch": {"threshold": 5, "interval_seconds": 5},
    }
    for dotted, value in overrides.items():
        node = cfg
        *head, last = dotted.split("__")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    path = workspace.parent / f"{workspace.name}.yaml"
    workspace.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path
