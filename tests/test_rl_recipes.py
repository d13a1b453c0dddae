"""RL recipes as settings (issue 40, deliverable 4): TRL's loss types and clip-higher reach GRPOConfig, groups
whose rewards are all equal leave the loss, and the band is balanced by level and divergence kind."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
import torch

from campflow.agents.oracle import NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import train_instances
from campflow.config import load_config
from campflow.errors import ConfigError
from campflow.flows.band import balanced, band_groups, band_ids
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.store import Store
from campflow.training.rl import drop_equal_groups


def test_loss_type_clip_higher_and_reward_scaling_reach_trls_grpo_config(tmp_path: Path) -> None:
    from campflow.hardware import Capability, resolve_hardware
    from campflow.training.rl import EpisodeLimits, grpo_arguments

    cpu = resolve_hardware("auto", "auto", Capability())
    overrides = {
        "training.rl.loss_type": "dr_grpo",
        "training.rl.epsilon_high": 0.28,
        "training.rl.scale_rewards": "none",
    }
    rl = load_config(None, overrides, env={}).training.rl
    args = grpo_arguments(rl, cpu, tmp_path, limits=EpisodeLimits(256, 8))
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.scale_rewards) == ("dr_grpo", 0.2, 0.28, "none")
    default = grpo_arguments(load_config(None, {}, env={}).training.rl, cpu, tmp_path, limits=EpisodeLimits(256, 8))
    assert (default.loss_type, default.epsilon_high, default.scale_rewards) == ("dapo", None, "group")  # TRL: = epsilon
    with pytest.raises(ConfigError, match="scale_rewards = 'sometimes'"):
        load_config(None, {"training.rl.scale_rewards": "sometimes"}, env={})


def test_groups_with_equal_rewards_leave_the_loss_and_its_token_count() -> None:
    # three groups of two: the first all equal (no advantage), the others teach
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
    tool_mask = torch.tensor([[1, 1, 1], [1, 0, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], [0, 1, 1]])
    batch = {
        "advantages": torch.tensor([0.0, 0.0, 0.7, -0.7, 1.0, -1.0]),
        "completion_mask": mask.clone(),
        "tool_mask": tool_mask,
        "num_items_in_batch": (mask * tool_mask).sum(),
    }
    assert drop_equal_groups(batch, 2) == pytest.approx(1 / 3)
    assert batch["completion_mask"][:2].sum() == 0 and torch.equal(batch["completion_mask"][2:], mask[2:])
    assert batch["num_items_in_batch"] == (mask[2:] * tool_mask[2:]).sum()  # TRL's dapo normalizer, dropped rows out
    every = {"advantages": torch.zeros(4), "completion_mask": mask[:4].clone(), "num_items_in_batch": mask[:4].sum()}
    assert drop_equal_groups(every, 2) == 1.0 and torch.equal(every["completion_mask"], mask[:4])  # nothing to keep


def test_the_band_is_balanced_by_level_and_divergence_kind(tmp_path: Path) -> None:
    store = Store(tmp_path / "campflow.duckdb")
    b = registry.make("calculator")
    instances = train_instances(b, 24, seed=0, levels=[1, 2])
    store.write_instances(instances, split="train")
    policy = NoisyOraclePolicy(p_wrong_move=0.0, p_malformed=0.0, p_wrong_answer=0.5, seed=1)
    specs = [EpisodeSpec(b, i, sample=k) for i in instances for k in range(4)]
    store.write_episodes(asyncio.run(run_episodes(specs, policy, run_id="calibrate")))
    band = band_ids(store, "calibrate")
    groups = band_groups(store, "calibrate", band)
    assert set(groups) == set(band) and {lv for lv, _ in groups.values()} == {1, 2}
    assert all(kind != "none" for _, kind in groups.values())  # every band instance failed somewhere
    kept = balanced(band, groups)
    sizes = Counter(groups[i] for i in kept)
    share = -(-len(band) // len(set(groups.values())))
    assert max(sizes.values()) <= share and set(sizes) == set(groups.values())
    assert balanced(band, groups) == kept  # the same band keeps the same prompts
    # a lopsided band: one (level, kind) far larger than the others is cut to an equal share
    lopsided = {f"i{k}": (1, "operator_flipped") for k in range(9)} | {"j": (2, "early_submit"), "k": (2, "wall")}
    assert Counter(lopsided[i] for i in balanced(sorted(lopsided), lopsided)) == Counter(
        {(1, "operator_flipped"): 4, (2, "early_submit"): 1, (2, "wall"): 1}
    )
