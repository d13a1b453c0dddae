"""A fixed evaluation, fingerprinted: instance ids, episode ids and transcripts stay byte-identical.

``tests/data/fixed_evaluation.json`` holds, for every episode of a fixed evaluation (the oracle and a
seeded noisy oracle, one that garbles most calls, the oracle under a small token budget; every
built-in bootcamp, every level, two seeds), the instance id, the episode id
and sha256 digests (first 16 hex digits) of four parts: the instance (identity, prompt, tool
schemas), the transcript as stored, the outcome (reward, termination, turns, tokens, details, error)
and the transcript as a chat template renders it (SFT text). Refactors must leave all of it as it is.

The reference was recorded from the code before issue 13's refactors (commit 17782b9) with::

    PYTHONPATH=/path/to/that/checkout python tests/test_fixed_evaluation.py --write

Regenerate it the same way only in a change that means to change episodes (a bootcamp's new
``version``, a reworded observation), and say so in that commit's message.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from campflow.agents.chat import template_messages
from campflow.agents.oracle import NoisyOraclePolicy, OraclePolicy
from campflow.bootcamps import registry
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
from campflow.serialization import to_json_bytes

REFERENCE = Path(__file__).parent / "data" / "fixed_evaluation.json"
BOOTCAMPS = ("calculator", "maze", "filesystem", "sql", "shop", "calendar", "wordle", "gridworld", "chart", "gui")
SEEDS = (0, 1)
NOISY_SAMPLES = 2


def _digest(value: Any) -> str:
    data = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def fingerprints() -> dict[str, dict[str, str]]:
    """Run the fixed evaluation and fingerprint each episode, keyed ``bootcamp:level:seed:policy:sample``."""
    out: dict[str, dict[str, str]] = {}
    policies = (  # label, policy, samples, settings: between them every termination but the two infra ones
        ("oracle", OraclePolicy(), 1, RolloutSettings()),
        (
            "noisy",
            NoisyOraclePolicy(p_wrong_move=0.3, p_malformed=0.2, p_wrong_answer=0.3, seed=5),
            NOISY_SAMPLES,
            RolloutSettings(),
        ),
        (
            "garbled",
            NoisyOraclePolicy(p_wrong_move=0.0, p_malformed=0.8, p_wrong_answer=0.0, seed=7),
            1,
            RolloutSettings(),
        ),
        ("budget", OraclePolicy(), 1, RolloutSettings(max_context_tokens=600)),
    )
    for name in BOOTCAMPS:
        b = registry.make(name)
        instances = [b.generate(level, seed) for level in sorted(b.levels) for seed in SEEDS]
        for label, policy, samples, settings in policies:
            specs = [EpisodeSpec(b, i, s) for i in instances for s in range(samples)]
            episodes = asyncio.run(run_episodes(specs, policy, settings, run_id="fixed"))
            for spec, e in zip(specs, episodes, strict=True):
                i = spec.instance
                out[f"{name}:{i.level}:{i.seed}:{label}:{spec.sample}"] = {
                    "instance_id": i.id,
                    "episode_id": e.id,
                    "instance": _digest(
                        [i.version, i.params.model_dump(mode="json"), i.data, b.prompt(i), b.tool_schemas(i)]
                    ),
                    "transcript": _digest(e.transcript_json()),
                    "outcome": _digest(
                        [
                            e.model_id,
                            e.reward,
                            e.success,
                            str(e.termination),
                            e.turns,
                            e.tool_calls,
                            e.invalid_calls,
                            e.prompt_tokens,
                            e.completion_tokens,
                            e.details,
                            e.error,
                            e.level,
                        ]
                    ),
                    "template": _digest(to_json_bytes(template_messages(e.transcript, strict=False))),
                }
    return out


def test_a_fixed_evaluation_keeps_its_instance_ids_episode_ids_and_transcripts() -> None:
    reference = json.loads(REFERENCE.read_text())
    now = fingerprints()
    assert now.keys() == reference.keys()
    changed = [
        f"{key}: {part}" for key, parts in reference.items() for part, value in parts.items() if now[key][part] != value
    ]
    assert not changed, f"{len(changed)} parts changed, first: {changed[:8]}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_fixed_evaluation.py --write   (records the reference from this checkout)")
    REFERENCE.write_text(json.dumps(fingerprints(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE}")
