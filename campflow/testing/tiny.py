"""An untrained tiny model's settings, for tests and benchmarks of what runs a model rather than what it learned.

Random weights, no pretraining: built in a second, it samples varied tokens (never a well-formed tool call)
and generates in milliseconds, so serving, recording and training code is what a test or benchmark measures.
"""

from __future__ import annotations

from campflow.config import TinyModelConfig


def untrained_tiny(max_positions: int = 1024) -> TinyModelConfig:
    """The settings of a 2-layer, 32-wide model with random weights (``build_tiny_model`` builds it)."""
    return TinyModelConfig(
        seed=0,
        vocab_size=1000,
        hidden_size=32,
        intermediate_size=64,
        layers=2,
        heads=2,
        kv_heads=1,
        max_positions=max_positions,
        corpus_per_level=2,
        pretrain={"steps": 0},
    )
