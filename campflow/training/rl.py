"""Reinforcement learning with TRL's GRPOTrainer, the bootcamps as environments.

The training set is train-split instances of the chosen bootcamps (synthesized variants included
when the store has them): one row per instance with its system prompt, its bootcamp (TRL's
``environment`` field selects the environment) and the params and seed that ``reset`` rebuilds it
from. Every row is checked against the eval split before training starts.

A vision-language model sees the images of vision bootcamps: ``reset`` and the tools return them as
image parts, which TRL's GRPOTrainer feeds through the model's processor (the prompt's images and the
images tool results return). TRL puts a tool's image inside its ``tool`` message, where the rollout
engine (and so SFT data and evaluation) sends it in a user message after the tool result; RL and SFT
render a tool's image in those two places.

An episode in RL is the episode evaluation plays: TRL's ``max_tool_calling_iterations`` defaults to the
largest turn budget of the prompts' bootcamps, and ``max_completion_length`` (which in TRL counts the
tool results as well as the model's turns) to twice the longest grounded demonstration of a prompt,
rendered through the model's template (:func:`episode_limits`). A fixed budget shorter than the
episodes truncates them and scores them as failures: 256 tokens cut most level-2 maze episodes (~420
tokens solved), and RL then learned nothing measurable. TRL's loop also goes on generating after the
final tool; those tokens are masked out of the loss (:func:`episode_trainer_class`). Measured from one
SFT checkpoint on 35 band prompts, 60 steps at lr 1e-4: unmasked, the training reward fell (0.55 ->
0.44 by sixths of the run); masked, it rose (0.50 -> 0.66), and on those prompts, replayed through
campflow's own engine, the pass rate rose 44.3% -> 56.4%.

TRL's scale options pass through from ``training.rl`` (``use_vllm``, ``vllm_mode``, the per-device
batch, gradient accumulation); TRL validates their combinations itself.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow.agents.local import MODEL_LOADING
from campflow.agents.vision import is_vision_model, load_processor, save_processor
from campflow.bootcamps import registry
from campflow.bootcamps.base import Instance
from campflow.bootcamps.splits import assert_not_held_out, train_instances
from campflow.config import RLSettings
from campflow.hardware import Hardware, resolve_hardware
from campflow.storage.store import Store
from campflow.training import checkpoints
from campflow.training.distributed import is_main_process, processes
from campflow.training.environments import environment_factories
from campflow.training.lora import adapter_metrics, starting_model
from campflow.training.resuming import (
    clear_trainer,
    last_checkpoint,
    mark_trained,
    resumed_step,
    saving_args,
)
from campflow.training.sft import (
    TrainResult,
    checkpointing_arg,
    finished_result,
    progress_callback,
    quiet,
    threads_callback,
)
from campflow.training.templates import check_rl_template
from campflow.training.tracking import tracking_args, trainer_dir


def rl_instances(
    store: Store,
    bootcamps: list[str],
    per_bootcamp: int,
    seed: int,
    levels: list[int] | dict[str, list[int]] | None = None,
    observation: str | None = None,
) -> list[Instance]:
    """Train-split instances: synthesized variants from the store first, then generated ones at
    ``levels`` (one list for every bootcamp, or a list per bootcamp), vision bootcamps in ``observation`` mode."""
    out: list[Instance] = []
    for name in bootcamps:
        bootcamp = registry.make(name)
        rows = store.query(
            "SELECT instance_id, params, seed FROM instances WHERE bootcamp = ? AND split = 'train' "
            "AND origin = 'synthesized' ORDER BY instance_id LIMIT ?",
            [name, per_bootcamp],
        )
        chosen = [bootcamp.generate(json.loads(r["params"]), int(r["seed"])) for r in rows]
        mine = levels.get(name) if isinstance(levels, dict) else levels
        lv = [lvl for lvl in (mine or sorted(bootcamp.levels)) if lvl in bootcamp.levels]
        chosen += train_instances(bootcamp, per_bootcamp - len(chosen), seed=seed, levels=lv, observation=observation)
        out += chosen
    return out


def rl_rows(instances: list[Instance]) -> list[dict[str, Any]]:
    """GRPO dataset rows: the system prompt, an empty user turn that ``reset`` fills, and the instance."""
    rows = []
    for inst in instances:
        system = registry.make(inst.bootcamp).prompt(inst)[0]
        rows.append(
            {
                "prompt": [system, {"role": "user", "content": ""}],
                "environment": inst.bootcamp,
                "params": json.dumps(inst.params.model_dump(mode="json")),
                "seed": inst.seed,
                "instance_id": inst.id,
            }
        )
    return rows


@dataclass(frozen=True)
class EpisodeLimits:
    """TRL's limits of one rollout: completion tokens (the model's turns and the tool results) and tool rounds."""

    completion_tokens: int
    tool_rounds: int


def demonstration_tokens(processing: Any, instance: Instance, *, vision: bool) -> int:
    """Tokens after the prompt of the grounded demonstrator's episode of ``instance``, rendered through
    ``processing`` (a tokenizer, or a processor for a vision-language model) as TRL counts a completion:
    the assistant turns and the tool results, images included."""
    from campflow.agents.chat import template_messages
    from campflow.agents.oracle import DemonstratorPolicy
    from campflow.agents.vision import vision_conversation
    from campflow.rollout.engine import EpisodeSpec, rollout

    bootcamp = registry.make(instance.bootcamp)
    episode = rollout([EpisodeSpec(bootcamp, instance)], DemonstratorPolicy(), concurrency=1)[0]
    messages = vision_conversation(episode.transcript) if vision else template_messages(episode.transcript)
    tools = bootcamp.tool_schemas(instance)

    def length(conversation: list[dict[str, Any]], prompt: bool) -> int:
        encoded = processing.apply_chat_template(
            conversation, tools=tools, tokenize=True, return_dict=True, add_generation_prompt=prompt
        )
        ids = encoded["input_ids"]
        return len(ids[0] if ids and isinstance(ids[0], list) else ids)

    return length(messages, False) - length(messages[:2], True)


def episode_limits(cfg: RLSettings, processing: Any, instances: Sequence[Instance], *, vision: bool) -> EpisodeLimits:
    """``cfg``'s rollout limits, each null one derived from ``instances``: tool rounds = the largest turn
    budget of their bootcamps (as evaluation plays them), completion tokens = twice the longest grounded
    demonstration (room for the detours a sampling model takes), rounded up to a multiple of 64."""
    rounds = cfg.max_tool_calling_iterations
    if rounds is None:
        rounds = max(registry.make(i.bootcamp).max_turns(i) for i in instances)
    tokens = cfg.max_completion_length
    if tokens is None:
        longest = max(demonstration_tokens(processing, i, vision=vision) for i in instances)
        tokens = -(-2 * longest // 64) * 64
    return EpisodeLimits(tokens, rounds)


def final_tools(bootcamps: Sequence[str]) -> dict[str | None, set[str]]:
    """``{bootcamp: names of its final tools}``, the environments' names as TRL's rows give them."""
    out: dict[str | None, set[str]] = {}
    for name in bootcamps:
        bootcamp = registry.make(name)
        out[name] = {t.name for t in bootcamp.tools(bootcamp.generate(None, 0)) if t.final}
    return out


def final_round(messages: Sequence[dict[str, Any]], final_tools: set[str]) -> int | None:
    """The tool round (1-based) whose results include a final tool's that ended the episode, or None.

    ``messages``: one rollout's completion as TRL keeps it (assistant turns, each followed by its tool
    results). A final tool that answered ``Error: ...`` (bad arguments) did not end the episode."""
    rounds = 0
    for message in messages:
        if message.get("role") == "assistant":
            rounds += 1
        elif message.get("role") == "tool" and message.get("name") in final_tools:
            content = message.get("content")
            text = (
                content
                if isinstance(content, str)
                else " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
            )
            if not text.startswith("Error:"):
                return rounds
    return None


def mask_after_round(mask: list[int], rounds: int) -> list[int]:
    """``mask`` (TRL's tool mask of one completion: 1 for the model's tokens, 0 for tool results) with
    every token after the ``rounds``-th tool result zeroed: what the model wrote after its episode ended."""
    seen, inside = 0, False
    for i, bit in enumerate(mask):
        if bit == 0 and not inside:
            inside = True
        elif bit == 1 and inside:
            inside = False
            seen += 1
            if seen == rounds:
                return mask[:i] + [0] * (len(mask) - i)
    return list(mask)


def episode_trainer_class() -> type:
    """TRL's ``GRPOTrainer`` whose rollouts end where evaluation's do, at the final tool.

    TRL's tool loop goes on generating after a bootcamp's final tool (``submit``): the model calls
    tools that answer "the episode has already ended" until it stops or runs out of rounds, and those
    tokens would be trained with the episode's advantage though no evaluation ever plays them. They
    are masked out of the loss here (TRL's tool mask), so RL learns from the episode evaluation scores.
    Its prompts render each bootcamp's own tool schemas (:func:`~campflow.training.environments.rendered_tools`)."""
    from trl import GRPOTrainer

    if not callable(getattr(GRPOTrainer, "_tool_call_loop", None)):  # TRL's private hook moved: say so, never skip it
        raise RuntimeError("this TRL's GRPOTrainer has no _tool_call_loop; campflow's RL needs TRL 1.16's tool loop")

    class EpisodeGRPOTrainer(GRPOTrainer):
        final_tools: dict[str | None, set[str]] = {}
        drops_equal_groups: bool = False  # rl.drop_equal_groups: :func:`drop_equal_groups` on every batch

        def __init__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
            super().__init__(*args, **kwargs)
            # prompts render the bootcamps' own tool schemas (with the arguments' bounds), as evaluation
            # and SFT do; TRL would render get_json_schema of the methods, which drops them
            from campflow.training.environments import rendered_tools

            for name, tools in getattr(self, "_env_tools", {}).items():
                self._env_tools[name] = rendered_tools(self.environment_factories[name], tools)

        def _tool_call_loop(self, prompts, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            out = super()._tool_call_loop(prompts, *args, **kwargs)
            tool_mask, completions = out[0], out[1]
            envs = getattr(self, "_batch_environments", None) or [None] * len(completions)
            every = set().union(*self.final_tools.values()) if self.final_tools else set()
            for i, messages in enumerate(completions):
                ended = final_round(messages, self.final_tools.get(envs[i], every))
                if ended is not None:
                    tool_mask[i] = mask_after_round(tool_mask[i], ended)
            return out

        def _get_tool_suffix_ids(self, tool_messages):  # noqa: ANN001, ANN202
            return super()._get_tool_suffix_ids(as_evaluated(tool_messages))

        def _generate_and_score_completions(self, inputs):  # noqa: ANN001, ANN202
            out = super()._generate_and_score_completions(inputs)
            if self.drops_equal_groups and self.model.training and self.accelerator.num_processes == 1:
                dropped = drop_equal_groups(out, self.num_generations)
                self._metrics["train"]["frac_groups_dropped"].append(dropped)
            return out

    return EpisodeGRPOTrainer


def drop_equal_groups(batch: dict[str, Any], group: int) -> float:
    """Take the groups of ``batch`` (TRL's scored generations, ``group`` rollouts a prompt, in order) whose
    advantages are all zero (every reward equal) out of the loss: their completion mask is cleared and
    ``num_items_in_batch`` counts only the tokens left, so under ``dapo`` or ``dr_grpo`` they no longer
    dilute the groups that differ. Returns the share of groups dropped (all of them: the batch is left as it
    was, its loss is zero anyway). One process: the rows of a group are side by side in its batch."""
    import torch

    advantages, mask = batch["advantages"], batch["completion_mask"]
    if advantages.numel() % group:
        return 0.0
    equal = torch.isclose(advantages.view(-1, group), torch.zeros(()), atol=1e-6).all(dim=1)
    if not equal.any() or equal.all():
        return float(equal.float().mean())
    rows = equal.repeat_interleave(group)
    kept = mask.clone()
    kept[rows.to(kept.device)] = 0
    batch["completion_mask"] = kept
    if isinstance(batch.get("num_items_in_batch"), torch.Tensor):  # TRL's count: completion and tool masks
        loss_mask = kept if batch.get("tool_mask") is None else kept * batch["tool_mask"]
        batch["num_items_in_batch"] = loss_mask.sum().to(batch["num_items_in_batch"])
    return float(equal.float().mean())


def as_evaluated(tool_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL's tool messages of one round as campflow's engine sends them: a tool result's image (with the
    note before it, :class:`~campflow.training.environments.BootcampEnvironment`) leaves the tool
    message for a user message after the round's results. TRL would render it inside the tool turn,
    where no SFT row or evaluation shows one: measured, an image-mode SFT checkpoint solving 82.5% of
    gridworld level 1 then scored 0 in every RL rollout."""
    results, shown = [], []
    for message in tool_messages:
        content = message.get("content")
        if not isinstance(content, list) or not any(p.get("type") == "image" for p in content):
            results.append(message)
            continue
        first = next(i for i, p in enumerate(content) if p.get("type") == "text")  # the result itself
        results.append({**message, "content": content[first]["text"]})
        shown.append({"role": "user", "content": [p for i, p in enumerate(content) if i != first]})
    return results + shown


def grpo_arguments(
    cfg: RLSettings,
    hardware: Hardware,
    output_dir: Path,
    *,
    limits: EpisodeLimits | None = None,
    report_to: Sequence[str] = (),
    run_name: str | None = None,
    save_steps: int | None = None,
) -> Any:
    """TRL's ``GRPOConfig`` as campflow trains with it: ``cfg``'s group, schedule and scale options
    (vLLM, per-device batch, accumulation), ``hardware``'s device and precision, ``limits`` of a rollout
    (None: ``cfg``'s, which must then be set), a resumable checkpoint every ``save_steps`` (None: a tenth
    of the steps), trackers ``report_to``."""
    from trl import GRPOConfig

    if limits is None:
        if cfg.max_completion_length is None or cfg.max_tool_calling_iterations is None:
            raise ValueError(
                "grpo_arguments needs limits when max_completion_length or max_tool_calling_iterations is null"
            )
        limits = EpisodeLimits(cfg.max_completion_length, cfg.max_tool_calling_iterations)

    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.per_device_batch_size or cfg.num_generations * cfg.prompts_per_step,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_generations=cfg.num_generations,
        max_completion_length=limits.completion_tokens,
        max_tool_calling_iterations=limits.tool_rounds,
        temperature=cfg.temperature,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        scale_rewards=cfg.scale_rewards,
        logging_steps=1,
        **saving_args(save_steps, cfg.max_steps),
        use_vllm=cfg.use_vllm,
        vllm_mode=cfg.vllm_mode,
        vllm_server_base_url=cfg.vllm_server_base_url,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        seed=cfg.seed,
        data_seed=cfg.seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        **hardware.trainer_args,
        **tracking_args(report_to, run_name or "campflow-rl"),
        **checkpointing_arg(GRPOConfig, cfg.gradient_checkpointing),
    )


def train_rl(
    store: Store,
    workspace: Path,
    base: str,
    bootcamps: list[str],
    cfg: RLSettings,
    levels: list[int] | dict[str, list[int]] | None = None,
    *,
    hardware: Hardware | None = None,
    report_to: Sequence[str] = (),
    instances: Sequence[Instance] | None = None,
    save_steps: int | None = None,
) -> TrainResult:
    """GRPO from checkpoint ``base`` (an id, a registered path, or a model folder) on ``bootcamps``;
    returns the registered ``rl`` checkpoint. ``instances`` are the prompts (e.g. the model's learnable
    band); None draws them with :func:`rl_instances`. ``hardware``, ``report_to`` and ``save_steps`` (a
    killed run resumes from its last save) as for :func:`train_sft`; under ``accelerate launch`` only the
    main process writes the checkpoint and the store."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    hardware = hardware or resolve_hardware()
    main = is_main_process()
    bootcamps = registry.parse_names(bootcamps)  # imported ones through the workspace's resolver
    if instances is not None:  # checked before anything loads: a leak fails fast
        assert_not_held_out((i.id for i in instances), store.eval_ids(), store.probe_ids(), what="the RL training set")
    parent = checkpoints.resolve(store, base, record=main)
    chosen = sorted(i.id for i in instances) if instances is not None else None
    model_id = checkpoints.checkpoint_id(
        "rl",
        parent.model_id,
        sorted(bootcamps),
        levels,
        cfg.model_dump(),
        hardware.precision,
        *processes(),
        *([chosen] if chosen else []),
    )
    existing = checkpoints.find(store, model_id)
    if existing is not None:
        return TrainResult(existing, existing.metrics, reused=True)
    final = checkpoints.models_dir(workspace) / model_id
    done = finished_result(store, workspace, final, "rl", parent.model_id, None, report_to, main=main)
    if done is not None:
        return done

    import datasets
    from transformers import AutoTokenizer

    vision = is_vision_model(parent.path)
    if instances is None:  # vision bootcamps in the mode the model reads
        observation = "image" if vision else "text"
        instances = rl_instances(store, bootcamps, cfg.instances_per_bootcamp, cfg.seed, levels, observation)
    instances = list(instances)
    assert_not_held_out((i.id for i in instances), store.eval_ids(), store.probe_ids(), what="the RL training set")
    if main:
        store.write_instances(instances, split="train")
    train = datasets.Dataset.from_list(rl_rows(instances))
    hardware.select()
    with MODEL_LOADING:  # a vision-language model generates and trains through its processor
        tokenizer = AutoTokenizer.from_pretrained(parent.path, padding_side="left")
        processing = load_processor(parent.path) if vision else tokenizer
    if vision:
        processing.tokenizer.padding_side = "left"
    check_rl_template(processing, parent.path)
    limits = episode_limits(cfg, processing, instances, vision=vision)
    start = starting_model(parent, cfg.lora, hardware)
    tuner = hardware.thread_tuner()
    with checkpoints.staging(final, write=main, resume=True) as out:
        args = grpo_arguments(
            cfg,
            hardware,
            trainer_dir(workspace, out, model_id, report_to),
            limits=limits,
            report_to=report_to,
            run_name=model_id,
            save_steps=save_steps,
        )
        trainer_class = episode_trainer_class()
        trainer_class.final_tools = final_tools(bootcamps)
        trainer_class.drops_equal_groups = cfg.drop_equal_groups
        trainer = quiet(
            trainer_class(
                model=start.model,
                args=args,
                train_dataset=train,
                processing_class=processing,
                environment_factory=environment_factories(bootcamps, images=vision),
                peft_config=start.peft_config,
                callbacks=[progress_callback("rl", "RL"), *threads_callback(tuner)],
            )
        )
        resume = last_checkpoint(Path(args.output_dir))
        started = time.perf_counter()
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        elapsed = time.perf_counter() - started
        trainer.save_model(str(out))  # every process: gathers sharded weights; only the main one writes
        history = trainer.state.log_history
        rewards = [(h["step"], h["reward"]) for h in history if "reward" in h]
        clipped = [h["completions/clipped_ratio"] for h in history if "completions/clipped_ratio" in h]
        metrics = {
            "steps": trainer.state.global_step,
            "resumed_from_step": resumed_step(resume),
            "seconds": round(elapsed, 1),
            "reward_curve": rewards,
            "entropy_curve": [(h["step"], h["entropy"]) for h in history if "entropy" in h],  # of sampled tokens
            "first_reward": rewards[0][1] if rewards else None,
            "last_reward": rewards[-1][1] if rewards else None,
            "instances": len(instances),
            "max_completion_length": limits.completion_tokens,
            "max_tool_calling_iterations": limits.tool_rounds,
            "clipped_ratio": round(sum(clipped) / len(clipped), 4) if clipped else None,
            "device": hardware.kind,
            "precision": hardware.precision,
            **(tuner.summary() if tuner is not None else {}),
            **adapter_metrics(start, trainer.model, cfg.lora),
        }
        if not main:
            return TrainResult(checkpoints.Checkpoint(model_id, "rl", final, parent.model_id, None, metrics), metrics)
        if vision:
            save_processor(processing, out)
        else:
            tokenizer.save_pretrained(str(out))
        mark_trained(out, metrics)  # last: the trainer's resumable checkpoints stay until the row below
    ckpt = checkpoints.register(store, model_id, "rl", final, parent=parent.model_id, metrics=metrics)
    clear_trainer(final, trainer_dir(workspace, final, model_id, report_to))
    return TrainResult(ckpt, metrics)
